#include "common/log_limiter.h"

namespace gnmr {
namespace {
// The overflow entry's key: no caller's key starts with a NUL byte.
const std::string kOverflowKey("\0overflow", 9);
}  // namespace

bool LogLimiter::Allow(const std::string& key, Clock::time_point now, uint64_t* held_back) {
  MutexLock lock(mu_);
  auto it = entries_.find(key);
  if (it == entries_.end()) {
    if (entries_.size() >= max_keys_) {
      for (auto e = entries_.begin(); e != entries_.end();) {
        const bool expired = now - e->second.last_logged >= interval_ && e->second.held_back == 0;
        e = expired ? entries_.erase(e) : std::next(e);
      }
    }
    const std::string& slot = entries_.size() >= max_keys_ ? kOverflowKey : key;
    it = entries_.find(slot);
    if (it == entries_.end()) {
      it = entries_.emplace(slot, Entry{now, 0}).first;
      *held_back = 0;
      return true;
    }
  }
  Entry& e = it->second;
  if (now - e.last_logged < interval_) {
    e.held_back++;
    return false;
  }
  *held_back = e.held_back;
  e.held_back = 0;
  e.last_logged = now;
  return true;
}

}  // namespace gnmr
