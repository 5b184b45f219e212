#include "daemon/server/node_session.h"

#include <spdlog/spdlog.h>

#include "common/text.h"
#include "common/tsan_annotations.h"
#include "daemon/server/lane_reader.h"
#include "daemon/server/raw_unary.h"
#include "proto/grpc_status.h"
#include "proto/shared_slice.h"

namespace gnmr {

// ------------------------------------------------------ NodeSessionReactor

NodeSessionReactor::NodeSessionReactor(grpc::CallbackServerContext* ctx, JobRegistry* registry,
                                       ServerStats* stats, LiveSessions* live,
                                       DecisionQueue::Limits queue_limits, bool trusted,
                                       std::shared_ptr<RoundCache> rounds)
    : ctx_(ctx),
      registry_(registry),
      stats_(stats),
      live_(live),
      queue_limits_(queue_limits),
      trusted_(trusted) {
  link_ = std::make_shared<NodeLink>(this, stats, std::move(rounds));
  GNMR_HAPPENS_BEFORE(&order_.constructed);
  Status closing;
  if (live_ != nullptr && !live_->Add(link_, &closing)) {
    link_->Close(closing);  // the daemon is shutting down: no read at all
    return;
  }
  Read();
}

void NodeSessionReactor::Read() {
  GNMR_HAPPENS_BEFORE(&order_.read);
  StartRead(&in_bytes_);
}

void NodeSessionReactor::Write() {
  if (out_shared_) {
    // The round's bytes, shared with other nodes (proto/shared_slice.h).
    std::shared_ptr<const std::string> shared = std::move(out_shared_);
    out_bytes_ = SharedBytes(*shared, shared);
  } else {
    std::string bytes;
    out_.SerializeToString(&bytes);
    out_.Clear();
    grpc::Slice slice(std::move(bytes));
    out_bytes_ = grpc::ByteBuffer(&slice, 1);
  }
  GNMR_HAPPENS_BEFORE(&order_.write);
  StartWrite(&out_bytes_);
}

void NodeSessionReactor::End(const grpc::Status& status) {
  GNMR_HAPPENS_BEFORE(&order_.ended);
  Finish(status);
}

void NodeSessionReactor::Reacting(char* op) {
  GNMR_HAPPENS_AFTER(&order_.constructed);
  if (op != nullptr) GNMR_HAPPENS_AFTER(op);
}

void NodeSessionReactor::Reacted() { GNMR_HAPPENS_BEFORE(&order_.ended); }

void NodeSessionReactor::DropLane(std::unordered_map<uint32_t, Lane>::iterator it,
                                  const Status& why) {
  it->second.handler.Ended(it->second.sink.get());
  stats_->Record("Session", why);
  stats_->sessions_open--;
  lanes_.erase(it);
}

void NodeSessionReactor::HandleLane(const v1::LaneUp& up) {
  auto it = lanes_.find(up.lane());
  if (it == lanes_.end()) {
    auto ended = ended_.find(up.lane());
    if (ended != ended_.end()) {
      // gnmrd ended the lane: what the relay sent before it heard so goes
      // nowhere, until its `end` says nothing more will come.
      if (up.end()) ended_.erase(ended);
      return;
    }
    if (up.end()) return;  // opened and ended at once, or refused below
    if (lanes_.size() + ended_.size() >= kMaxLanes) {
      stats_->bad_requests++;
      auto refused = std::make_shared<LaneSink>(link_, up.lane(), queue_limits_);
      refused->Close(Status(StatusCode::kResourceExhausted,
                            "a node stream carries at most " + std::to_string(kMaxLanes) +
                                " lanes, counting those ended and not yet answered with `end`; "
                                "open another stream"));
      return;
    }
    it = lanes_.emplace(up.lane(), Lane(registry_)).first;
    it->second.sink = std::make_shared<LaneSink>(link_, up.lane(), queue_limits_);
    it->second.token = up.token();
    stats_->sessions_open++;
    stats_->sessions_total++;
  }
  Lane& lane = it->second;
  if (up.end()) {  // the rank's stream ended at the relay
    DropLane(it, Status::Ok());
    return;
  }
  if (lane.sink->closed()) return;  // gnmrd ended it; the relay's end follows
  v1::ClientMessage msg;
  Status s = ParseRequestBytes(up.message(), &msg);
  if (s.ok() && !lane.handler.attached() && !trusted_ && lane.token.empty()) {
    s = Status(StatusCode::kUnauthenticated, "a job token is required over TCP (x-gnmr-token)");
  }
  if (s.ok()) s = lane.handler.Handle(msg, up.message().size(), lane.token, lane.sink);
  if (s.ok()) {
    if (lane.handler.attached()) lane.token.clear();
    return;
  }
  stats_->bad_requests++;
  spdlog::debug("node session lane {} job={} rank={}: {}", up.lane(),
                lane.handler.attached() ? lane.handler.job()->id() : "?", lane.handler.rank(),
                EscapeMessageForLog(s.ToString()));
  lane.sink->Close(s);
  DropLane(it, s);
  ended_.insert(up.lane());  // until the relay's `end` for it
}

void NodeSessionReactor::OnReadDone(bool ok) {
  Reacting(&order_.read);
  if (!ok) {  // the relay half-closed, or the call is cancelled
    link_->Close(Status::Ok());
    Reacted();
    return;
  }
  Status s;
  try {
    // One lane at a time (lane_reader.h), and none once the stream is
    // closing: what a peer without a token sends never piles up.
    LaneReader lanes(in_bytes_);
    while (!link_->closing() && lanes.Next(&in_)) HandleLane(in_);
    s = lanes.status();
    in_.Clear();  // an idle stream holds no report's bytes
    in_bytes_.Clear();
  } catch (const std::exception& e) {  // never let an exception reach gRPC
    s = Internal(std::string("internal error: ") + e.what());
  } catch (...) {
    s = Internal("internal error: unknown exception");
  }
  if (!s.ok()) {
    stats_->bad_requests++;
    spdlog::debug("node session: {}", EscapeMessageForLog(s.ToString()));
    link_->Close(s);
    Reacted();
    return;
  }
  if (link_->BeginRearm()) {  // else closing: no read after Finish
    Read();
    link_->EndRearm();
  }
  Reacted();
}

void NodeSessionReactor::OnWriteDone(bool ok) {
  Reacting(&order_.write);
  link_->WriteDone(ok);
  Reacted();
}

void NodeSessionReactor::OnCancel() {
  Reacting(nullptr);
  link_->Close(Status(StatusCode::kCancelled, "cancelled"));
  Reacted();
}

void NodeSessionReactor::OnDone() {
  Reacting(&order_.ended);
  const Status why = FromGrpc(link_->TakenStatus());
  stats_->Record("NodeSession", why);
  link_->Detach();
  if (live_ != nullptr) live_->Remove(link_.get());
  while (!lanes_.empty()) DropLane(lanes_.begin(), why);
  delete this;
}

}  // namespace gnmr
