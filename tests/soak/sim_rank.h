// SimRank: one simulated trainer rank of the soak test, speaking the wire
// protocol over its own connection to gnmrd. Hundreds of them live in one
// process: the Session stream uses gRPC's callback API (no thread per
// rank), and Register is a plain blocking call made by the driver.
//
// A rank keeps the decisions of the job's current generation it received
// (the newest kKeptDecisions), works out its plan for a step the way the
// client library does when no decision is still coming (the newest held
// decision of the generation whose apply step is <= the step), and acks it.
// Every decision it receives is also entered in the shared DecisionLedger,
// which counts two different decisions under one (generation, sequence):
// what every rank receives must be the same bytes.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "gnmr/v1/gnmr.grpc.pb.h"

namespace gnmr::soak {

// The summary of one decision a rank holds.
struct HeldDecision {
  uint64_t generation = 0;
  uint64_t sequence = 0;
  uint64_t digest = 0;
  int64_t observed = -1;
  int64_t apply = -1;
  int recovery = 0;  // entries in the recovery set
};

// Every (generation, sequence) -> decision any rank received.
class DecisionLedger {
 public:
  void Enter(const HeldDecision& d);
  // The decision recorded under (generation, sequence), if any rank got it.
  std::optional<HeldDecision> Find(uint64_t generation, uint64_t sequence) const;
  uint64_t conflicts() const;  // same key, different digest or apply step

 private:
  mutable std::mutex mu_;
  std::map<std::pair<uint64_t, uint64_t>, HeldDecision> decisions_;
  uint64_t conflicts_ = 0;
};

// Wakes the driver when any rank receives something.
struct Progress {
  std::mutex mu;
  std::condition_variable cv;
  void Notify() {
    { std::lock_guard<std::mutex> lock(mu); }
    cv.notify_all();
  }
};

// The job every rank belongs to.
struct JobSpec {
  std::string job_id = "soak";
  std::string token = "soak-job-token";
  uint32_t world_size = 256;
  uint32_t units = 1024;
  v1::ControllerConfig config;
};

class SimRank {
 public:
  SimRank(const std::string& target, const JobSpec* job, uint32_t rank, DecisionLedger* ledger,
          Progress* progress);
  ~SimRank();

  // Registers (again); on success remembers the session and unit ids and
  // returns the response.
  grpc::Status Register(v1::RegisterResponse* resp);
  // Opens the Session stream (after Register). The previous stream, if
  // any, must have ended (Detach or the daemon ended it).
  void Attach();
  // Ends the stream from this side and waits until it is done.
  void Detach();
  // The stream is open and has not ended.
  bool attached() const;
  // How the last stream ended (OK while none ended).
  grpc::Status last_end() const;

  // Sends the step's statistics (every unit; spikes per SpikeFactor).
  void SendStats(int64_t step);
  // Sends the ack of `plan` (nullopt: no decision) for `step`.
  void SendAck(int64_t step, const std::optional<HeldDecision>& plan);
  // Sends a message as it is (bad clients reuse the stream).
  void SendRaw(v1::ClientMessage msg);

  // The generation the rank follows (Register response, GenerationStart).
  uint64_t generation() const;
  // True once a decision of the current generation observed `step` came.
  bool HasDecisionFor(int64_t step) const;
  // The decision covering `step` (see the top of this file).
  std::optional<HeldDecision> PlanFor(int64_t step) const;
  // The first decision of the current generation it holds (a restart's
  // rebuilt decision comes first).
  std::optional<HeldDecision> FirstOfGeneration() const;

  uint32_t rank() const { return rank_; }
  uint64_t session_id() const { return session_id_; }

  // The factor on unit `unit`'s sumsq at `step`, the same on every rank
  // (data-parallel replicas report the same statistics).
  static double SpikeFactor(int64_t step, uint32_t unit, uint32_t units);

 private:
  class Stream;
  friend class Stream;
  static constexpr size_t kKeptDecisions = 256;

  void OnMessage(const v1::ServerMessage& msg);
  void OnStreamDone(const grpc::Status& status);

  const std::string target_;
  const JobSpec* const job_;
  const uint32_t rank_;
  const uint64_t instance_;
  DecisionLedger* const ledger_;
  Progress* const progress_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Gnmr::Stub> stub_;

  uint64_t session_id_ = 0;
  std::vector<uint32_t> unit_ids_;

  mutable std::mutex mu_;
  std::condition_variable done_cv_;
  std::unique_ptr<Stream> stream_;
  std::vector<std::unique_ptr<Stream>> retired_;  // ended streams
  bool stream_done_ = true;
  grpc::Status last_end_;
  uint64_t generation_ = 0;
  std::deque<HeldDecision> decisions_;  // current generation, by sequence
  // What Register says it holds, as the client library does
  // (RegisterRequest.held_through): the steps are one timeline here.
  int64_t held_through_ = -1;
};

}  // namespace gnmr::soak
