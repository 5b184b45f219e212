#include "daemon/store/state_dir.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>

#include "daemon/store/job_dir.h"

namespace gnmr {
namespace store {
namespace {

Status Failed(const std::string& message) {
  return Status(StatusCode::kFailedPrecondition, message);
}

// The pid written in the lock file, or "" if unreadable.
std::string HolderPid(int fd) {
  char buf[32] = {};
  const ssize_t n = ::pread(fd, buf, sizeof(buf) - 1, 0);
  if (n <= 0) return "";
  std::string pid(buf, static_cast<size_t>(n));
  while (!pid.empty() && (pid.back() == '\n' || pid.back() == ' ')) pid.pop_back();
  for (char c : pid) {
    if (c < '0' || c > '9') return "";
  }
  return pid;
}

// Creates, renames and removes a probe file in `dir` (what a snapshot does).
Status ProbeDir(const std::string& dir) {
  const std::string base = dir + "/.gnmrd-write-probe-" + std::to_string(::getpid());
  const int fd = ::open((base + ".tmp").c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) {
    return Failed("state dir " + dir + " is not writable: " + std::strerror(errno) +
                  " (gnmrd runs as uid " + std::to_string(::geteuid()) + ")");
  }
  ::close(fd);
  Status s;
  if (::rename((base + ".tmp").c_str(), base.c_str()) != 0) {
    s = Failed("state dir " + dir + ": cannot rename files in it: " + std::strerror(errno));
    ::unlink((base + ".tmp").c_str());
    return s;
  }
  if (::unlink(base.c_str()) != 0) {
    s = Failed("state dir " + dir + ": cannot remove files in it: " + std::strerror(errno));
  }
  return s;
}

}  // namespace

std::string StateDirLock::LockPath(const std::string& state_dir) {
  return state_dir + "/gnmrd.lock";
}

StatusOr<std::unique_ptr<StateDirLock>> StateDirLock::Acquire(const std::string& state_dir) {
  const std::string path = LockPath(state_dir);
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) {
    return Failed("cannot open the lock file " + path + ": " + std::strerror(errno));
  }
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    const std::string pid = HolderPid(fd);
    ::close(fd);
    if (err == EWOULDBLOCK) {
      return Failed("state dir " + state_dir + " is locked by " +
                    (pid.empty() ? std::string("another process") : "pid " + pid) +
                    " (another gnmrd uses it; one daemon per state dir)");
    }
    return Failed("cannot lock " + path + ": " + std::strerror(err));
  }
  const std::string pid = std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, pid.data(), pid.size(), 0) < 0) {
    const int err = errno;
    ::close(fd);
    return Failed("cannot write " + path + ": " + std::strerror(err));
  }
  return std::unique_ptr<StateDirLock>(new StateDirLock(fd));
}

StateDirLock::~StateDirLock() { ::close(fd_); }

Status CheckStateDirWritable(const std::string& state_dir) {
  GNMR_RETURN_IF_ERROR(ProbeDir(state_dir));
  struct stat st;
  const std::string jobs = JobsDir(state_dir);
  if (::stat(jobs.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) return ProbeDir(jobs);
  return Status::Ok();
}

}  // namespace store
}  // namespace gnmr
