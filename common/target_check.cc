#include "common/target_check.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>

namespace gnmr {

std::string TargetProblem(const std::string& target) {
  struct stat st;
  if (target.rfind("unix:", 0) == 0) {
    std::string path = target.substr(5);
    if (path.rfind("//", 0) == 0) path = path.substr(2);  // unix:///abs
    if (path.empty()) return target + ": the socket path is empty";
    if (::stat(path.c_str(), &st) != 0) {
      const int err = errno;
      return target + ": " + std::strerror(err) + (err == ENOENT ? " (ENOENT)" : "") +
             "; is gnmrd running and listening there?";
    }
    if (!S_ISSOCK(st.st_mode)) return target + ": '" + path + "' is not a socket";
    return "";
  }
  if (target.rfind("unix-abstract:", 0) == 0 || target.find("://") != std::string::npos) {
    return "";
  }
  // host:port cannot contain '/'; a path does (or names an existing file).
  const bool looks_like_path = target.find('/') != std::string::npos;
  if (looks_like_path || ::stat(target.c_str(), &st) == 0) {
    if (::stat(target.c_str(), &st) == 0) {
      return "'" + target + "' is a path, not a gRPC target: did you mean unix:" + target + "?";
    }
    return "'" + target + "' looks like a path: Unix sockets are written unix:" + target;
  }
  return "";
}

}  // namespace gnmr
