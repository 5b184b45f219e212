// Rate-limited warnings for the background threads: a daemon that is down
// for an hour must not write one line per reconnect attempt.
#pragma once

#include <spdlog/spdlog.h>

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>

namespace gnmr {

class LogLimiter {
 public:
  explicit LogLimiter(std::chrono::milliseconds interval) : interval_(interval) {}

  // Logs `msg` at warning level unless one was logged less than `interval`
  // ago; suppressed messages are counted and reported with the next one.
  void Warn(const std::string& msg) {
    std::lock_guard<std::mutex> lock(mu_);
    const auto now = std::chrono::steady_clock::now();
    if (logged_ && now - last_ < interval_) {
      ++suppressed_;
      return;
    }
    if (suppressed_ > 0) {
      spdlog::warn("gnmr client: {} ({} similar messages suppressed)", msg, suppressed_);
    } else {
      spdlog::warn("gnmr client: {}", msg);
    }
    logged_ = true;
    last_ = now;
    suppressed_ = 0;
  }

 private:
  const std::chrono::milliseconds interval_;
  std::mutex mu_;
  bool logged_ = false;
  std::chrono::steady_clock::time_point last_;
  uint64_t suppressed_ = 0;
};

}  // namespace gnmr
