// The simulated relays of bench/daemon_load --ranks-per-stream K: each
// carries K consecutive ranks as lanes of one GnmrRelay.NodeSession stream
// (docs/relay.md), as gnmr-relay does for the ranks of a node. gnmrd sees
// what it sees from K real relays; the load generator spends no process
// per relay and no hop through one, so gnmrd's side is what is measured.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include "bench/load_session.h"
#include "gnmr/v1/relay.pb.h"

namespace gnmr::bench {

class LoadNode : public LoadStream {
 public:
  // Lanes 0..sessions.size()-1 carry ranks first_rank, first_rank + 1, ...
  LoadNode(grpc::GenericStub* stub, const std::string& job, uint32_t first_rank,
           const std::vector<uint64_t>& sessions, StepLog* log)
      : log_(log), lanes_(sessions.size()) {
    v1::NodeClientMessage hellos;
    for (size_t i = 0; i < sessions.size(); ++i) {
      v1::ClientMessage hello;
      hello.mutable_hello()->set_job_id(job);
      hello.mutable_hello()->set_rank(first_rank + static_cast<uint32_t>(i));
      hello.mutable_hello()->set_session_id(sessions[i]);
      v1::LaneUp* up = hellos.add_lanes();
      up->set_lane(static_cast<uint32_t>(i));
      up->set_message(hello.SerializeAsString());
    }
    Begin(stub, "/gnmr.v1.GnmrRelay/NodeSession", Serialized(hellos));
  }

  // One message with `report` on each lane that reports (none while every
  // lane stands by).
  void Send(const std::string& report) {
    v1::NodeClientMessage m;
    for (size_t i = 0; i < lanes_.size(); ++i) {
      if (lanes_[i].standby.load(std::memory_order_relaxed)) continue;
      v1::LaneUp* up = m.add_lanes();
      up->set_lane(static_cast<uint32_t>(i));
      up->set_message(report);
    }
    if (m.lanes_size() > 0) Write(Serialized(m));
  }

 private:
  void OnMessage(const std::string& bytes) override {
    v1::NodeServerMessage msg;
    if (!msg.ParseFromString(bytes)) return;
    v1::NodeClientMessage acks;  // the node's ranks' acks, in one write
    for (const v1::LaneDelivery& d : msg.deliveries()) {
      v1::ServerMessage inner;
      if (!inner.ParseFromString(d.message())) continue;
      for (uint32_t lane : d.lanes()) {
        if (lane >= lanes_.size()) continue;
        CountMessage(inner, &lanes_[lane], log_);
        v1::ClientMessage ack;
        if (AckFor(inner, lanes_[lane].standby.load(std::memory_order_relaxed), *log_, &ack)) {
          v1::LaneUp* up = acks.add_lanes();
          up->set_lane(lane);
          up->set_message(ack.SerializeAsString());
        }
      }
    }
    if (acks.lanes_size() > 0) Write(Serialized(acks));
  }

  StepLog* log_;
  std::vector<RankView> lanes_;
};

// The simulated ranks' streams: one per rank (LoadRank), or one per node of
// K ranks (LoadNode).
class LoadStreams {
 public:
  LoadStreams(const std::vector<std::unique_ptr<grpc::GenericStub>>& stubs, const std::string& job,
              const std::vector<uint64_t>& sessions, int ranks_per_stream, StepLog* log) {
    const size_t n = sessions.size();
    const size_t k = static_cast<size_t>(ranks_per_stream);
    for (size_t first = 0, s = 0; first < n; first += k, ++s) {
      grpc::GenericStub* stub = stubs[s % stubs.size()].get();
      if (k == 1) {
        ranks_.push_back(std::make_unique<LoadRank>(stub, job, static_cast<uint32_t>(first),
                                                    sessions[first], log));
      } else {
        const std::vector<uint64_t> lanes(sessions.begin() + static_cast<ptrdiff_t>(first),
                                          sessions.begin() + static_cast<ptrdiff_t>(first + k));
        nodes_.push_back(
            std::make_unique<LoadNode>(stub, job, static_cast<uint32_t>(first), lanes, log));
      }
    }
  }

  void Send(const grpc::ByteBuffer& report) {
    for (auto& r : ranks_) r->Send(report);
    if (nodes_.empty()) return;
    grpc::ByteBuffer copy(report);
    const std::string bytes = Bytes(&copy);
    for (auto& n : nodes_) n->Send(bytes);
  }

  void CloseAll() {
    for (auto& r : ranks_) r->Close();
    for (auto& n : nodes_) n->Close();
    for (auto& r : ranks_) r->Wait();
    for (auto& n : nodes_) n->Wait();
  }

 private:
  std::vector<std::unique_ptr<LoadRank>> ranks_;
  std::vector<std::unique_ptr<LoadNode>> nodes_;
};

}  // namespace gnmr::bench
