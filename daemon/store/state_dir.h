// StateDirLock: one gnmrd per state directory (deploy/README.md, "Signals, the state dir").
//
// Two daemons on one state dir would each restore the jobs, then overwrite
// each other's snapshots and event logs; the last to stop wins. The lock is
// flock(2) on <state_dir>/gnmrd.lock, held for the life of the process (the
// kernel drops it when the process dies, even by kill -9, so a crash never
// leaves a stale lock). The file holds the holder's pid, for the message
// the second daemon gives:
//
//   state dir /var/lib/gnmr is locked by pid 4242 (another gnmrd uses it)
//
// CheckStateDirWritable: a read-only state dir (a read-only mount, wrong
// owner) would otherwise be noticed only at the first snapshot, after the
// daemon had accepted jobs: it creates and removes a probe file in the
// state dir and in its jobs/ directory.
#pragma once

#include <memory>
#include <string>

#include "gnmr/status.h"

namespace gnmr {
namespace store {

class StateDirLock {
 public:
  // The lock, or FailedPrecondition (held by another process: names its
  // pid) / an errno Status (cannot create the lock file).
  static StatusOr<std::unique_ptr<StateDirLock>> Acquire(const std::string& state_dir);
  ~StateDirLock();  // releases the lock (the file stays)
  StateDirLock(const StateDirLock&) = delete;
  StateDirLock& operator=(const StateDirLock&) = delete;

  static std::string LockPath(const std::string& state_dir);

 private:
  explicit StateDirLock(int fd) : fd_(fd) {}
  int fd_;
};

// OK if files can be created, renamed over and removed in `state_dir` and
// (if it exists) `state_dir`/jobs; else FailedPrecondition naming the
// directory and the reason.
Status CheckStateDirWritable(const std::string& state_dir);

}  // namespace store
}  // namespace gnmr
