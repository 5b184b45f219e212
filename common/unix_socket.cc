#include "common/unix_socket.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace gnmr {
namespace {

Status Failed(const std::string& message) {
  return Status(StatusCode::kFailedPrecondition, message);
}

std::string Errno(int err) { return std::strerror(err); }

int ConnectUnix(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", path.c_str());
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return errno;
  const int rc = ::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr));
  const int err = rc == 0 || errno == EAGAIN || errno == EINPROGRESS ? 0 : errno;
  ::close(fd);
  return err;
}

std::string Dir(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

}  // namespace

Status PrepareUnixSocket(const std::string& path) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) return Status::Ok();  // nothing there
  if (!S_ISSOCK(st.st_mode)) {
    return Failed("cannot listen on unix:" + path +
                  ": the path exists and is not a socket (remove it or choose another path)");
  }
  const int err = ConnectUnix(path);
  if (err == 0) {
    return Failed(
        "cannot listen on unix:" + path +
        ": another process is listening on it (a second gnmrd or gnmr-relay?); stop it first");
  }
  if (err != ECONNREFUSED) {
    return Failed("cannot listen on unix:" + path +
                  ": cannot tell whether the socket there is "
                  "in use: " +
                  Errno(err));
  }
  // Stale: left by a server that died without removing it.
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
    return Failed("cannot listen on unix:" + path +
                  ": cannot remove the stale socket: " + Errno(errno));
  }
  return Status::Ok();
}

std::optional<Status> DiagnoseUnixListen(const std::string& address) {
  const std::string path = address.substr(5);
  const std::string where = "cannot listen on " + address + ": ";
  if (path.size() >= sizeof(sockaddr_un{}.sun_path)) {
    return Failed(where + "the path is " + std::to_string(path.size()) +
                  " bytes long; Unix socket paths have at most " +
                  std::to_string(sizeof(sockaddr_un{}.sun_path) - 1));
  }
  const std::string dir = Dir(path);
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0) return Failed(where + dir + ": " + Errno(errno));
  if (!S_ISDIR(st.st_mode)) return Failed(where + dir + " is not a directory");
  // Try it: the kernel says best why a socket cannot be made there.
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", path.c_str());
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Failed(where + "socket: " + Errno(errno));
  const int rc = ::bind(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr));
  const int err = rc == 0 ? 0 : errno;
  ::close(fd);
  if (rc == 0) {
    ::unlink(path.c_str());
    return std::nullopt;
  }
  if (err == EACCES || err == EPERM || err == EROFS) {
    return Failed(where + "cannot create the socket in " + dir + ": " + Errno(err) +
                  " (the directory must be writable by uid " + std::to_string(::geteuid()) + ")");
  }
  return Failed(where + Errno(err));
}

}  // namespace gnmr
