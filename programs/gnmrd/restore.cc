#include "programs/gnmrd/restore.h"

#include <string>

#include <spdlog/spdlog.h>

#include "common/text.h"

namespace gnmr {
namespace {

StatusOr<std::unique_ptr<Job>> RestoreOne(const store::SnapshotStore::Loaded& loaded,
                                          const JobOptions& options, JobListener* listener) {
  v1::JobMeta meta;
  if (!meta.ParseFromString(loaded.job_meta)) return DataLoss("job metadata does not parse");
  return Job::Restore(loaded.state, meta, options, listener);
}

std::string Describe(const store::SnapshotStore::Loaded& loaded) {
  const v1::ControllerState& s = loaded.state;
  return std::string(s.has_last_step() ? "last step " + std::to_string(s.last_step())
                                       : "never decided") +
         ", " + std::to_string(s.units_size()) + " units, " + std::to_string(s.recovery_size()) +
         " in recovery";
}

std::string Join(const std::vector<std::string>& items) {
  std::string out;
  for (const std::string& i : items) out += (out.empty() ? "" : ", ") + i;
  return out;
}

// No generation restores: keep the files where nothing overwrites them.
void SetAside(store::SnapshotStore& store, const std::string& id, const std::string& why) {
  StatusOr<std::vector<std::string>> kept = store.SetAside(id);
  if (kept.ok()) {
    spdlog::critical(
        "job {}: NOT RESTORED, its controller state is lost to this daemon: {}; the snapshot "
        "files are kept as {}; a new registration of the job starts it afresh",
        id, why, Join(*kept));
  } else {
    spdlog::critical(
        "job {}: NOT RESTORED: {}; moving its snapshot files aside failed too ({}): the next "
        "registration of the job may overwrite them",
        id, why, EscapeMessageForLog(kept.status().ToString()));
  }
}

}  // namespace

std::vector<std::unique_ptr<Job>> RestoreJobs(store::SnapshotStore& store,
                                              const JobOptions& options, JobListener* listener) {
  std::vector<std::unique_ptr<Job>> jobs;
  StatusOr<std::vector<std::string>> ids = store.ListJobs();
  if (!ids.ok()) {
    spdlog::error("cannot list saved jobs: {}", ids.status().ToString());
    return jobs;
  }
  for (const std::string& raw_id : *ids) {
    const std::string id = EscapeForLog(raw_id);  // ids come from disk: for the log
    StatusOr<store::SnapshotStore::Loaded> loaded = store.Load(raw_id);
    if (!loaded.ok()) {
      SetAside(store, raw_id,
               "no intact snapshot: " + EscapeMessageForLog(loaded.status().ToString()));
      continue;
    }
    StatusOr<std::unique_ptr<Job>> job = RestoreOne(*loaded, options, listener);
    if (job.ok() && !loaded->from_previous) {
      spdlog::info("job {}: restored: {}", id, Describe(*loaded));
      jobs.push_back(std::move(job).value());
      continue;
    }
    std::string why;
    if (!job.ok()) {
      why = (loaded->from_previous ? "previous snapshot (the newest is damaged): "
                                   : "newest snapshot: ") +
            EscapeMessageForLog(job.status().ToString());
      if (loaded->from_previous) {
        SetAside(store, raw_id, why);
        continue;
      }
      loaded = store.LoadPrevious(raw_id);
      if (!loaded.ok()) {
        SetAside(store, raw_id,
                 why + "; previous snapshot: " + EscapeMessageForLog(loaded.status().ToString()));
        continue;
      }
      job = RestoreOne(*loaded, options, listener);
      if (!job.ok()) {
        SetAside(store, raw_id,
                 why + "; previous snapshot: " + EscapeMessageForLog(job.status().ToString()));
        continue;
      }
    } else {
      why = "newest snapshot damaged";
    }
    // The previous generation restored: make it the newest on disk, so the
    // next Save keeps it (not the bad one) as the fallback.
    StatusOr<std::string> kept = store.ReplaceNewestByPrevious(raw_id);
    spdlog::error(
        "job {}: {}; restored the PREVIOUS snapshot instead ({}); the steps since it "
        "are lost; {}",
        id, why, Describe(*loaded),
        kept.ok() ? "the newest is kept as " + *kept
                  : "keeping the newest failed: " + EscapeMessageForLog(kept.status().ToString()));
    jobs.push_back(std::move(job).value());
  }
  return jobs;
}

}  // namespace gnmr
