// The write side of a relay's stream (the design notes of node_session.h,
// Writes): LaneSink, the DecisionSink a job holds for one lane, and
// NodeLink, which gathers what the lanes were sent into one
// NodeServerMessage per write (a decision's bytes once, under a
// LaneDelivery of every lane that receives it), ends lanes and closes the
// stream. Apart from node_session.cc, which holds the reactor and the read
// side (lanes, their handlers, the gRPC callbacks): what gnmrd sends a
// node is one idea, what it reads another.
#include <algorithm>
#include <cstddef>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "daemon/server/node_session.h"
#include "proto/grpc_status.h"

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

}  // namespace gnmr
