// gnmr::Mutex and gnmr::MutexLock: std::mutex and its RAII lock with the
// capability attributes of clang's thread-safety analysis
// (common/thread_annotations.h).
//
// Why: libstdc++'s std::mutex carries no attributes, so clang cannot check
// who holds it. Written with these, a locking rule ("`pending_` is guarded
// by `mu_`", "call FooLocked with `mu_` held") is checked by the compiler
// in the clang builds instead of living in a comment. On GCC the wrappers
// are plain std::mutex and std::unique_lock, with no cost beyond them.
//
// How:
//
//   Mutex mu_;
//   std::condition_variable cv_;
//   std::deque<Item> queue_ GNMR_GUARDED_BY(mu_);
//
//   void Push(Item item) GNMR_EXCLUDES(mu_) {
//     {
//       MutexLock lock(mu_);
//       queue_.push_back(std::move(item));
//     }
//     cv_.notify_one();
//   }
//   Item Pop() GNMR_EXCLUDES(mu_) {
//     MutexLock lock(mu_);
//     // A condition variable waits on the lock's std::unique_lock; the
//     // predicate is a function of its own to the analysis, so it says it
//     // runs with the mutex held.
//     cv_.wait(lock.native(), [this]() GNMR_REQUIRES(mu_) { return !queue_.empty(); });
//     ...
//   }
//
// MutexLock may be released and taken again inside its scope
// (lock.Unlock(); ...; lock.Lock();), e.g. around file I/O; the analysis
// follows both. There is no reader-writer wrapper: nothing in the tree
// uses std::shared_mutex (docs/sanitizers.md, "Thread-safety analysis").
#pragma once

#include <mutex>

#include "common/thread_annotations.h"

namespace gnmr {

// A std::mutex the analysis knows as a capability.
class GNMR_CAPABILITY("mutex") Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void Lock() GNMR_ACQUIRE() { mu_.lock(); }
  void Unlock() GNMR_RELEASE() { mu_.unlock(); }
  bool TryLock() GNMR_TRY_ACQUIRE(true) { return mu_.try_lock(); }

  // The std::mutex inside, for what needs the standard type. Locking it
  // directly is invisible to the analysis: use MutexLock.
  std::mutex& native() GNMR_RETURN_CAPABILITY(this) { return mu_; }

 private:
  std::mutex mu_;
};

// Holds a Mutex from construction to destruction (or between Unlock and
// Lock), through a std::unique_lock that condition variables wait on.
class GNMR_SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex& mu) GNMR_ACQUIRE(mu) : lock_(mu.native()) {}
  ~MutexLock() GNMR_RELEASE() = default;
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

  // Releases the mutex before the end of the scope / takes it again.
  void Unlock() GNMR_RELEASE() { lock_.unlock(); }
  void Lock() GNMR_ACQUIRE() { lock_.lock(); }

  // For std::condition_variable::wait*, which releases and retakes the
  // mutex inside the call: the mutex is held before and after it.
  std::unique_lock<std::mutex>& native() { return lock_; }

 private:
  std::unique_lock<std::mutex> lock_;
};

}  // namespace gnmr
