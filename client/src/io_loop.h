// IoLoop: the client's background thread. It registers, opens the Session
// stream, writes the reports and acks the training thread queued in the
// Outbox, and hands the decisions it reads, once validated, to the shared
// decision cache. On any error it logs (rate-limited), counts, backs off
// (capped exponential) and starts over with a new Register. Its files:
// io_loop.cc (the attempts and the session), io_loop_outbound.cc (what a
// session writes) and io_loop_inbound.cc (what it reads).
//
// Design notes
// - gRPC sync API: this thread writes; a reader thread per session blocks in
//   Read. Every RPC in flight is registered in `call_` so Stop() can
//   TryCancel it: shutdown never waits for the network.
// - Register uses wait_for_ready with a short deadline and the channel's
//   own reconnect backoff is set to ours, so a returning daemon is reached
//   within about backoff_max (about 2 s: docs/architecture.md, "The client
//   library").
// - Nothing escapes: both thread bodies catch everything, since an
//   exception leaving a std::thread would terminate the trainer.
// - Attached, not just open: gnmrd sends GenerationStart first when it
//   attaches a stream (Job::Attach), so the session counts as connected
//   from the daemon's first message, not from the hello. A stream that can
//   be open while the daemon never attached it (a relay that dropped the
//   lane) hears nothing: after options.attach_timeout the session is given
//   up, said (ProblemKind::kNotAttached), counted (attach_failures) and
//   started over. Reports and acks wait for the attach, so none is written
//   into a stream nobody reads; while the hello is unanswered the rank is
//   "connecting" (PlanFor may wait), for at most attach_timeout.
// - GPU statistics (gpu_ non-null): while reports wait for their launch to
//   complete, the pump polls every kGpuPollInterval instead of sleeping
//   kIdleWait, so a report leaves within about that of its GPU results.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "client/src/channel.h"
#include "client/src/decision_cache.h"
#include "client/src/gpu_path.h"
#include "client/src/outbox.h"
#include "client/src/shared_state.h"
#include "client/src/standby_reports.h"
#include "common/log_limiter.h"
#include "common/mutex.h"
#include "common/thread_annotations.h"
#include "gnmr/client.h"
#include "gnmr/status.h"
#include "gnmr/v1/gnmr.grpc.pb.h"

namespace gnmr {

class IoLoop {
 public:
  IoLoop(const ClientOptions& options, v1::RegisterRequest request, Outbox* outbox,
         SharedState* shared, GpuPath* gpu = nullptr);
  ~IoLoop();  // Stop()
  IoLoop(const IoLoop&) = delete;
  IoLoop& operator=(const IoLoop&) = delete;

  void Start();
  void Stop();
  // For the RAII guard of the RPC in flight (io_loop.cc).
  void UntrackForScope();

 private:
  using Stream = grpc::ClientReaderWriter<v1::ClientMessage, v1::ServerMessage>;

  // How far an attempt got.
  enum class Reached { kNothing, kHelloSent, kAttached };

  void Run();
  // One Register + Session; returns why it ended. kAttached resets the
  // backoff.
  Status Attempt(Reached* reached);
  Status Register(v1::RegisterResponse* resp);
  Status RunSession(const v1::RegisterResponse& resp, Reached* reached);
  // Waits for the daemon's first message on the stream (`heard`), up to
  // options.attach_timeout; OK once attached (connected).
  Status AwaitAttach(const std::atomic<bool>& heard, const std::atomic<bool>& broken);
  // Sets *write_failed when a write failed: the call is over.
  Status Pump(Stream* stream, const std::atomic<bool>& broken, bool* write_failed);
  // Sets *heard at the first message and *broken when the stream ends.
  void ReadDecisions(Stream* stream, std::atomic<bool>* heard, std::atomic<bool>* broken);
  // Sets `flag` under shared_->mu and wakes AwaitAttach.
  void Signal(std::atomic<bool>* flag);
  void Accept(const v1::Decision& d);
  void AcceptGeneration(const v1::GenerationStart& g);
  // Warns (ProblemKind::kConfigDiffers) when the job's config is not the
  // one this client asked for.
  void CheckConfig(const v1::RegisterResponse& resp);

  // Writes the held reports the job wants now that this rank reports;
  // false when a write failed.
  bool SendWanted(Stream* stream);
  void PrepareContext(grpc::ClientContext* ctx) const;
  bool Track(grpc::ClientContext* ctx);  // false when stopping
  void Untrack();
  bool Stopping() const { return stop_.load(std::memory_order_acquire); }
  void SleepFor(std::chrono::milliseconds d);
  void SetConnected(bool up);
  void RecordError(const Status& s);

  const ClientOptions options_;
  // Only the I/O thread touches it: held_through is set at each Register.
  v1::RegisterRequest request_;
  Outbox* const outbox_;
  SharedState* const shared_;
  GpuPath* const gpu_;  // null without device units
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Gnmr::Stub> stub_;

  // Session state: set before the reader thread starts, then read-only
  // (unit_ids_) or owned by the reader (validator_).
  std::vector<uint32_t> unit_ids_;
  std::vector<uint32_t> handles_by_id_;  // unit handles in unit id order
  DecisionValidator validator_;
  v1::ClientMessage out_;  // reused for every write
  // Reporter election: the role the daemon gave, and the reports a
  // standby holds back (standby_reports.h).
  StandbyReports standby_{kStandbyKeep};
  static constexpr size_t kStandbyKeep = 8;
  // A daemon that is down for an hour must not write one line per attempt.
  LogLimiter log_{std::chrono::seconds(5)};

  std::atomic<bool> stop_{false};
  Mutex call_mu_;
  std::condition_variable stop_cv_;                                // wakes backoff sleeps
  grpc::ClientContext* call_ GNMR_GUARDED_BY(call_mu_) = nullptr;  // the RPC in flight
  std::thread thread_;
};

// Tests: called by the I/O thread before it writes each report, so a test
// can make that path throw (an empty function removes it).
void SetReportWriteHookForTesting(std::function<void()> hook);

}  // namespace gnmr
