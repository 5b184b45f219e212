#include "daemon/job/rank_sessions.h"

#include <algorithm>
#include <utility>

namespace gnmr {

int64_t RankSession::StepsWithoutDecision(int64_t last_closed) const {
  const int64_t since = std::max(last_decided_ack, watched_from);
  return last_closed > since ? last_closed - since : 0;
}

Status RankSessions::Check(std::string_view job_id, uint32_t rank, uint64_t session_id,
                           RankSession** session) {
  RankSession* rs = sessions_.Find(rank);
  if (rs == nullptr) {
    return Status(StatusCode::kFailedPrecondition, "rank " + std::to_string(rank) + " of job '" +
                                                       std::string(job_id) + "' is not registered");
  }
  if (rs->session_id != session_id) {
    return Status(StatusCode::kFailedPrecondition, "session is not the current one of rank " +
                                                       std::to_string(rank) +
                                                       " (it registered again); register anew");
  }
  *session = rs;
  return Status::Ok();
}

void RankSessions::NewSessionId(RankSession& rs) {
  do {
    rs.session_id = session_ids_();
  } while (rs.session_id == 0);
}

void RankSessions::SetSink(RankSession& rs, std::shared_ptr<DecisionSink> sink) {
  DropSink(rs);
  if (sink) ++connected_;
  rs.sink = std::move(sink);
  attached_stale_ = true;
}

void RankSessions::DropSink(RankSession& rs) {
  if (rs.sink) --connected_;
  rs.sink.reset();
  attached_stale_ = true;
}

void RankSessions::CloseSink(RankSession& rs, const Status& why) {
  if (rs.sink) rs.sink->Close(why);
  DropSink(rs);
}

uint32_t RankSessions::CloseAll(const Status& why) {
  uint32_t closed_streams = 0;
  sessions_.ForEach([&](uint32_t, RankSession& rs) {
    if (!rs.sink) return;
    CloseSink(rs, why);
    rs.stream_ended = true;
    ++closed_streams;
  });
  return closed_streams;
}

void RankSessions::Broadcast(const std::shared_ptr<const WireMessage>& msg) {
  if (attached_stale_) {
    attached_.clear();
    sessions_.ForEach([this](uint32_t, RankSession& rs) {
      if (rs.sink) attached_.push_back(rs.sink.get());
    });
    attached_stale_ = false;
  }
  // Each range queues the message to its sinks, then flushes them: a relay
  // stream writes once for its lanes (consecutive ranks: one range holds a
  // node's lanes unless the node straddles two ranges).
  auto send = [&](size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i) attached_[i]->SendDecision(msg);
    for (size_t i = begin; i < end; ++i) attached_[i]->Flush();
  };
  if (fan_out_ && attached_.size() >= kFanOutAtSinks) {
    fan_out_->Run(attached_.size(), kFanOutGrain, send);
  } else {
    send(0, attached_.size());
  }
}

}  // namespace gnmr
