// IoLoop (io_loop.h): the I/O thread's attempts, each a Register and a
// Session with its reader thread, the back-off between them, and the RPC in
// flight that Stop cancels. What a session writes is in
// io_loop_outbound.cc, what it reads in io_loop_inbound.cc.
#include "client/src/io_loop.h"

#include <algorithm>
#include <exception>
#include <string>
#include <utility>

#include <spdlog/spdlog.h>

#include "client/src/channel.h"
#include "common/target_check.h"

namespace gnmr {
namespace {

// What a failed attempt means for the user (ProblemKind), from its status
// and `registered`: its hello was written.
ProblemKind KindOf(const Status& s, bool registered, bool attach_timed_out) {
  if (attach_timed_out) return ProblemKind::kNotAttached;
  switch (s.code()) {
    case StatusCode::kUnauthenticated:
    case StatusCode::kPermissionDenied:
      return ProblemKind::kUnauthenticated;
    case StatusCode::kUnavailable:
    case StatusCode::kDeadlineExceeded:
      return registered ? ProblemKind::kStream : ProblemKind::kUnreachable;
    case StatusCode::kFailedPrecondition:
    case StatusCode::kInvalidArgument:
    case StatusCode::kResourceExhausted:
    case StatusCode::kNotFound:
    case StatusCode::kAlreadyExists:
    case StatusCode::kOutOfRange:
      return registered ? ProblemKind::kStream : ProblemKind::kRefused;
    default:
      return ProblemKind::kStream;
  }
}

// Unregisters the RPC in flight when a scope ends, however it ends.
class TrackedCall {
 public:
  TrackedCall(IoLoop* loop, bool tracked) : loop_(loop), tracked_(tracked) {}
  ~TrackedCall() {
    if (tracked_) loop_->UntrackForScope();
  }
  TrackedCall(const TrackedCall&) = delete;
  TrackedCall& operator=(const TrackedCall&) = delete;

