// SnapshotStore: per-job controller snapshots on the local file system
// (docs/architecture.md, "gnmrd: jobs and the store": embedded, no external
// service).
//
//   <state_dir>/jobs/<escaped job id>/snapshot.pb        newest snapshot
//   <state_dir>/jobs/<escaped job id>/snapshot.prev.pb   the one before it
//
// Each file is a checksummed frame (snapshot_format.h) holding the job id,
// the serialized gnmr.v1.ControllerState and the caller's job metadata
// (opaque bytes). Save replaces the file atomically and durably
// (durable_file.h), keeping the replaced one as snapshot.prev.pb. Load
// never returns garbage: a damaged newest file (DataLoss) falls back to the
// previous generation, and if that is damaged too the result is DataLoss.
//
// A snapshot can be intact (checksum good) and still not restore (the job
// layout does not match the controller state). The caller then falls back
// with LoadPrevious and ReplaceNewestByPrevious, and when no generation
// restores it moves both aside (SetAside): the files are kept as
// snapshot*.unrestorable-<unix ms> for inspection, the job is no longer
// listed, and nothing a new registration of the job writes overwrites them.
//
// Job ids are untrusted and escaped into directory names (job_dir.h): no id
// can reach outside <state_dir>/jobs.
//
// Thread-safety: Save, Load and ListJobs may run concurrently for different
// jobs. Saves of one job should be serialised (SnapshotWriter does); even
// when they are not, each file stays complete.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/time_source.h"
#include "gnmr/status.h"
#include "gnmr/v1/controller.pb.h"

namespace gnmr {
namespace store {

class SnapshotStore {
 public:
  // Larger snapshots are refused by Save and Load.
  static constexpr size_t kMaxSnapshotBytes = size_t{1} << 30;

  // Nothing is created until the first Save. `clock` (never null; it must
  // outlive the store) dates the snapshots and names the files set aside.
  explicit SnapshotStore(std::string state_dir, const TimeSource* clock = &TimeSource::Real());
  // The clock it dates snapshots by (SnapshotWriter's success times too).
  const TimeSource& clock() const { return *clock_; }

  struct Loaded {
    std::string job_id;
    v1::ControllerState state;
    std::string job_meta;
    int64_t saved_unix_ms = 0;  // the store's clock (WallNow) at the Save
    // snapshot.pb was damaged and this is the generation before it.
    bool from_previous = false;
  };

  // Writes the job's snapshot (creating its directory). On error the
  // previous snapshot is untouched.
  // `state` is taken (moved in by SnapshotWriter) and freed once encoded,
  // before the file is written: a large job's snapshot holds one copy of
  // its state at a time besides the frame.
  Status Save(const std::string& job_id, v1::ControllerState state, const std::string& job_meta);

  // NotFound if the job has no snapshot; DataLoss if neither generation is
  // intact (the message names the file and what is wrong).
  StatusOr<Loaded> Load(const std::string& job_id) const;

  // The previous generation alone (from_previous set); NotFound if there is
  // none, DataLoss if it is damaged.
  StatusOr<Loaded> LoadPrevious(const std::string& job_id) const;

  // Keeps the newest snapshot as snapshot.pb.unrestorable-<unix ms> and
  // puts a copy of the previous generation in its place (atomically), so
  // that the next Save keeps that good one as the previous generation
  // instead of the newest. Returns the path the newest was kept as.
  StatusOr<std::string> ReplaceNewestByPrevious(const std::string& job_id);

  // Renames both generations to <name>.unrestorable-<unix ms>; the job then
  // has no snapshot (ListJobs skips it). Returns the paths kept.
  StatusOr<std::vector<std::string>> SetAside(const std::string& job_id);

  // The ids of the jobs with a snapshot, sorted. A missing state directory
  // is an empty list.
  StatusOr<std::vector<std::string>> ListJobs() const;

  // Deletes temp files left by a process that died mid-write. Call once at
  // startup, before any Save.
  Status RemoveTempFiles() const;

  const std::string& state_dir() const { return state_dir_; }
  std::string SnapshotPath(const std::string& job_id) const;

 private:
  StatusOr<Loaded> LoadFile(const std::string& path, const std::string& job_id) const;

  std::string state_dir_;
  const TimeSource* const clock_;
};

}  // namespace store
}  // namespace gnmr
