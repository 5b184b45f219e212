// LogLimiter: at most one log line per key and interval, for lines a peer
// can trigger at will (a failed Register retried in a loop would otherwise
// fill the disk). The lines held back are counted, and the next line that
// passes reports how many there were:
//
//   LogLimiter limiter(std::chrono::seconds(10));
//   uint64_t held_back = 0;
//   if (limiter.Allow(job + "|" + cause, now, &held_back)) {
//     spdlog::warn("Register {}: {} ({} more like it not logged)", ...);
//   }
//
// The table of keys is bounded (`max_keys`): when it is full, expired keys
// are dropped, and if none has expired a new key shares one overflow entry,
// so a peer inventing keys cannot grow memory or escape the limit.
// Thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <unordered_map>

#include "common/mutex.h"
#include "common/thread_annotations.h"

namespace gnmr {

class LogLimiter {
 public:
  using Clock = std::chrono::steady_clock;

  explicit LogLimiter(Clock::duration interval, size_t max_keys = 1024)
      : interval_(interval), max_keys_(max_keys) {}

  // True when a line for `key` may be logged now; then *held_back is the
  // number of lines of that key refused since the last one allowed.
  bool Allow(const std::string& key, Clock::time_point now, uint64_t* held_back);

 private:
  struct Entry {
    Clock::time_point last_logged;
    uint64_t held_back = 0;
  };

  const Clock::duration interval_;
  const size_t max_keys_;
  Mutex mu_;
  std::unordered_map<std::string, Entry> entries_ GNMR_GUARDED_BY(mu_);
};

}  // namespace gnmr
