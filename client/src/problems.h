// ProblemLog: what went wrong in the background that the user should hear
// about (ProblemKind in <gnmr/client.h>), counted per kind until taken.
//
// The I/O thread records; the trainer's side takes them (the Python adapter
// turns each kind into one warning and a logging record with the count).
// Take() is one relaxed load when nothing happened, so it can be called
// every step.
#pragma once

#include <array>
#include <atomic>
#include <string>
#include <vector>

#include "common/mutex.h"
#include "common/thread_annotations.h"
#include "gnmr/client.h"

namespace gnmr {

// GNMR_EXPORT: client/local/ calls it across the shared libraries (transport.h).
class GNMR_EXPORT ProblemLog {
 public:
  void Record(ProblemKind kind, const std::string& message) {
    MutexLock lock(mu_);
    Problem& p = pending_[Index(kind)];
    p.kind = kind;
    p.message = message;
    ++p.count;
    any_.store(true, std::memory_order_release);
  }

  std::vector<Problem> Take() {
    std::vector<Problem> out;
    if (!any_.load(std::memory_order_acquire)) return out;
    MutexLock lock(mu_);
    for (Problem& p : pending_) {
      if (p.count == 0) continue;
      out.push_back(p);
      p.count = 0;
    }
    any_.store(false, std::memory_order_release);
    return out;
  }

 private:
  static constexpr size_t kKinds = 8;  // ProblemKind values 1..8
  static size_t Index(ProblemKind k) {
    const size_t i = static_cast<size_t>(k) - 1;
    return i < kKinds ? i : kKinds - 1;
  }

  Mutex mu_;
  std::array<Problem, kKinds> pending_ GNMR_GUARDED_BY(mu_) = {};
  std::atomic<bool> any_{false};
};

}  // namespace gnmr
