// State shared by the training thread (Client) and the I/O thread (IoLoop).
//
// One mutex guards the decision cache and the connection facts PlanFor
// reads; counters are atomics so Counters() never contends with the hot
// path more than a load.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>

#include "client/src/decision_cache.h"

namespace gnmr {

struct SharedState {
  mutable std::mutex mu;
  // Signalled on a new decision, a disconnect and on stop (PlanFor waits).
  std::condition_variable decision_cv;
  DecisionCache cache;             // guarded by mu
  bool connected = false;          // guarded by mu: Session stream is up
  bool stopping = false;           // guarded by mu
  int32_t lag = 1;                 // guarded by mu: apply - observed
  // First step observed while the current session was up, -1 before: a
  // decision is due at every step >= it + lag.
  int64_t session_first_step = -1;  // guarded by mu
  std::string last_error;           // guarded by mu

  std::atomic<bool> connected_flag{false};  // lock-free mirror of connected
  std::atomic<uint64_t> reports_sent{0};
  std::atomic<uint64_t> acks_sent{0};
  std::atomic<uint64_t> decisions_received{0};
  std::atomic<uint64_t> decisions_rejected{0};
  std::atomic<uint64_t> registrations{0};
  std::atomic<uint64_t> reconnects{0};
  std::atomic<uint64_t> connect_failures{0};
};

}  // namespace gnmr
