#include "daemon/store/job_removal.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <vector>

#include "daemon/store/durable_file.h"
#include "daemon/store/job_dir.h"

namespace gnmr {
namespace store {
namespace {

constexpr char kDeletedPrefix[] = ".deleted-";

// Names in `dir` other than "." and ".."; NotFound if it does not exist.
StatusOr<std::vector<std::string>> Entries(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return ErrnoStatus("opendir " + dir, errno);
  std::vector<std::string> names;
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name != "." && name != "..") names.push_back(name);
  }
  ::closedir(d);
  return names;
}

// Deletes the files in `dir`, then `dir` (a job's directory holds files
// only; anything else makes rmdir fail and is reported).
Status RemoveTree(const std::string& dir) {
  StatusOr<std::vector<std::string>> names = Entries(dir);
  if (!names.ok())
    return names.status().code() == StatusCode::kNotFound ? Status::Ok() : names.status();
  Status result;
  for (const std::string& name : *names) {
    const std::string path = dir + "/" + name;
    if (::unlink(path.c_str()) != 0 && errno != ENOENT && result.ok()) {
      result = ErrnoStatus("unlink " + path, errno);
    }
  }
  if (::rmdir(dir.c_str()) != 0 && errno != ENOENT && result.ok()) {
    result = ErrnoStatus("rmdir " + dir, errno);
  }
  return result;
}

}  // namespace

Status RemoveJobDir(const std::string& state_dir, const std::string& job_id,
                    const TimeSource& clock) {
  const std::string jobs = JobsDir(state_dir);
  const std::string dir = JobDir(state_dir, job_id);
  const std::string base =
      jobs + "/" + kDeletedPrefix + EscapeJobId(job_id) + "-" + std::to_string(clock.UnixMillis());
  std::string doomed = base;
  struct stat st;
  for (int n = 2; ::lstat(doomed.c_str(), &st) == 0; ++n) doomed = base + "-" + std::to_string(n);
  if (::rename(dir.c_str(), doomed.c_str()) != 0) {
    if (errno == ENOENT) return Status::Ok();  // no files (yet)
    return ErrnoStatus("rename " + dir + " " + doomed, errno);
  }
  // The rename is the job's end on disk: durable before anything else.
  Status s = FsyncDir(jobs);
  Status t = RemoveTree(doomed);
  return s.ok() ? t : s;
}

StatusOr<int> RemoveDeletedJobDirs(const std::string& state_dir) {
  const std::string jobs = JobsDir(state_dir);
  StatusOr<std::vector<std::string>> names = Entries(jobs);
  if (!names.ok()) {
    if (names.status().code() == StatusCode::kNotFound) return 0;
    return names.status();
  }
  int removed = 0;
  for (const std::string& name : *names) {
    if (name.rfind(kDeletedPrefix, 0) != 0) continue;
    GNMR_RETURN_IF_ERROR(RemoveTree(jobs + "/" + name));
    ++removed;
  }
  return removed;
}

}  // namespace store
}  // namespace gnmr
