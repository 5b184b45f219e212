// Shared helpers of the daemon-config tests.
#pragma once

#include <sys/stat.h>

#include <string>
#include <vector>

#include "daemon/daemon_config/daemon_config.h"
#include "tests/store/scratch_dir.h"

namespace gnmr {
namespace testing_util {

// A machine with nothing writable and no environment variables, so the
// machine defaults are the last fallbacks: /tmp/gnmrd-<uid>.sock etc.
inline Environment BareMachine(uint32_t uid = 1234) {
  Environment env;
  env.getenv = [](const std::string&) { return std::nullopt; };
  env.writable_dir = [](const std::string&) { return false; };
  env.uid = uid;
  return env;
}

// LoadDaemonConfig with the arguments after "gnmrd".
inline StatusOr<LoadedConfig> LoadWith(const std::vector<std::string>& args,
                                       const Environment& env = BareMachine()) {
  std::vector<const char*> argv = {"gnmrd"};
  for (const std::string& a : args) argv.push_back(a.c_str());
  return LoadDaemonConfig(static_cast<int>(argv.size()), argv.data(), env);
}

inline void WriteFileWithMode(const std::string& path, const std::string& text, mode_t mode) {
  WriteFileOrFail(path, text);
  ::chmod(path.c_str(), mode);
}

}  // namespace testing_util
}  // namespace gnmr
