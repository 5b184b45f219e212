#include "daemon/store/durable_file.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

namespace gnmr {
namespace store {
namespace {

std::string DirName(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

std::string TempPath(const std::string& path) {
  static std::atomic<uint64_t> counter{0};
  return path + ".tmp-" + std::to_string(::getpid()) + "-" + std::to_string(counter.fetch_add(1));
}

// Closes on scope exit; Close() reports the close(2) error.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  int Close() {
    const int r = ::close(fd_);
    fd_ = -1;
    return r;
  }

 private:
  int fd_;
};

}  // namespace

Status ErrnoStatus(const std::string& what, int err) {
  const std::string text = what + ": " + std::strerror(err);
  switch (err) {
    case ENOENT:
      return NotFound(text);
    case ENOSPC:
    case EDQUOT:
      return Status(StatusCode::kResourceExhausted, text);
    case EACCES:
    case EPERM:
    case EROFS:
      return Status(StatusCode::kPermissionDenied, text);
    default:
      return Internal(text);
  }
}

Status OpenWithSize(const std::string& path, int flags, int* fd, uint64_t* size) {
  *fd = ::open(path.c_str(), flags | O_CLOEXEC, 0640);
  if (*fd < 0) return ErrnoStatus("open " + path, errno);
  struct stat st;
  if (::fstat(*fd, &st) != 0) {
    const Status s = ErrnoStatus("stat " + path, errno);
    ::close(*fd);
    *fd = -1;
    return s;
  }
  *size = static_cast<uint64_t>(st.st_size);
  return Status::Ok();
}

Status WriteAll(int fd, std::string_view bytes, const std::string& what) {
  while (!bytes.empty()) {
    const ssize_t n = ::write(fd, bytes.data(), bytes.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus("write " + what, errno);
    }
    bytes.remove_prefix(static_cast<size_t>(n));
  }
  return Status::Ok();
}

Status FsyncDir(const std::string& dir) {
  Fd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (fd.get() < 0) return ErrnoStatus("open " + dir, errno);
  if (::fsync(fd.get()) != 0) return ErrnoStatus("fsync " + dir, errno);
  return Status::Ok();
}

Status MakeDirs(const std::string& path, mode_t mode) {
  struct stat st;
  if (::stat(path.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) return Status::Ok();
    return FailedPrecondition(path + ": exists and is not a directory");
  }
  const std::string parent = DirName(path);
  if (parent != path) {
    GNMR_RETURN_IF_ERROR(MakeDirs(parent, mode));
  }
  if (::mkdir(path.c_str(), mode) != 0 && errno != EEXIST) {
    return ErrnoStatus("mkdir " + path, errno);
  }
  return FsyncDir(parent);
}

Status ReplaceFileDurably(const std::string& path, std::string_view bytes,
                          const std::string& previous, mode_t mode) {
  const std::string dir = DirName(path);
  const std::string tmp = TempPath(path);
  {
    Fd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode));
    if (fd.get() < 0) return ErrnoStatus("create " + tmp, errno);
    Status s = WriteAll(fd.get(), bytes, tmp);
    if (s.ok() && ::fsync(fd.get()) != 0) s = ErrnoStatus("fsync " + tmp, errno);
    if (s.ok() && fd.Close() != 0) s = ErrnoStatus("close " + tmp, errno);
    if (!s.ok()) {
      ::unlink(tmp.c_str());
      return s;
    }
  }
  if (!previous.empty()) {
    // Keep the old generation: link it under a temp name, then rename that
    // over `previous`, so `previous` is also always complete.
    const std::string prev_tmp = TempPath(previous);
    if (::link(path.c_str(), prev_tmp.c_str()) == 0) {
      if (::rename(prev_tmp.c_str(), previous.c_str()) != 0) {
        const int err = errno;
        ::unlink(prev_tmp.c_str());
        ::unlink(tmp.c_str());
        return ErrnoStatus("rename " + prev_tmp, err);
      }
    } else if (errno != ENOENT) {
      const int err = errno;
      ::unlink(tmp.c_str());
      return ErrnoStatus("link " + path, err);
    }
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    return ErrnoStatus("rename " + tmp, err);
  }
  return FsyncDir(dir);
}

StatusOr<std::string> ReadWholeFile(const std::string& path, size_t max_bytes) {
  int raw = -1;
  uint64_t size = 0;
  GNMR_RETURN_IF_ERROR(OpenWithSize(path, O_RDONLY, &raw, &size));
  Fd fd(raw);
  if (size > max_bytes) {
    return Status(StatusCode::kResourceExhausted, path + ": " + std::to_string(size) +
                                                      " bytes, more than the limit of " +
                                                      std::to_string(max_bytes));
  }
  std::string out(static_cast<size_t>(size), '\0');
  size_t got = 0;
  while (got < out.size()) {
    const ssize_t n = ::read(fd.get(), &out[got], out.size() - got);
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus("read " + path, errno);
    }
    if (n == 0) break;  // shrank while reading: return what is there
    got += static_cast<size_t>(n);
  }
  out.resize(got);
  return out;
}

Status RemoveTempFiles(const std::string& dir, const std::string& name) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return ErrnoStatus("opendir " + dir, errno);
  const std::string prefix = name + ".tmp-";
  Status result;
  while (const dirent* e = ::readdir(d)) {
    const std::string entry = e->d_name;
    if (entry.compare(0, prefix.size(), prefix) != 0) continue;
    const std::string full = dir + "/" + entry;
    if (::unlink(full.c_str()) != 0 && errno != ENOENT && result.ok()) {
      result = ErrnoStatus("unlink " + full, errno);
    }
  }
  ::closedir(d);
  return result;
}

}  // namespace store
}  // namespace gnmr
