// The bookkeeping of GpuStats' pinned result ring, apart from CUDA so the
// CPU tests check it (tests/kernels/gpu_host_logic_test.cc). Not thread-safe:
// GpuStats holds its mutex around every call.
//
// Regular launches fill slots 0 .. kSlots-1 in turn (sequence s -> slot
// s % kSlots). A launch takes its slot over when its copy into the slot is
// enqueued (Commit): only then is the oldest unread launch dropped if the
// ring was full, so a launch that fails before that point drops nothing.
// Poll takes the oldest unread launch once the slot's event completes.
//
// Graph replays share slot kGraphSlot. Each captured launch stamps its
// results with a replay number counted on the device (1, 2, ... since
// SetTable). OnGraphReplay, called before cudaGraphLaunch, registers the
// number that replay will write, with its step. Poll hands the slot out
// only when the stamp equals the newest registered number: a Poll between
// OnGraphReplay and the replay's completion waits instead of labelling the
// previous replay's results with the new step, and a newer replay
// supersedes an unread one. A stamp beyond the registered count (a replay
// nobody registered) is discarded and resynchronises the count.
#pragma once

#include <cstdint>

namespace gnmr::cuda {

class ResultRing {
 public:
  static constexpr int kSlots = 4;
  static constexpr int kGraphSlot = kSlots;

  static int SlotOf(uint64_t seq) { return static_cast<int>(seq % kSlots); }
  uint64_t next_sequence() const { return next_launch_; }

  // Launch next_sequence() enqueued its copy into its slot; `step` is what
  // Poll reports for it.
  void Commit(int64_t step) {
    if (next_launch_ + 1 - next_poll_ > static_cast<uint64_t>(kSlots)) {
      next_poll_ = next_launch_ + 1 - kSlots;  // the oldest unread is overwritten
    }
    const int slot = SlotOf(next_launch_);
    step_[slot] = step;
    tracked_[slot] = true;
    ++next_launch_;
  }
  // The launch's completion event could not be recorded: Poll skips it.
  void Untrack(uint64_t seq) {
    if (seq + kSlots >= next_launch_) tracked_[SlotOf(seq)] = false;
  }

  bool Oldest(uint64_t* seq, int* slot, bool* tracked) const {
    if (next_poll_ == next_launch_) return false;
    *seq = next_poll_;
    *slot = SlotOf(next_poll_);
    *tracked = tracked_[*slot];
    return true;
  }
  int64_t StepOf(uint64_t seq) const { return step_[SlotOf(seq)]; }
  void PopOldest() {
    if (next_poll_ != next_launch_) ++next_poll_;
  }

  // Returns the stamp the coming replay will write.
  uint64_t RegisterReplay(int64_t step) {
    graph_step_ = step;
    replay_pending_ = true;
    return ++replays_;
  }
  bool ReplayPending() const { return replay_pending_; }

  enum class Replay { kDeliver, kWait, kDiscard };
  // The graph slot's event completed and the slot holds `stamp`.
  Replay CheckReplay(uint64_t stamp, int64_t* step) {
    if (!replay_pending_ || stamp < replays_) return Replay::kWait;  // not the registered one yet
    replay_pending_ = false;
    if (stamp > replays_) {
      replays_ = stamp;
      return Replay::kDiscard;
    }
    *step = graph_step_;
    return Replay::kDeliver;
  }

  // SetTable: nothing pending, replay stamps start again from 1 (the
  // device counter is reset with the tables).
  void Reset() {
    next_poll_ = next_launch_;
    replay_pending_ = false;
    replays_ = 0;
  }

 private:
  uint64_t next_launch_ = 0;  // sequence number of the next launch
  uint64_t next_poll_ = 0;    // oldest launch not yet polled
  int64_t step_[kSlots] = {};
  bool tracked_[kSlots] = {};
  uint64_t replays_ = 0;  // replays registered (== the newest expected stamp)
  int64_t graph_step_ = -1;
  bool replay_pending_ = false;
};

}  // namespace gnmr::cuda
