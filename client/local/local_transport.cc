#include "client/local/local_transport.h"

#include <cerrno>
#include <cstring>
#include <exception>
#include <utility>

#include <spdlog/spdlog.h>

#include "common/wall_clock.h"
#include "controller/publish/decision_events.h"
#include "controller/publish/decision_message.h"
#include "controller/publish/event_json.h"
#include "controller/state_codec.h"
#include "gnmr/v1/controller.pb.h"

namespace gnmr {
namespace {

constexpr auto kIdleWait = std::chrono::milliseconds(100);
constexpr auto kGpuPollInterval = std::chrono::microseconds(200);

}  // namespace

StatusOr<std::unique_ptr<Transport>> LocalTransport::Create(const ClientOptions& options) {
  // The config the daemon would create the job with: the client's, else the
  // defaults (Client::Create has validated a given one already).
  StatusOr<Controller> c = Controller::Create(options.config.value_or(ControllerConfig()));
  if (!c.ok()) return InvalidArgument("target \"local\": config: " + c.status().message());
  std::FILE* events = nullptr;
  if (!options.local_events_path.empty()) {
    events = std::fopen(options.local_events_path.c_str(), "ae");
    if (events == nullptr) {
      return InvalidArgument("local_events_path '" + options.local_events_path +
                             "' cannot be opened for appending: " + std::strerror(errno));
    }
  }
  return std::unique_ptr<Transport>(new LocalTransport(options, std::move(c).value(), events));
}

LocalTransport::LocalTransport(const ClientOptions& options, Controller controller,
                               std::FILE* events)
    : options_(options), events_(events), controller_(std::move(controller)) {}

LocalTransport::~LocalTransport() {
  Stop();
  if (events_ != nullptr) std::fclose(events_);
}

Status LocalTransport::CheckUnit(const std::string& name, uint32_t shard_index,
                                 uint32_t shard_count) const {
  if (shard_count <= 1) return Status::Ok();
  return FailedPrecondition(
      "unit '" + name + "' is shard " + std::to_string(shard_index) + " of " +
      std::to_string(shard_count) +
      ": target \"local\" runs one controller per rank on that rank's own statistics and "
      "cannot combine a sharded unit's shards (the ranks would decide on parts of the "
      "gradient, and differently); run gnmrd and set the target to its address "
      "(docs/local_mode.md)");
}

Status LocalTransport::Start(TransportWiring w) {
  if (started_) return FailedPrecondition("local transport started twice");
  outbox_ = w.outbox;
  shared_ = w.shared;
  gpu_ = w.gpu;
  std::vector<uint32_t> ids;
  int32_t lag = 0;
  {
    MutexLock lock(mu_);
    // Controller ids follow registration order, as the client's handles do.
    for (const v1::UnitSpec& u : w.request.units()) {
      StatusOr<uint32_t> id = controller_.AddUnit(u.name());
      if (!id.ok()) return id.status();
      ids.push_back(*id);
      numel_.push_back(u.numel());
    }
    validator_.Reset(ids);
    lag = controller_.next_lag();
    MutexLock sh(shared_->mu);
    shared_->AdoptGenerationLocked(generation_, lag);
    shared_->StartGenerationLocked(generation_, lag, controller_.sequence() + 1);
    shared_->connected = true;
    shared_->connecting = false;
    shared_->attempts_done = 1;
    shared_->last_attempt = Status::Ok();
    shared_->connected_flag.store(true, std::memory_order_relaxed);
  }
  shared_->registrations.fetch_add(1, std::memory_order_relaxed);
  shared_->decision_cv.notify_all();
  spdlog::info(
      "gnmr client: job {} rank {}: controller in this process (target \"local\", "
      "{} units, lag {})",
      options_.job_id, options_.rank, ids.size(), lag);
  started_ = true;
  thread_ = std::thread([this] { Run(); });
  return Status::Ok();
}

void LocalTransport::Stop() {
  if (!started_) return;
  stop_.store(true, std::memory_order_release);
  outbox_->Wake();
  {
    MutexLock lock(shared_->mu);
    shared_->stopping = true;
    shared_->connected = false;
    shared_->connected_flag.store(false, std::memory_order_relaxed);
  }
  shared_->decision_cv.notify_all();
  if (thread_.joinable()) thread_.join();
}

void LocalTransport::Run() {
  while (!stop_.load(std::memory_order_acquire)) {
    try {
      Pump();
    } catch (const std::exception& e) {
      RecordError(ProblemKind::kStream, Internal(std::string("local controller: ") + e.what()));
    } catch (...) {
      RecordError(ProblemKind::kStream, Internal("local controller: unknown exception"));
    }
  }
}

// One round: acks, then one report. The acks are for gnmrd's comparison of
// the ranks' plans; one controller per rank has nothing to compare them with.
void LocalTransport::Pump() {
  AckItem a;
  while (outbox_->PopAck(&a)) {
    shared_->acks_sent.fetch_add(1, std::memory_order_relaxed);
    outbox_->AckDone();
  }
  if (gpu_ != nullptr) gpu_->Drain(true);  // completed launches -> queued reports
  if (Report* r = outbox_->PopReport()) {
    try {
      MutexLock lock(mu_);
      DecideLocked(*r);
    } catch (...) {
      outbox_->Release(r, false);  // never leak a slot
      throw;
    }
    // Counted, and the slot given back, once the decision is in the cache:
    // Flush() then means "decided".
    shared_->reports_sent.fetch_add(1, std::memory_order_relaxed);
    outbox_->Release(r, true);
    return;
  }
  outbox_->Wait(gpu_ != nullptr && gpu_->pending() > 0
                    ? std::chrono::duration_cast<std::chrono::microseconds>(kGpuPollInterval)
                    : std::chrono::duration_cast<std::chrono::microseconds>(kIdleWait));
}

void LocalTransport::DecideLocked(const Report& r) {
  // After an import, reports of steps the imported state has decided are
  // late, as in gnmrd.
  if (controller_.last_step() && r.step <= *controller_.last_step()) return;
  const size_t n = numel_.size();
  samples_.clear();
  for (size_t i = 0; i < n; ++i) {
    // A unit marked inactive is left out, as gnmrd leaves out a unit no
    // sparse report lists (docs/statistics.md).
    if (r.inactive_count > 0 && r.inactive[i]) continue;
    // One replica of an unsharded unit, combined as gnmrd's aggregator does
    // (daemon/aggregator/step_aggregator.cc, Combine): the same doubles.
    UnitSample& s = samples_.emplace_back();
    s.unit_id = static_cast<uint32_t>(i);
    s.sumsq = r.sumsq[i];  // summed over 1 replica, divided by 1: the same double
    s.amax = r.amax[i] > 0.0 ? r.amax[i] : 0.0;
    s.nonfinite = r.nonfinite[i];
    s.zeros = r.zeros[i];
    s.numel = numel_[i];
    // Forward statistics as the aggregator combines one replica's: the
    // same doubles (its sum over one replica divided by one).
    if (r.fwd_units > 0 && r.fwd_numel[i] > 0) {
      s.fwd_sumsq = r.fwd_sumsq[i];
      s.fwd_amax = r.fwd_amax[i] > 0.0 ? r.fwd_amax[i] : 0.0;
      s.fwd_saturated = r.fwd_saturated[i];
      s.fwd_zeros = r.fwd_zeros[i];
      s.fwd_numel = r.fwd_numel[i];
      s.fwd_order = ForwardOrderKey(options_.pipeline_stage, r.fwd_order[i]);
      if (r.fwd_block_units > 0) {
        s.fwd_blocks = r.fwd_blocks[i];
        s.fwd_saturated_blocks = r.fwd_saturated_blocks[i];
        s.fwd_dead_blocks = r.fwd_dead_blocks[i];
        s.fwd_scale_clamps = r.fwd_scale_clamps[i];
      }
      if (r.fwd_source_units > 0) {
        s.fwd_source_numel = r.fwd_source_numel[i];
        s.fwd_underflow = r.fwd_underflow[i];
        s.fwd_error_sumsq = r.fwd_error_sumsq[i];
        s.fwd_source_sumsq = r.fwd_source_sumsq[i];
      }
    }
    if (r.bwd_units > 0 && r.bwd_numel[i] > 0) {  // the same for the backward figures
      s.bwd_sumsq = r.bwd_sumsq[i];
      s.bwd_saturated = r.bwd_saturated[i];
      s.bwd_zeros = r.bwd_zeros[i];
      s.bwd_numel = r.bwd_numel[i];
      s.bwd_order = BackwardOrderKey(options_.pipeline_stage, r.bwd_order[i]);
    }
  }
  Decision d;
  Status s = controller_.Observe(r.step, samples_, &d);
  if (!s.ok()) {  // cannot happen: steps increase and the statistics are ours
    RecordError(ProblemKind::kStream,
                Status(s.code(), "local controller: step " + std::to_string(r.step) +
                                     " not decided: " + s.message()));
    return;
  }
  PublishLocked(d);
  if (events_ != nullptr && d.HasChanges()) {
    std::vector<v1::Event> events;
    AppendDecisionEvents(d, controller_, UnixNowSeconds(), &events);
    WriteEventsLocked(events);
  }
}

void LocalTransport::PublishLocked(const Decision& d) {
  const std::shared_ptr<const v1::ServerMessage> msg = DecisionMessage(d, generation_);
  StatusOr<CachedDecision> c = validator_.Validate(msg->decision());
  if (!c.ok()) {  // cannot happen: the daemon's own wire form
    shared_->decisions_rejected.fetch_add(1, std::memory_order_relaxed);
    RecordError(ProblemKind::kBadDecision, c.status());
    return;
  }
  DecisionCache::Insert result;
  {
    MutexLock lock(shared_->mu);
    result = shared_->AddDecisionLocked(std::move(c).value());  // clears `slow` on progress
  }
  if (result == DecisionCache::Insert::kStored) {
    shared_->decisions_received.fetch_add(1, std::memory_order_relaxed);
  }
  shared_->decision_cv.notify_all();
}

void LocalTransport::WriteEventsLocked(const std::vector<v1::Event>& events) {
  if (events_ == nullptr || events.empty()) return;
  event_line_.clear();
  for (const v1::Event& e : events) AppendEventJsonLine(options_.job_id, e, &event_line_);
  const bool ok =
      std::fwrite(event_line_.data(), 1, event_line_.size(), events_) == event_line_.size() &&
      std::fflush(events_) == 0;
  if (!ok && !events_failed_) {
    events_failed_ = true;  // once: a full disk must not log every step
    RecordError(ProblemKind::kStream, Status(StatusCode::kUnavailable,
                                             "local_events_path '" + options_.local_events_path +
                                                 "': write failed: " + std::strerror(errno)));
  } else if (ok) {
    events_failed_ = false;
  }
}

void LocalTransport::RecordError(ProblemKind kind, const Status& s) {
  shared_->problems.Record(kind, s.message());
  {
    MutexLock lock(shared_->mu);
    shared_->last_error = s.ToString();
  }
  spdlog::warn("gnmr client: job {} rank {}: {}", options_.job_id, options_.rank, s.ToString());
}

StatusOr<std::string> LocalTransport::ExportState(std::chrono::milliseconds) {
  MutexLock lock(mu_);
  return ControllerStateCodec::SaveToString(controller_);
}

StatusOr<uint64_t> LocalTransport::ImportState(const std::string& bytes,
                                               std::chrono::milliseconds) {
  if (!started_) {
    return FailedPrecondition(
        "ImportState before Start: in local mode the controller learns "
        "its units at Start");
  }
  v1::ControllerState state;
  if (!state.ParseFromString(bytes)) {
    return InvalidArgument(
        "ImportState: the bytes are not a gnmr.v1.ControllerState "
        "(not from ExportState?)");
  }
  StatusOr<Controller> c = ControllerStateCodec::Restore(state);
  if (!c.ok()) return InvalidArgument(c.status().message());
  MutexLock lock(mu_);
  // As gnmrd checks an import: the job's units, in id order (more may follow).
  const size_t n = numel_.size();
  if (c->num_units() < n) {
    return FailedPrecondition("imported state has " + std::to_string(c->num_units()) +
                              " units, the job has " + std::to_string(n));
  }
  for (uint32_t id = 0; id < n; ++id) {
    if (c->unit(id).name != controller_.unit(id).name) {
      return FailedPrecondition("imported state has unit '" + c->unit(id).name + "' at id " +
                                std::to_string(id) + ", the job has '" + controller_.unit(id).name +
                                "'");
    }
  }
  controller_ = std::move(c).value();
  ++generation_;
  Decision last;
  const bool rebuilt = RebuildLastDecision(controller_, &last);
  {
    MutexLock sh(shared_->mu);
    shared_->StartGenerationLocked(generation_, controller_.next_lag(),
                                   controller_.sequence() + (rebuilt ? 0 : 1));
  }
  shared_->decision_cv.notify_all();
  if (rebuilt) PublishLocked(last);
  const double now = UnixNowSeconds();
  const int64_t step = controller_.last_step().value_or(-1);
  WriteEventsLocked(
      {JobEvent(v1::EVENT_KIND_IMPORT, step, now,
                "units=" + std::to_string(controller_.num_units())),
       JobEvent(v1::EVENT_KIND_GENERATION, step, now,
                "generation " + std::to_string(generation_) + ": controller state imported")});
  return generation_;
}

}  // namespace gnmr
