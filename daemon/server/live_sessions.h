// LiveSessions: every Session stream the server holds, attached to a job or
// not. A stream whose hello is still in flight belongs to no job yet, so
// ending the jobs' sessions at shutdown misses it, and the server then
// waits out the whole grace period for it (seen: an 11 s shutdown under
// load). Shutdown ends them all here; a stream that arrives afterwards is
// ended at once.
#pragma once

#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "daemon/job/job.h"
#include "gnmr/status.h"

namespace gnmr {

class LiveSessions {
 public:
  // Registers a new stream's sink. False once CloseAll ran: the caller ends
  // its stream with *why.
  bool Add(const std::shared_ptr<DecisionSink>& sink, Status* why) {
    std::lock_guard<std::mutex> lock(mu_);
    if (closing_) {
      *why = why_;
      return false;
    }
    sinks_[sink.get()] = sink;
    return true;
  }

  void Remove(const DecisionSink* sink) {
    std::lock_guard<std::mutex> lock(mu_);
    sinks_.erase(sink);
  }

  // Ends every registered stream with `why` (sinks are closed outside the
  // lock: Close may finish the stream on this thread).
  void CloseAll(const Status& why) {
    std::vector<std::shared_ptr<DecisionSink>> live;
    {
      std::lock_guard<std::mutex> lock(mu_);
      closing_ = true;
      why_ = why;
      for (const auto& [key, weak] : sinks_) {
        if (std::shared_ptr<DecisionSink> s = weak.lock()) live.push_back(std::move(s));
      }
    }
    for (const std::shared_ptr<DecisionSink>& s : live) s->Close(why);
  }

 private:
  std::mutex mu_;
  std::unordered_map<const DecisionSink*, std::weak_ptr<DecisionSink>> sinks_;
  bool closing_ = false;
  Status why_;
};

}  // namespace gnmr
