#include "relay/local_session.h"

#include <utility>
#include <vector>

#include "common/tsan_annotations.h"
#include "proto/shared_slice.h"

namespace gnmr::relay {

// --------------------------------------------------------------- LocalLink

void LocalLink::Deliver(std::shared_ptr<const std::string> bytes) {
  LocalSession* session = nullptr;
  {
    MutexLock lock(mu_);
    if (session_ == nullptr || gate_.closing()) return;
    if (gate_.writing) {
      if (queue_.size() < kMaxQueued) {
        queue_.push_back(std::move(bytes));
        return;
      }
      // The rank does not read its decisions: it reconnects and is sent
      // the generation and the recent decisions again. WriteDone finishes.
      gate_.Ask(grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                             "gnmr-relay: the rank fell " + std::to_string(kMaxQueued) +
                                 " messages behind; reconnect"));
      queue_.clear();
      return;
    }
    gate_.writing = true;
    session = session_;
  }
  session->Write(std::move(bytes));
}

void LocalLink::End(const grpc::Status& why) {
  LocalSession* session;
  {
    MutexLock lock(mu_);
    if (session_ == nullptr || !gate_.Ask(why)) return;
    queue_.clear();
    if (!gate_.Take()) return;  // WriteDone or EndRearm finishes
    session = session_;
  }
  session->End(TakenStatus());
}

void LocalLink::WriteDone() {
  LocalSession* session;
  std::shared_ptr<const std::string> next;
  bool finish = false;
  {
    MutexLock lock(mu_);
    session = session_;
    if (session == nullptr) return;
    if (!queue_.empty() && !gate_.closing()) {
      next = std::move(queue_.front());
      queue_.pop_front();
    } else {
      gate_.writing = false;
      finish = gate_.Take();
    }
  }
  if (finish) {
    session->End(TakenStatus());
  } else if (next) {
    session->Write(std::move(next));
  }
}

bool LocalLink::BeginRearm() {
  MutexLock lock(mu_);
  return session_ != nullptr && gate_.BeginRearm();
}

void LocalLink::EndRearm() {
  LocalSession* session;
  {
    MutexLock lock(mu_);
    if (!gate_.EndRearm()) return;
    session = session_;
  }
  session->End(TakenStatus());
}

void LocalLink::Detach() {
  MutexLock lock(mu_);
  session_ = nullptr;
  queue_.clear();
}

// ------------------------------------------------------------ LocalSession

namespace {

std::string Metadata(const grpc::CallbackServerContext* ctx, const char* key) {
  const auto& md = ctx->client_metadata();
  auto it = md.find(key);
  return it == md.end() ? std::string() : std::string(it->second.data(), it->second.size());
}

}  // namespace

LocalSession::LocalSession(grpc::CallbackServerContext* ctx, std::shared_ptr<NodeStream> stream)
    : ctx_(ctx), stream_(std::move(stream)), token_(Metadata(ctx, "x-gnmr-token")) {
  link_ = std::make_shared<LocalLink>(this);
  GNMR_HAPPENS_BEFORE(&order_.constructed);
  if (!stream_ || !stream_->Open(link_)) {
    link_->End(grpc::Status(grpc::StatusCode::UNAVAILABLE, "gnmr-relay: gnmrd is not reachable"));
    return;
  }
  lane_open_ = true;
  Read();
}

// What gRPC orders between these calls, told to TSan as gnmrd's session
// reactor does (common/tsan_annotations.h).
void LocalSession::Read() {
  GNMR_HAPPENS_BEFORE(&order_.read);
  StartRead(&in_);
}

void LocalSession::Reacting(char* op) {
  GNMR_HAPPENS_AFTER(&order_.constructed);
  if (op != nullptr) GNMR_HAPPENS_AFTER(op);
}

void LocalSession::Reacted() { GNMR_HAPPENS_BEFORE(&order_.ended); }

void LocalSession::Write(std::shared_ptr<const std::string> bytes) {
  // The node's one copy, shared (proto/shared_slice.h).
  out_ = SharedBytes(*bytes, bytes);
  GNMR_HAPPENS_BEFORE(&order_.write);
  StartWrite(&out_);
}

void LocalSession::End(const grpc::Status& status) {
  GNMR_HAPPENS_BEFORE(&order_.ended);
  Finish(status);
}

void LocalSession::OnReadDone(bool ok) {
  Reacting(&order_.read);
  if (!ok) {  // the rank half-closed, or the call is cancelled
    stream_->Close(link_.get());
    lane_open_ = false;
    link_->End(grpc::Status::OK);
    Reacted();
    return;
  }
  std::vector<grpc::Slice> slices;
  std::string bytes;
  if (in_.Dump(&slices).ok()) {
    bytes.reserve(in_.Length());
    for (const grpc::Slice& s : slices) {
      bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
    }
  }
  in_.Clear();
  const grpc::Status sent = stream_->Send(link_.get(), std::move(bytes), token_);
  if (!sent.ok()) {  // this rank's stream alone ends (node_stream.h says why)
    stream_->Close(link_.get());
    lane_open_ = false;
    link_->End(sent);
    Reacted();
    return;
  }
  token_.clear();
  if (link_->BeginRearm()) {
    Read();
    link_->EndRearm();
  }
  Reacted();
}

void LocalSession::OnWriteDone(bool /*ok*/) {
  Reacting(&order_.write);
  link_->WriteDone();
  Reacted();
}

void LocalSession::OnCancel() {
  Reacting(nullptr);
  link_->End(grpc::Status(grpc::StatusCode::CANCELLED, "cancelled"));
  Reacted();
}

void LocalSession::OnDone() {
  Reacting(&order_.ended);
  link_->Detach();
  if (lane_open_) stream_->Close(link_.get());
  delete this;
}

}  // namespace gnmr::relay
