#include "programs/gnmrd/fd_limit.h"

#include <sys/resource.h>

#include <cerrno>
#include <cstring>
#include <fstream>

namespace gnmr {
namespace {

// The most a process may open (fs.nr_open), the cap of an "unlimited" hard
// limit: setrlimit refuses RLIM_INFINITY for RLIMIT_NOFILE.
uint64_t KernelMaxOpen() {
  std::ifstream in("/proc/sys/fs/nr_open");
  uint64_t n = 0;
  if (in >> n && n > 0) return n;
  return uint64_t{1} << 20;  // the kernel's default
}

}  // namespace

FdLimit RaiseFdLimit() {
  FdLimit out;
  struct rlimit rl;
  if (::getrlimit(RLIMIT_NOFILE, &rl) != 0) {
    out.error = std::string("getrlimit: ") + std::strerror(errno);
    return out;
  }
  out.soft_before = out.soft = rl.rlim_cur;
  out.hard = rl.rlim_max;
  const uint64_t target = rl.rlim_max == RLIM_INFINITY ? KernelMaxOpen() : rl.rlim_max;
  if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < target) {
    rl.rlim_cur = target;
    if (::setrlimit(RLIMIT_NOFILE, &rl) == 0) {
      out.soft = target;
    } else {
      out.error = std::string("setrlimit: ") + std::strerror(errno);
    }
  }
  return out;
}

std::string DescribeFdLimit(const FdLimit& l, bool* low) {
  auto number = [](uint64_t n) {
    return n == RLIM_INFINITY ? std::string("unlimited") : std::to_string(n);
  };
  std::string line;
  if (l.soft != l.soft_before) {
    line = "open files: soft limit raised from " + number(l.soft_before) + " to " + number(l.soft) +
           " (hard limit " + number(l.hard) + ")";
  } else if (!l.error.empty()) {
    line = "open files: soft limit " + number(l.soft) + ", not raised to the hard limit " +
           number(l.hard) + ": " + l.error;
  } else {
    line = "open files: soft limit " + number(l.soft) + " (hard limit " + number(l.hard) + ")";
  }
  *low = l.soft < kFixedDescriptors + 1024;
  if (*low) {
    line += "; gnmrd holds up to " + std::to_string(kFixedDescriptors) +
            " files besides one per connection, so it takes about " +
            std::to_string(l.soft > kFixedDescriptors ? l.soft - kFixedDescriptors : 0) +
            " connections: raise the hard limit (LimitNOFILE=, ulimit -Hn; docs/limits.md)";
  }
  return line;
}

}  // namespace gnmr
