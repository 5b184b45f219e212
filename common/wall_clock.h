// Wall-clock time as Unix seconds, for timestamps and ages shown to people
// (event times, snapshot age). Intervals use std::chrono::steady_clock.
#pragma once

#include <chrono>

namespace gnmr {

inline double UnixNowSeconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace gnmr
