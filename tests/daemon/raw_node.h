// RawNode: a relay's NodeSession stream driven by hand (docs/relay.md), for
// tests of what gnmrd does with lanes; what gnmrd sends is kept in order.
#pragma once

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "gnmr/v1/gnmr.pb.h"
#include "gnmr/v1/relay.grpc.pb.h"

namespace gnmr::testing {

class RawNode {
 public:
  explicit RawNode(const std::shared_ptr<grpc::Channel>& channel)
      : stub_(v1::GnmrRelay::NewStub(channel)) {
    stream_ = stub_->NodeSession(&ctx_);
    reader_ = std::thread([this] {
      v1::NodeServerMessage m;
      while (stream_->Read(&m)) {
        std::lock_guard<std::mutex> lock(mu_);
        received_.push_back(m);
        cv_.notify_all();
      }
      std::lock_guard<std::mutex> lock(mu_);
      ended_ = true;
      cv_.notify_all();
    });
  }
  ~RawNode() {
    ctx_.TryCancel();
    if (reader_.joinable()) reader_.join();
  }

  bool Send(const v1::NodeClientMessage& m) { return stream_->Write(m); }

  static v1::LaneUp Lane(uint32_t lane, const v1::ClientMessage& m, const std::string& token = "") {
    v1::LaneUp up;
    up.set_lane(lane);
    up.set_message(m.SerializeAsString());
    up.set_token(token);
    return up;
  }
  static v1::ClientMessage Hello(const std::string& job, uint32_t rank, uint64_t session) {
    v1::ClientMessage m;
    m.mutable_hello()->set_job_id(job);
    m.mutable_hello()->set_rank(rank);
    m.mutable_hello()->set_session_id(session);
    return m;
  }
  // Stats of units `ids` (a rank's unit ids from Register), in order.
  static v1::ClientMessage Stats(int64_t step, const std::vector<uint32_t>& ids,
                                 const std::vector<double>& sumsq) {
    v1::ClientMessage m;
    v1::StepStats* s = m.mutable_stats();
    s->set_step(step);
    for (size_t i = 0; i < sumsq.size(); ++i) {
      s->add_unit_id(ids[i]);
      s->add_sumsq(sumsq[i]);
    }
    return m;
  }
  bool SendLanes(const std::vector<v1::LaneUp>& lanes) {
    v1::NodeClientMessage m;
    for (const v1::LaneUp& up : lanes) *m.add_lanes() = up;
    return Send(m);
  }

  // The decision of `step` delivered to `lane`, with the delivery's lanes.
  bool WaitDecision(uint32_t lane, int64_t step, v1::Decision* out,
                    std::vector<uint32_t>* delivered_with = nullptr,
                    std::chrono::milliseconds timeout = std::chrono::seconds(5)) {
    return Wait(timeout, [&] {
      for (const v1::NodeServerMessage& m : received_) {
        for (const v1::LaneDelivery& d : m.deliveries()) {
          if (!Has(d, lane)) continue;
          v1::ServerMessage s;
          if (!s.ParseFromString(d.message()) || !s.has_decision() ||
              s.decision().observed_step() != step) {
            continue;
          }
          *out = s.decision();
          if (delivered_with) delivered_with->assign(d.lanes().begin(), d.lanes().end());
          return true;
        }
      }
      return false;
    });
  }
  // How many messages of each kind `lane` was sent (generation starts).
  int GenerationStarts(uint32_t lane) {
    std::lock_guard<std::mutex> lock(mu_);
    int n = 0;
    for (const v1::NodeServerMessage& m : received_) {
      for (const v1::LaneDelivery& d : m.deliveries()) {
        v1::ServerMessage s;
        if (Has(d, lane) && s.ParseFromString(d.message()) && s.has_generation()) ++n;
      }
    }
    return n;
  }
  bool WaitGenerationStart(uint32_t lane,
                           std::chrono::milliseconds timeout = std::chrono::seconds(5)) {
    return Wait(timeout, [&] {
      for (const v1::NodeServerMessage& m : received_) {
        for (const v1::LaneDelivery& d : m.deliveries()) {
          v1::ServerMessage s;
          if (Has(d, lane) && s.ParseFromString(d.message()) && s.has_generation()) return true;
        }
      }
      return false;
    });
  }
  // The ends gnmrd sent for `lane`, in order.
  std::vector<v1::LaneEnd> Ends(uint32_t lane) {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<v1::LaneEnd> out;
    for (const v1::NodeServerMessage& m : received_) {
      for (const v1::LaneEnd& e : m.ends()) {
        if (e.lane() == lane) out.push_back(e);
      }
    }
    return out;
  }
  bool WaitLaneEnd(uint32_t lane, v1::LaneEnd* out,
                   std::chrono::milliseconds timeout = std::chrono::seconds(5)) {
    return Wait(timeout, [&] {
      for (const v1::NodeServerMessage& m : received_) {
        for (const v1::LaneEnd& e : m.ends()) {
          if (e.lane() == lane) {
            *out = e;
            return true;
          }
        }
      }
      return false;
    });
  }
  size_t received() {
    std::lock_guard<std::mutex> lock(mu_);
    return received_.size();
  }
  bool ended() {
    std::lock_guard<std::mutex> lock(mu_);
    return ended_;
  }
  grpc::Status WaitEnd(std::chrono::milliseconds timeout = std::chrono::seconds(5)) {
    if (!Wait(timeout, [&] { return ended_; })) {
      return grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "stream did not end");
    }
    reader_.join();
    return stream_->Finish();
  }

 private:
  static bool Has(const v1::LaneDelivery& d, uint32_t lane) {
    for (uint32_t l : d.lanes()) {
      if (l == lane) return true;
    }
    return false;
  }
  template <typename Pred>
  bool Wait(std::chrono::milliseconds timeout, Pred pred) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, timeout, pred);
  }

  std::unique_ptr<v1::GnmrRelay::Stub> stub_;
  grpc::ClientContext ctx_;
  std::unique_ptr<grpc::ClientReaderWriter<v1::NodeClientMessage, v1::NodeServerMessage>> stream_;
  std::thread reader_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<v1::NodeServerMessage> received_;
  bool ended_ = false;
};

}  // namespace gnmr::testing
