// LocalTransport: the client's transport for target "local" (transport.h,
// docs/local_mode.md). The controller gnmrd's jobs run (controller/, and
// controller/publish/ for the wire form and the events) runs on the client's own
// background thread, fed by the same Outbox and answering through the same
// SharedState as the gRPC session, so the training thread does exactly what
// it does with gnmrd: Observe queues a report, PlanFor reads the decision
// cache (waiting at most decision_wait, as for the daemon's round trip).
//
// Design notes
// - One rank, one controller. A step is complete when this rank reported
//   it, so each report is decided at once, like a step of a one-rank job
//   in gnmrd: sample = the rank's statistics as the daemon's aggregator
//   combines one replica of an unsharded unit (sumsq as is, amax floored
//   at 0, counts as is, the unit's numel). Data-parallel ranks observe
//   identical statistics after the all-reduce, so every rank's controller
//   makes the same decision. Sharded units are refused (CheckUnit): their
//   norm needs every shard, which only gnmrd sees.
// - A decision goes through the daemon's wire form (DecisionMessage) and
//   the client's DecisionValidator before it reaches the cache: the very
//   path a gRPC decision takes, digest check included.
// - Generations as in gnmrd: 1 at Start; ImportState starts the next one
//   with the imported state's rebuilt last decision.
// - mu_ guards the controller and the events file; the training thread
//   takes it only in ExportState/ImportState (checkpoints, never per step).
// - The thread body catches everything: an exception leaving it would
//   terminate the trainer.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "client/src/decision_cache.h"
#include "client/src/transport.h"
#include "common/mutex.h"
#include "common/thread_annotations.h"
#include "controller/controller.h"
#include "gnmr/client.h"

namespace gnmr {

class LocalTransport final : public Transport {
 public:
  // InvalidArgument for a config that does not validate or an events file
  // that cannot be opened for appending.
  static StatusOr<std::unique_ptr<Transport>> Create(const ClientOptions& options);
  ~LocalTransport() override;

  Status CheckUnit(const std::string& name, uint32_t shard_index,
                   uint32_t shard_count) const override;
  Status Start(TransportWiring wiring) override;
  void Stop() override;
  StatusOr<std::string> ExportState(std::chrono::milliseconds timeout) override;
  StatusOr<uint64_t> ImportState(const std::string& state,
                                 std::chrono::milliseconds timeout) override;

 private:
  LocalTransport(const ClientOptions& options, Controller controller, std::FILE* events);

  void Run();
  void Pump();
  // Decides one report's step.
  void DecideLocked(const Report& r) GNMR_REQUIRES(mu_);
  // Validates `d` as a received decision and stores it in the cache.
  void PublishLocked(const Decision& d) GNMR_REQUIRES(mu_);
  void WriteEventsLocked(const std::vector<v1::Event>& events) GNMR_REQUIRES(mu_);
  void RecordError(ProblemKind kind, const Status& s);

  const ClientOptions& options_;  // the client's, which outlives this
  std::FILE* const events_;       // null: no events file

  Mutex mu_;
  Controller controller_ GNMR_GUARDED_BY(mu_);
  uint64_t generation_ GNMR_GUARDED_BY(mu_) = 1;
  std::vector<uint64_t> numel_ GNMR_GUARDED_BY(mu_);      // per unit, from Start
  std::vector<UnitSample> samples_ GNMR_GUARDED_BY(mu_);  // scratch of DecideLocked
  DecisionValidator validator_ GNMR_GUARDED_BY(mu_);
  std::string event_line_ GNMR_GUARDED_BY(mu_);      // scratch of WriteEventsLocked
  bool events_failed_ GNMR_GUARDED_BY(mu_) = false;  // reported once

  Outbox* outbox_ = nullptr;
  SharedState* shared_ = nullptr;
  GpuPath* gpu_ = nullptr;
  bool started_ = false;  // training thread
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace gnmr
