#include "common/default_target.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <vector>

#include "common/defaults.h"

namespace gnmr {
namespace {

bool IsSocket(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISSOCK(st.st_mode);
}

}  // namespace

std::string DefaultTarget() {
  if (const char* env = std::getenv(kTargetEnv); env != nullptr && *env != '\0') return env;
  std::vector<std::string> candidates = {"/run/gnmr/gnmrd.sock"};
  if (const char* runtime = std::getenv("XDG_RUNTIME_DIR"); runtime && runtime[0] == '/') {
    candidates.push_back(std::string(runtime) + "/gnmrd.sock");
  }
  candidates.push_back("/tmp/gnmrd-" + std::to_string(::getuid()) + ".sock");
  for (const std::string& path : candidates) {
    if (IsSocket(path)) return "unix:" + path;
  }
  return kDefaultTarget;
}

}  // namespace gnmr
