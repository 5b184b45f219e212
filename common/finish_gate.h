// FinishGate: when a server stream of gRPC's callback API may Finish.
//
// gRPC does not allow Finish while a write is outstanding, nor a StartRead
// after Finish; a stream re-arms its read after each message, so a Finish
// asked for between a read's completion and its re-arm must wait too. The
// gate defers such a Finish and hands it, exactly once, to whichever of the
// ask, the write's completion or the re-arm's end comes last.
//
// Not thread-safe: its owner (gnmrd's session sinks, the relay's local
// streams) calls it under its own lock and starts Finish outside the lock
// when a call returns true. `Status` is the status the stream ends with.
#pragma once

#include <utility>

namespace gnmr {

template <typename Status>
class FinishGate {
 public:
  // A write is outstanding (set by the owner when it starts one, cleared
  // when none follows).
  bool writing = false;

  // Finish was asked for, or has started: write and read no more.
  bool closing() const { return requested_ || finished_; }
  const Status& status() const { return status_; }

  // Asks to finish with `why`; false if that was asked already.
  bool Ask(Status why) {
    if (closing()) return false;
    requested_ = true;
    status_ = std::move(why);
    return true;
  }
  // Brackets the re-arm of the read: BeginRearm false means do not read
  // again (closing).
  bool BeginRearm() {
    if (closing()) return false;
    rearming_ = true;
    return true;
  }
  // True if the caller must start Finish now.
  bool EndRearm() {
    rearming_ = false;
    return Take();
  }
  // True, once, when Finish was asked for and nothing holds it back any
  // more: the caller starts Finish now.
  bool Take() {
    if (!requested_ || finished_ || writing || rearming_) return false;
    finished_ = true;
    return true;
  }

 private:
  bool rearming_ = false;
  bool requested_ = false;
  bool finished_ = false;
  Status status_;
};

}  // namespace gnmr
