#include "daemon/server/node_session.h"

#include <algorithm>

#include <spdlog/spdlog.h>

#include "common/text.h"
#include "common/tsan_annotations.h"
#include "daemon/server/lane_reader.h"
#include "daemon/server/raw_unary.h"
#include "proto/grpc_status.h"
#include "proto/shared_slice.h"

namespace gnmr {

// ---------------------------------------------------------------- LaneSink

void LaneSink::SendDecision(std::shared_ptr<const WireMessage> msg) {
  MutexLock lock(node_->mu_);
  if (closed_ || node_->reactor_ == nullptr || node_->gate_.closing()) return;
  if (!node_->gate_.writing && !queued_) {
    // Nothing in flight: the next write (the job's Flush) takes it as it
    // is. Every lane's queue is empty then, so order is kept.
    node_->fresh_.push_back({std::move(msg), shared_from_this()});
    return;
  }
  node_->stats_->decisions_dropped += queue_.Push(std::move(msg));
  if (!queued_) {
    queued_ = true;
    node_->pending_.push_back(shared_from_this());
  }
}

void LaneSink::Flush() { node_->StartWriteIfIdle(); }

void LaneSink::Close(const Status& why) {
  bool unread = false;
  {
    MutexLock lock(node_->mu_);
    if (closed_) return;
    closed_ = true;
    queue_.Clear();
    if (node_->reactor_ == nullptr || node_->gate_.closing()) return;
    unread = node_->ends_.size() >= NodeLink::kMaxUnsentEnds;
    if (!unread) {
      v1::LaneEnd& end = node_->ends_.emplace_back();
      end.set_lane(lane_);
      end.set_code(static_cast<int32_t>(why.code()));
      end.set_message(why.message().substr(0, NodeLink::kMaxEndMessageBytes));
    }
  }
  if (unread) {
    // The relay does not read what gnmrd sends (a peer that need not have
    // shown a token yet): its stream ends, and every lane with it, rather
    // than gnmrd growing.
    node_->Close(Status(StatusCode::kResourceExhausted,
                        std::to_string(NodeLink::kMaxUnsentEnds) +
                            " lane ends wait for the relay to read them; gnmrd ends the stream"));
    return;
  }
  node_->StartWriteIfIdle();
}

bool LaneSink::closed() const {
  MutexLock lock(node_->mu_);
  return closed_;
}

// ---------------------------------------------------------------- NodeLink

void NodeLink::StartWriteIfIdle() {
  NodeSessionReactor* reactor;
  {
    MutexLock lock(mu_);
    if (!TakeWriteLocked()) return;
    reactor = reactor_;
  }
  // Only the thread that set `writing` starts the write, and the reactor
  // cannot finish (hence be deleted) while it is set.
  reactor->Write();
}

bool NodeLink::TakeRoundLocked() {
  if (fresh_.empty() || !pending_.empty() || !ends_.empty()) return false;
  const std::shared_ptr<const WireMessage>& msg = fresh_.front().msg;
  std::vector<uint32_t> lanes;
  lanes.reserve(fresh_.size());
  for (const Fresh& f : fresh_) {
    if (f.msg != msg) return false;  // several messages: the general way
    if (!f.lane->closed_) lanes.push_back(f.lane->lane_);
  }
  if (lanes.empty()) return false;
  std::sort(lanes.begin(), lanes.end());  // the order within a delivery is free
  reactor_->out_shared_ = rounds_->Get(msg, lanes);
  in_flight_deliveries_ = lanes.size();
  fresh_.clear();
  return true;
}

bool NodeLink::TakeWriteLocked() {
  if (gate_.writing || reactor_ == nullptr || gate_.closing()) return false;
  if (fresh_.empty() && pending_.empty() && ends_.empty()) return false;
  if (TakeRoundLocked()) {
    gate_.writing = true;
    return true;
  }
  v1::NodeServerMessage& out = reactor_->out_;
  out.Clear();
  // Each message's delivery, by identity: the job sends one object to all
  // its ranks. A lane joins a delivery only if it comes after the lane's
  // previous one, so each lane still receives its messages in order.
  // A write holds a few distinct messages: a short array beats a hash map.
  std::vector<std::pair<const WireMessage*, int>> delivery_of;
  std::vector<std::shared_ptr<const WireMessage>> keep;  // no address reused meanwhile
  size_t bytes = 0;
  uint64_t deliveries = 0;
  auto add = [&](std::shared_ptr<const WireMessage> msg, uint32_t lane, int* last) {
    int joined = -1;
    for (auto it = delivery_of.rbegin(); it != delivery_of.rend(); ++it) {
      if (it->first == msg.get()) {
        joined = it->second;
        break;
      }
    }
    if (joined > *last) {
      out.mutable_deliveries(joined)->add_lanes(lane);
      *last = joined;
    } else {
      v1::LaneDelivery* d = out.add_deliveries();
      d->set_message(msg->bytes);
      d->add_lanes(lane);
      *last = out.deliveries_size() - 1;
      delivery_of.emplace_back(msg.get(), *last);
      bytes += msg->bytes.size();
    }
    ++deliveries;
    keep.push_back(std::move(msg));
  };
  auto room = [&] { return bytes < NodeSessionReactor::kWriteBytes || bytes == 0; };
  // What was sent while no write was in flight; over the size bound the
  // rest waits in the lanes' queues (empty until now: order is kept).
  ++build_;
  for (Fresh& f : fresh_) {
    LaneSink& lane = *f.lane;
    if (lane.closed_) continue;  // ended since: what it was sent goes nowhere
    if (room()) {
      if (lane.build_ != build_) {  // the lane's first message in this write
        lane.build_ = build_;
        lane.last_ = -1;
      }
      add(std::move(f.msg), lane.lane_, &lane.last_);
    } else {
      stats_->decisions_dropped += f.lane->queue_.Push(std::move(f.msg));
      if (!f.lane->queued_) {
        f.lane->queued_ = true;
        pending_.push_back(f.lane);
      }
    }
  }
  fresh_.clear();
  size_t done = 0;
  for (; done < pending_.size(); ++done) {
    LaneSink& lane = *pending_[done];
    int last = -1;
    while (!lane.queue_.empty() && room()) add(lane.queue_.Pop(), lane.lane_, &last);
    if (!lane.queue_.empty()) break;  // over the size bound: the rest goes next
    lane.queued_ = false;
  }
  pending_.erase(pending_.begin(), pending_.begin() + static_cast<ptrdiff_t>(done));
  for (v1::LaneEnd& end : ends_) *out.add_ends() = std::move(end);
  ends_.clear();
  if (out.deliveries_size() == 0 && out.ends_size() == 0) return false;  // all for ended lanes
  in_flight_deliveries_ = deliveries;
  gate_.writing = true;
  return true;
}

void NodeLink::WriteDone(bool ok) {
  NodeSessionReactor* reactor;
  bool next = false;
  bool finish = false;
  {
    MutexLock lock(mu_);
    if (ok) stats_->decisions_sent += in_flight_deliveries_;
    reactor = reactor_;
    if (reactor == nullptr) return;
    gate_.writing = false;
    next = TakeWriteLocked();
    if (!next) finish = gate_.Take();
  }
  if (finish) {
    reactor->End(TakenStatus());
  } else if (next) {
    reactor->Write();
  }
}

void NodeLink::Close(const Status& why) {
  NodeSessionReactor* reactor;
  {
    MutexLock lock(mu_);
    if (reactor_ == nullptr || !gate_.Ask(ToGrpc(why))) return;
    DropUnsentLocked();
    if (!gate_.Take()) return;  // WriteDone or EndRearm finishes
    reactor = reactor_;
  }
  reactor->End(TakenStatus());
}

bool NodeLink::closing() {
  MutexLock lock(mu_);
  return reactor_ == nullptr || gate_.closing();
}

bool NodeLink::BeginRearm() {
  MutexLock lock(mu_);
  return reactor_ != nullptr && gate_.BeginRearm();
}

void NodeLink::EndRearm() {
  NodeSessionReactor* reactor;
  {
    MutexLock lock(mu_);
    if (!gate_.EndRearm()) return;
    reactor = reactor_;
  }
  reactor->End(TakenStatus());
}

void NodeLink::Detach() {
  MutexLock lock(mu_);
  reactor_ = nullptr;
  DropUnsentLocked();  // the lanes' sinks hold the link: no cycle left
}

void NodeLink::DropUnsentLocked() {
  for (const std::shared_ptr<LaneSink>& lane : pending_) {
    lane->queue_.Clear();
    lane->queued_ = false;
  }
  pending_.clear();
  fresh_.clear();
  ends_.clear();
}

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
