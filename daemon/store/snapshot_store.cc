#include "daemon/store/snapshot_store.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>

#include "daemon/store/durable_file.h"
#include "daemon/store/job_dir.h"
#include "daemon/store/snapshot_format.h"

namespace gnmr {
namespace store {
namespace {

constexpr char kSnapshotName[] = "snapshot.pb";
constexpr char kPreviousName[] = "snapshot.prev.pb";

// "<path>.unrestorable-<unix ms>", not yet taken.
std::string AsidePath(const std::string& path, const TimeSource& clock) {
  const std::string base = path + ".unrestorable-" + std::to_string(clock.UnixMillis());
  std::string out = base;
  struct stat st;
  for (int n = 2; ::lstat(out.c_str(), &st) == 0; ++n) {
    out = base + "-" + std::to_string(n);
  }
  return out;
}

bool IsDir(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// The job directories under jobs/, by name (not sorted).
StatusOr<std::vector<std::string>> JobDirNames(const std::string& state_dir) {
  std::vector<std::string> names;
  const std::string jobs = JobsDir(state_dir);
  DIR* d = ::opendir(jobs.c_str());
  if (d == nullptr) {
    if (errno == ENOENT) return names;
    return Internal("opendir " + jobs + ": " + std::strerror(errno));
  }
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    if (IsDir(jobs + "/" + name)) names.push_back(name);
  }
  ::closedir(d);
  return names;
}

}  // namespace

SnapshotStore::SnapshotStore(std::string state_dir, const TimeSource* clock)
    : state_dir_(std::move(state_dir)), clock_(clock) {}

std::string SnapshotStore::SnapshotPath(const std::string& job_id) const {
  return JobDir(state_dir_, job_id) + "/" + kSnapshotName;
}

Status SnapshotStore::Save(const std::string& job_id, v1::ControllerState state,
                           const std::string& job_meta) {
  StatusOr<std::string> bytes = EncodeSnapshotFrame(
      job_id, state.ByteSizeLong(),
      [&state](std::string* out) { return state.AppendToString(out); }, job_meta,
      clock_->UnixMillis());
  v1::ControllerState().Swap(&state);  // freed before the write
  if (!bytes.ok()) {
    return Status(bytes.status().code(),
                  "job " + job_id + ": cannot encode its snapshot: " + bytes.status().message());
  }
  if (bytes->size() > kMaxSnapshotBytes) {
    return Status(StatusCode::kResourceExhausted,
                  "job " + job_id + ": snapshot of " + std::to_string(bytes->size()) +
                      " bytes exceeds " + std::to_string(kMaxSnapshotBytes));
  }
  const std::string dir = JobDir(state_dir_, job_id);
  GNMR_RETURN_IF_ERROR(MakeDirs(dir));
  return ReplaceFileDurably(dir + "/" + kSnapshotName, *bytes, dir + "/" + kPreviousName);
}

StatusOr<SnapshotStore::Loaded> SnapshotStore::LoadFile(const std::string& path,
                                                        const std::string& job_id) const {
  StatusOr<std::string> bytes = ReadWholeFile(path, kMaxSnapshotBytes);
  if (!bytes.ok()) return bytes.status();
  StatusOr<SnapshotFrame> frame = DecodeSnapshotFrame(*bytes, path);
  if (!frame.ok()) return frame.status();
  if (frame->job_id != job_id) {
    return DataLoss(path + ": snapshot belongs to another job id");
  }
  Loaded out;
  if (!out.state.ParseFromString(frame->state)) {
    return DataLoss(path + ": controller state does not parse");
  }
  out.job_id = std::move(frame->job_id);
  out.job_meta = std::move(frame->meta);
  out.saved_unix_ms = frame->saved_unix_ms;
  return out;
}

StatusOr<SnapshotStore::Loaded> SnapshotStore::Load(const std::string& job_id) const {
  const std::string dir = JobDir(state_dir_, job_id);
  StatusOr<Loaded> newest = LoadFile(dir + "/" + kSnapshotName, job_id);
  if (newest.ok() || newest.status().code() != StatusCode::kDataLoss) {
    return newest;
  }
  StatusOr<Loaded> previous = LoadFile(dir + "/" + kPreviousName, job_id);
  if (!previous.ok()) {
    return DataLoss(newest.status().message() +
                    "; previous generation: " + previous.status().message());
  }
  previous->from_previous = true;
  return previous;
}

StatusOr<SnapshotStore::Loaded> SnapshotStore::LoadPrevious(const std::string& job_id) const {
  StatusOr<Loaded> previous = LoadFile(JobDir(state_dir_, job_id) + "/" + kPreviousName, job_id);
  if (previous.ok()) previous->from_previous = true;
  return previous;
}

StatusOr<std::string> SnapshotStore::ReplaceNewestByPrevious(const std::string& job_id) {
  const std::string dir = JobDir(state_dir_, job_id);
  const std::string newest = dir + "/" + kSnapshotName;
  const std::string previous = dir + "/" + kPreviousName;
  const std::string kept = AsidePath(newest, *clock_);
  // Every step leaves complete files: first a second name for the newest,
  // then the previous one renamed over it from a temporary hard link.
  if (::link(newest.c_str(), kept.c_str()) != 0) {
    return ErrnoStatus("link " + newest + " " + kept, errno);
  }
  const std::string tmp = newest + ".tmp-restore";
  ::unlink(tmp.c_str());
  if (::link(previous.c_str(), tmp.c_str()) != 0) {
    return ErrnoStatus("link " + previous + " " + tmp, errno);
  }
  if (::rename(tmp.c_str(), newest.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    return ErrnoStatus("rename " + tmp + " " + newest, err);
  }
  GNMR_RETURN_IF_ERROR(FsyncDir(dir));
  return kept;
}

StatusOr<std::vector<std::string>> SnapshotStore::SetAside(const std::string& job_id) {
  const std::string dir = JobDir(state_dir_, job_id);
  std::vector<std::string> kept;
  // The previous generation first: a crash in between leaves snapshot.pb,
  // so the next start sees the job again instead of a lone previous file
  // that the next Save would overwrite.
  for (const char* name : {kPreviousName, kSnapshotName}) {
    const std::string path = dir + "/" + name;
    const std::string aside = AsidePath(path, *clock_);
    if (::rename(path.c_str(), aside.c_str()) != 0) {
      if (errno == ENOENT) continue;
      return ErrnoStatus("rename " + path + " " + aside, errno);
    }
    kept.push_back(aside);
  }
  GNMR_RETURN_IF_ERROR(FsyncDir(dir));
  return kept;
}

StatusOr<std::vector<std::string>> SnapshotStore::ListJobs() const {
  StatusOr<std::vector<std::string>> names = JobDirNames(state_dir_);
  if (!names.ok()) return names.status();
  std::vector<std::string> jobs;
  for (const std::string& name : *names) {
    const std::string dir = JobsDir(state_dir_) + "/" + name;
    struct stat st;
    if (::stat((dir + "/" + kSnapshotName).c_str(), &st) != 0) continue;
    std::optional<std::string> id = UnescapeJobDir(name);
    // A shortened (hashed) name: an intact frame knows the id.
    for (const char* file : {kSnapshotName, kPreviousName}) {
      if (id) break;
      StatusOr<std::string> bytes = ReadWholeFile(dir + "/" + file, kMaxSnapshotBytes);
      if (!bytes.ok()) continue;
      StatusOr<SnapshotFrame> frame = DecodeSnapshotFrame(*bytes, dir);
      if (frame.ok() && EscapeJobId(frame->job_id) == name) {
        id = std::move(frame->job_id);
      }
    }
    if (id) jobs.push_back(std::move(*id));
  }
  std::sort(jobs.begin(), jobs.end());
  return jobs;
}

Status SnapshotStore::RemoveTempFiles() const {
  StatusOr<std::vector<std::string>> names = JobDirNames(state_dir_);
  if (!names.ok()) return names.status();
  Status result;
  for (const std::string& name : *names) {
    const std::string dir = JobsDir(state_dir_) + "/" + name;
    for (const char* file : {kSnapshotName, kPreviousName}) {
      Status s = store::RemoveTempFiles(dir, file);
      if (!s.ok() && result.ok()) result = s;
    }
  }
  return result;
}

}  // namespace store
}  // namespace gnmr
