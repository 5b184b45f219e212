// LiveSessions: every Session stream the server holds, attached to a job or
// not. A stream whose hello is still in flight belongs to no job yet, so
// ending the jobs' sessions at shutdown misses it, and the server then
// waits out the whole grace period for it (seen: an 11 s shutdown under
// load). Shutdown ends them all here; a stream that arrives afterwards is
// ended at once.
#pragma once

#include <memory>
#include <unordered_map>
#include <vector>

#include "common/mutex.h"
#include "common/thread_annotations.h"
#include "daemon/job/job.h"
#include "gnmr/status.h"

namespace gnmr {

class LiveSessions {
 public:
  // Registers a new stream's sink. False once CloseAll ran: the caller ends
  // its stream with *why.
  bool Add(const std::shared_ptr<DecisionSink>& sink, Status* why) {
    MutexLock lock(mu_);
    if (closing_) {
      *why = why_;
      return false;
    }
    sinks_[sink.get()] = sink;
    return true;
  }

  void Remove(const DecisionSink* sink) {
    MutexLock lock(mu_);
    sinks_.erase(sink);
  }

  // Ends every registered stream with `why` (sinks are closed outside the
  // lock: Close may finish the stream on this thread).
  void CloseAll(const Status& why) {
    std::vector<std::shared_ptr<DecisionSink>> live;
    {
      MutexLock lock(mu_);
      closing_ = true;
      why_ = why;
      for (const auto& [key, weak] : sinks_) {
        if (std::shared_ptr<DecisionSink> s = weak.lock()) live.push_back(std::move(s));
      }
    }
    for (const std::shared_ptr<DecisionSink>& s : live) s->Close(why);
  }

 private:
  Mutex mu_;
  std::unordered_map<const DecisionSink*, std::weak_ptr<DecisionSink>> sinks_ GNMR_GUARDED_BY(mu_);
  bool closing_ GNMR_GUARDED_BY(mu_) = false;
  Status why_ GNMR_GUARDED_BY(mu_);
};

}  // namespace gnmr
