#include "daemon/server/session_reactor.h"

#include <spdlog/spdlog.h>

#include "common/text.h"
#include "common/tsan_annotations.h"
#include "daemon/server/raw_unary.h"
#include "proto/shared_slice.h"

namespace gnmr {

std::string TokenFromMetadata(const grpc::CallbackServerContext* ctx, const char* key) {
  const auto& md = ctx->client_metadata();
  auto it = md.find(key);
  if (it == md.end()) return "";
  return std::string(it->second.data(), it->second.size());
}

// ------------------------------------------------------------ SessionSink

void SessionSink::SendDecision(std::shared_ptr<const WireMessage> msg) {
  SessionReactor* reactor = nullptr;
  {
    MutexLock lock(mu_);
    if (reactor_ == nullptr || gate_.closing()) return;
    if (gate_.writing) {
      reactor_->stats_->decisions_dropped += queue_.Push(std::move(msg));
      return;
    }
    gate_.writing = true;
    reactor = reactor_;
    reactor->in_flight_ = std::move(msg);
  }
  // Only the thread that set `writing` starts a write, and the reactor
  // cannot be finished (hence deleted) while it is set.
  reactor->Write();
}

void SessionSink::WriteDone() {
  // What to do next is decided under the lock and acted on outside it;
  // `writing` stays set while a next write is chosen, so SendDecision on
  // another thread only queues.
  SessionReactor* reactor;
  bool next = false;
  bool finish = false;
  {
    MutexLock lock(mu_);
    reactor = reactor_;
    if (reactor == nullptr) return;
    if (!queue_.empty() && !gate_.closing()) {
      reactor->in_flight_ = queue_.Pop();
      next = true;
    } else {
      gate_.writing = false;
      reactor->in_flight_.reset();
      finish = gate_.Take();
    }
  }
  if (finish) {
    reactor->End(TakenStatus());
  } else if (next) {
    reactor->Write();
  }
}

void SessionSink::Close(const Status& why) {
  SessionReactor* reactor;
  {
    MutexLock lock(mu_);
    if (reactor_ == nullptr || !gate_.Ask(ToGrpc(why))) return;
    queue_.Clear();
    if (!gate_.Take()) return;  // WriteDone or EndRearm finishes
    reactor = reactor_;
  }
  reactor->End(TakenStatus());
}

bool SessionSink::BeginRearm() {
  MutexLock lock(mu_);
  return reactor_ != nullptr && gate_.BeginRearm();
}

void SessionSink::EndRearm() {
  SessionReactor* reactor;
  {
    MutexLock lock(mu_);
    if (!gate_.EndRearm()) return;
    reactor = reactor_;
  }
  reactor->End(TakenStatus());
}

void SessionSink::Detach() {
  MutexLock lock(mu_);
  reactor_ = nullptr;
  queue_.Clear();
}

// --------------------------------------------------------- SessionReactor

SessionReactor::SessionReactor(grpc::CallbackServerContext* ctx, JobRegistry* registry,
                               ServerStats* stats, LiveSessions* live,
                               DecisionQueue::Limits queue_limits)
    : ctx_(ctx), stats_(stats), live_(live), handler_(registry) {
  sink_ = std::make_shared<SessionSink>(this, queue_limits);
  stats_->sessions_open++;
  stats_->sessions_total++;
  GNMR_HAPPENS_BEFORE(&order_.constructed);
  Status closing;
  if (live_ != nullptr && !live_->Add(sink_, &closing)) {
    sink_->Close(closing);  // the daemon is shutting down: no read at all
    return;
  }
  Read();
}

void SessionReactor::Read() {
  GNMR_HAPPENS_BEFORE(&order_.read);
  StartRead(&in_bytes_);
}

void SessionReactor::Write() {
  // The shared bytes, no copy per stream (proto/shared_slice.h).
  out_bytes_ = SharedBytes(in_flight_->bytes, in_flight_);
  GNMR_HAPPENS_BEFORE(&order_.write);
  StartWrite(&out_bytes_);
}

void SessionReactor::End(const grpc::Status& status) {
  GNMR_HAPPENS_BEFORE(&order_.ended);
  Finish(status);
}

void SessionReactor::Reacting(char* op) {
  GNMR_HAPPENS_AFTER(&order_.constructed);
  if (op != nullptr) GNMR_HAPPENS_AFTER(op);
}

void SessionReactor::Reacted() { GNMR_HAPPENS_BEFORE(&order_.ended); }

void SessionReactor::OnReadDone(bool ok) {
  Reacting(&order_.read);
  if (!ok) {  // client half-closed, or the call is cancelled
    sink_->Close(Status::Ok());
    Reacted();
    return;
  }
  Status s;
  try {
    const size_t bytes = in_bytes_.Length();
    s = ParseRequest(in_bytes_, &in_);
    in_bytes_.Clear();  // an idle stream holds no report's bytes
    if (s.ok()) {
      s = handler_.Handle(
          in_, bytes, handler_.attached() ? std::string() : TokenFromMetadata(ctx_, "x-gnmr-token"),
          sink_);
    }
  } catch (const std::exception& e) {  // never let an exception reach gRPC
    s = Internal(std::string("internal error: ") + e.what());
  } catch (...) {
    s = Internal("internal error: unknown exception");
  }
  if (!s.ok()) {
    stats_->bad_requests++;
    spdlog::debug("session job={} rank={}: {}", handler_.attached() ? handler_.job()->id() : "?",
                  handler_.rank(), EscapeMessageForLog(s.ToString()));
    sink_->Close(s);
    Reacted();
    return;
  }
  if (sink_->BeginRearm()) {  // else closing: no read after Finish
    Read();
    sink_->EndRearm();
  }
  Reacted();
}

void SessionReactor::OnWriteDone(bool ok) {
  Reacting(&order_.write);
  if (ok) stats_->decisions_sent++;
  sink_->WriteDone();
  Reacted();
}

void SessionReactor::OnCancel() {
  Reacting(nullptr);
  sink_->Close(Status(StatusCode::kCancelled, "cancelled"));
  Reacted();
}

void SessionReactor::OnDone() {
  Reacting(&order_.ended);
  stats_->Record("Session", FromGrpc(sink_->TakenStatus()));
  sink_->Detach();
  if (live_ != nullptr) live_->Remove(sink_.get());
  handler_.Ended(sink_.get());
  stats_->sessions_open--;
  delete this;
}

}  // namespace gnmr