 private:
  IoLoop* loop_;
  bool tracked_;
};

}  // namespace

IoLoop::IoLoop(const ClientOptions& options, v1::RegisterRequest request, Outbox* outbox,
               SharedState* shared, GpuPath* gpu)
    : options_(options),
      request_(std::move(request)),
      outbox_(outbox),
      shared_(shared),
      gpu_(gpu) {}

IoLoop::~IoLoop() { Stop(); }

void IoLoop::Start() {
  channel_ = MakeChannel(options_);
  stub_ = v1::Gnmr::NewStub(channel_);
  thread_ = std::thread([this] {
    try {
      Run();
    } catch (...) {
      // Run catches per attempt; this is the last line of defence.
      SetConnected(false);
    }
  });
}

void IoLoop::Stop() {
  {
    MutexLock lock(call_mu_);
    stop_.store(true, std::memory_order_release);
    if (call_ != nullptr) call_->TryCancel();
  }
  stop_cv_.notify_all();
  outbox_->Wake();
  {
    MutexLock lock(shared_->mu);
    shared_->stopping = true;
  }
  shared_->decision_cv.notify_all();
  if (thread_.joinable()) thread_.join();
}

void IoLoop::Run() {
  std::chrono::milliseconds backoff = options_.backoff_initial;
  while (!Stopping()) {
    Reached reached = Reached::kNothing;
    Status s;
    try {
      s = Attempt(&reached);
    } catch (const std::exception& e) {
      s = Internal(std::string("client I/O thread: ") + e.what());
    } catch (...) {
      s = Internal("client I/O thread: unknown exception");
    }
    SetConnected(false);
    const bool stopping = Stopping();
    const bool attached = reached == Reached::kAttached;
    // Problems first: a WaitConnected woken below finds them.
    if (!stopping && !s.ok()) {
      const bool attach_timed_out =
          reached == Reached::kHelloSent && s.code() == StatusCode::kDeadlineExceeded;
      shared_->problems.Record(KindOf(s, reached != Reached::kNothing, attach_timed_out),
                               s.message());
    }
    {
      MutexLock lock(shared_->mu);
      ++shared_->attempts_done;
      shared_->last_attempt = attached ? Status::Ok() : s;
      shared_->connecting = false;
    }
    shared_->decision_cv.notify_all();  // WaitConnected, PlanFor
    if (stopping) break;
    shared_->connect_failures.fetch_add(1, std::memory_order_relaxed);
    RecordError(s);
    if (attached) backoff = options_.backoff_initial;
    // A Register that waited for the channel until its deadline has already
    // been paced by the channel's own reconnect backoff.
    if (reached == Reached::kNothing && s.code() == StatusCode::kDeadlineExceeded) {
      SleepFor(options_.backoff_initial);
      continue;
    }
    SleepFor(backoff);
    backoff = std::min(backoff * 2, options_.backoff_max);
  }
}

Status IoLoop::Attempt(Reached* reached) {
  v1::RegisterResponse resp;
  GNMR_RETURN_IF_ERROR(Register(&resp));
  if (resp.unit_ids_size() != request_.units_size()) {
    return Internal("Register returned " + std::to_string(resp.unit_ids_size()) + " unit ids for " +
                    std::to_string(request_.units_size()) + " units");
  }
  unit_ids_.assign(resp.unit_ids().begin(), resp.unit_ids().end());
  handles_by_id_.resize(unit_ids_.size());
  for (uint32_t h = 0; h < handles_by_id_.size(); ++h) handles_by_id_[h] = h;
  std::stable_sort(handles_by_id_.begin(), handles_by_id_.end(),
                   [this](uint32_t a, uint32_t b) { return unit_ids_[a] < unit_ids_[b]; });
  validator_.Reset(unit_ids_);
  {
    MutexLock lock(shared_->mu);
    shared_->AdoptGenerationLocked(resp.generation(), resp.lag());
  }
  CheckConfig(resp);
  // Steps the job has decided already would only be late at the daemon.
  outbox_->DropUpTo(resp.last_step());
  return RunSession(resp, reached);
}

void IoLoop::PrepareContext(grpc::ClientContext* ctx) const {
  if (!options_.token.empty()) ctx->AddMetadata("x-gnmr-token", options_.token);
}

Status IoLoop::Register(v1::RegisterResponse* resp) {
  // A Unix socket that is not there cannot answer: fail at once, with the
  // reason, instead of waiting out the deadline (the next attempt looks
  // again, so a daemon that starts later is still found).
  if (options_.target.rfind("unix:", 0) == 0) {
    const std::string problem = TargetProblem(options_.target);
    if (!problem.empty()) return Status(StatusCode::kUnavailable, "Register: " + problem);
  }
  grpc::ClientContext ctx;
  PrepareContext(&ctx);
  ctx.set_wait_for_ready(true);
  const auto window = std::max(options_.backoff_max, std::chrono::milliseconds(1000));
  ctx.set_deadline(std::chrono::system_clock::now() + window);
  if (!Track(&ctx)) return Status(StatusCode::kCancelled, "stopping");
  {
    // What this rank planned, or can plan, with the decisions it holds: a
    // daemon restored from an older snapshot decides past it.
    MutexLock lock(shared_->mu);
    request_.set_held_through(shared_->HeldThroughLocked());
  }
  grpc::Status st;
  {
    TrackedCall tracked(this, true);
    st = stub_->Register(&ctx, request_, resp);
  }
  if (st.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED ||
      st.error_code() == grpc::StatusCode::UNAVAILABLE) {
    const std::string problem = TargetProblem(options_.target);
    std::string msg = st.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED
                          ? "Register: no daemon answered at " + options_.target + " within " +
                                std::to_string(window.count()) + " ms"
                          : "Register: " + options_.target + " unavailable: " + st.error_message();
    if (!problem.empty()) msg += " (" + problem + ")";
    return Status(st.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED
                      ? StatusCode::kDeadlineExceeded
                      : StatusCode::kUnavailable,
                  msg);
  }
  if (st.error_code() == grpc::StatusCode::UNAUTHENTICATED) {
    return Status(
        StatusCode::kUnauthenticated,
        "Register: job '" + options_.job_id + "' refused the token" +
            (options_.token.empty() ? " (none was given: set ClientOptions::token)" : "") + ": " +
            st.error_message());
  }
  return FromGrpc(st, "Register");
}

Status IoLoop::RunSession(const v1::RegisterResponse& resp, Reached* reached) {
  grpc::ClientContext ctx;
  PrepareContext(&ctx);
  if (!Track(&ctx)) return Status(StatusCode::kCancelled, "stopping");
  // Unregisters ctx before it is destroyed, on every path out.
  TrackedCall tracked(this, true);
  std::unique_ptr<Stream> stream = stub_->Session(&ctx);
  v1::ClientMessage hello;
  hello.mutable_hello()->set_job_id(options_.job_id);
  hello.mutable_hello()->set_rank(options_.rank);
  hello.mutable_hello()->set_session_id(resp.session_id());
  if (!stream->Write(hello)) return FromGrpc(stream->Finish(), "Session");
  *reached = Reached::kHelloSent;
  {
    // Connecting, not connected, until the daemon answers (AwaitAttach).
    MutexLock lock(shared_->mu);
    shared_->connecting = true;
  }

  std::atomic<bool> heard{false};
  std::atomic<bool> broken{false};
  standby_.StartSession();  // before the reader can hear a role
  shared_->standby.store(false, std::memory_order_relaxed);
  std::thread reader([&] { ReadDecisions(stream.get(), &heard, &broken); });
  Status result;
  bool write_failed = false;
  try {
    result = AwaitAttach(heard, broken);
    if (result.ok()) {
      *reached = Reached::kAttached;
      spdlog::info("gnmr client: job {} rank {} connected to {} ({} units, lag {}, last step {})",
                   options_.job_id, options_.rank, options_.target, unit_ids_.size(), resp.lag(),
                   resp.last_step());
      result = Pump(stream.get(), broken, &write_failed);
    }
  } catch (const std::exception& e) {
    result = Internal(std::string("client I/O thread: ") + e.what());
  } catch (...) {
    result = Internal("client I/O thread: unknown exception");
  }
  // The reader is joined on every path: a joinable std::thread destroyed
  // by an exception would terminate the trainer.
  SetConnected(false);
  // A stream the daemon ended has the daemon's status waiting: cancelling
  // it now would turn that into CANCELLED (e.g. a deleted job's "job 'J'
  // was deleted by an operator"). The reader may not have seen the end yet
  // when a write already failed on it: a failed write means the call is
  // over (ended by the daemon, or its transport broke), so the reader's
  // Read ends too and Finish has the status. Stop() still cancels.
  if (!broken.load(std::memory_order_acquire) && !write_failed) ctx.TryCancel();
  reader.join();
  const Status finish = FromGrpc(stream->Finish(), "Session");
  // The daemon's status says more than our own cancellation.
  if (result.code() == StatusCode::kUnavailable && !finish.ok()) result = finish;
  return result;
}

bool IoLoop::Track(grpc::ClientContext* ctx) {
  MutexLock lock(call_mu_);
  if (Stopping()) return false;
  call_ = ctx;
  return true;
}

void IoLoop::UntrackForScope() { Untrack(); }

void IoLoop::Untrack() {
  MutexLock lock(call_mu_);
  call_ = nullptr;
}

void IoLoop::SleepFor(std::chrono::milliseconds d) {
  MutexLock lock(call_mu_);
  stop_cv_.wait_for(lock.native(), d, [this] { return Stopping(); });
}

void IoLoop::SetConnected(bool up) {
  {
    MutexLock lock(shared_->mu);
    if (shared_->connected == up) return;
    shared_->connected = up;
    if (up) {
      shared_->connecting = false;
      shared_->slow = false;
    }
    shared_->connected_flag.store(up, std::memory_order_relaxed);
  }
  shared_->decision_cv.notify_all();  // PlanFor never waits while disconnected
}

void IoLoop::RecordError(const Status& s) {
  if (s.ok()) return;
  {
    MutexLock lock(shared_->mu);
    shared_->last_error = s.ToString();
  }
  uint64_t held_back = 0;
  if (!log_.Allow("background", LogLimiter::Clock::now(), &held_back)) return;
  spdlog::warn("gnmr client: job {} rank {}: {}{}", options_.job_id, options_.rank, s.ToString(),
               held_back == 0 ? std::string()
                              : " (" + std::to_string(held_back) + " similar messages held back)");
}

}  // namespace gnmr
