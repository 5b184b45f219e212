// RawRank: a trainer rank speaking the wire protocol directly through the
// generated gRPC stubs, over a real channel. Used to drive gnmrd in tests
// with exact control over every message (including invalid ones).
#pragma once

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include "controller/types/plan_coverage.h"
#include "gnmr/v1/gnmr.grpc.pb.h"

namespace gnmr::testing {

class RawRank {
 public:
  RawRank(std::shared_ptr<grpc::Channel> channel, std::string job, uint32_t rank, uint32_t world,
          std::string token = "")
      : stub_(v1::Gnmr::NewStub(channel)),
        job_(std::move(job)),
        rank_(rank),
        world_(world),
        token_(std::move(token)) {}
  ~RawRank() { Close(); }

  struct Unit {
    std::string name;
    uint32_t shard_index = 0;
    uint32_t shard_count = 1;
    uint64_t numel = 1000;
  };

  // `instance` 0: an old client that does not say.
  grpc::Status Register(const std::vector<Unit>& units, v1::RegisterResponse* resp = nullptr,
                        const v1::ControllerConfig* config = nullptr, uint64_t instance = 0) {
    v1::RegisterRequest req;
    req.set_job_id(job_);
    req.set_rank(rank_);
    req.set_world_size(world_);
    req.set_client_version("raw-test");
    req.set_instance(instance);
    req.set_can_stand_by(can_stand_by);
    for (const Unit& u : units) {
      v1::UnitSpec* s = req.add_units();
      s->set_name(u.name);
      s->set_numel(u.numel);
      s->set_dtype(v1::DTYPE_FP32);
      s->set_shard_index(u.shard_index);
      s->set_shard_count(u.shard_count);
    }
    if (config) *req.mutable_config() = *config;
    if (says_held_through) {
      req.set_says_held_through(true);
      req.set_held_through(HeldThrough());
    }
    return RegisterRaw(req, resp);
  }

  // What the client library says at registration (RegisterRequest.
  // held_through): the last step the decisions received can plan, -1 if
  // none (a fresh rank).
  int64_t HeldThrough() {
    std::lock_guard<std::mutex> lock(mu_);
    int64_t through = -1;
    for (const v1::ServerMessage& m : messages_) {
      if (!m.has_decision()) continue;
      const v1::Decision& d = m.decision();
      through =
          std::max(through, LastPlannableStep(d.observed_step(), d.apply_step(), d.next_lag()));
    }
    return through;
  }

  grpc::Status RegisterRaw(const v1::RegisterRequest& req, v1::RegisterResponse* out = nullptr) {
    grpc::ClientContext ctx;
    ctx.AddMetadata("x-gnmr-token", token_);
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    v1::RegisterResponse resp;
    grpc::Status s = stub_->Register(&ctx, req, &resp);
    if (s.ok()) {
      session_id_ = resp.session_id();
      unit_ids_.assign(resp.unit_ids().begin(), resp.unit_ids().end());
    }
    if (out) *out = resp;
    return s;
  }

  // Opens the Session stream and sends the hello (none with `hello` false:
  // a stream that belongs to no job yet). With `read` false nothing is read
  // until StartReading(): a stalled rank, whose messages back up in gnmrd.
  void Open(uint64_t session_override = 0, bool hello = true, bool read = true) {
    ctx_ = std::make_unique<grpc::ClientContext>();
    ctx_->AddMetadata("x-gnmr-token", token_);
    stream_ = stub_->Session(ctx_.get());
    if (hello) SendHello(session_override);
    if (read) StartReading();
  }

  // The hello of a stream opened without one.
  bool SendHello(uint64_t session_override = 0) {
    v1::ClientMessage m;
    m.mutable_hello()->set_job_id(job_);
    m.mutable_hello()->set_rank(rank_);
    m.mutable_hello()->set_session_id(session_override ? session_override : session_id_);
    return stream_->Write(m);
  }

  void StartReading() {
    reader_ = std::thread([this] {
      v1::ServerMessage m;
      while (stream_->Read(&m)) {
        std::lock_guard<std::mutex> lock(mu_);
        messages_.push_back(m);
        if (m.has_decision()) decisions_.push_back(m.decision());
        cv_.notify_all();
      }
      std::lock_guard<std::mutex> lock(mu_);
      ended_ = true;
      cv_.notify_all();
    });
  }

  bool Send(const v1::ClientMessage& m) { return stream_->Write(m); }

  // Stats with sumsq per registered unit (in registration order).
  v1::StepStats Stats(int64_t step, const std::vector<double>& sumsq) const {
    v1::StepStats s;
    s.set_step(step);
    // A rank whose Register failed has no unit ids: a failure, not a read
    // past the end (UBSan caught one on a loaded machine).
    if (sumsq.size() > unit_ids_.size()) {
      ADD_FAILURE() << "Stats for " << sumsq.size() << " units of a rank with " << unit_ids_.size()
                    << " registered";
    }
    for (size_t i = 0; i < sumsq.size() && i < unit_ids_.size(); ++i) {
      s.add_unit_id(unit_ids_[i]);
      s.add_sumsq(sumsq[i]);
    }
    return s;
  }
  bool SendStats(int64_t step, const std::vector<double>& sumsq) {
    v1::ClientMessage m;
    *m.mutable_stats() = Stats(step, sumsq);
    return Send(m);
  }

  // Acks `step`'s plan: decision `d` (null: no decision) in `generation`.
  bool SendAck(int64_t step, const v1::Decision* d, uint64_t generation, bool skip = false) {
    v1::ClientMessage m;
    v1::Ack* a = m.mutable_ack();
    a->set_step(step);
    a->set_has_decision(d != nullptr);
    a->set_generation(generation);
    a->set_skip_step(skip);
    if (d) {
      a->set_sequence(d->sequence());
      a->set_digest(d->digest());
    }
    return Send(m);
  }

  // Waits for a decision with observed_step == step (the newest such one).
  bool WaitDecision(int64_t step, v1::Decision* out,
                    std::chrono::milliseconds timeout = std::chrono::seconds(5)) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, timeout, [&] {
      for (auto it = decisions_.rbegin(); it != decisions_.rend(); ++it) {
        if (it->observed_step() == step) {
          *out = *it;
          return true;
        }
      }
      return false;
    });
  }

  // Waits for a decision of `generation` with observed_step == step.
  bool WaitDecisionIn(uint64_t generation, int64_t step, v1::Decision* out,
                      std::chrono::milliseconds timeout = std::chrono::seconds(5)) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, timeout, [&] {
      for (const v1::Decision& d : decisions_) {
        if (d.observed_step() == step && d.generation() == generation) {
          *out = d;
          return true;
        }
      }
      return false;
    });
  }

  // Waits until at least `n` messages (decisions and GenerationStarts) came.
  bool WaitMessages(size_t n, std::chrono::milliseconds timeout = std::chrono::seconds(5)) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, timeout, [&] { return messages_.size() >= n; });
  }

  // Waits for a GenerationStart of `generation`.
  bool WaitGeneration(uint64_t generation,
                      std::chrono::milliseconds timeout = std::chrono::seconds(5)) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, timeout, [&] {
      for (const v1::ServerMessage& m : messages_) {
        if (m.has_generation() && m.generation().generation() == generation) return true;
      }
      return false;
    });
  }

  // Waits for the server to end the stream; returns its status.
  grpc::Status WaitEnd(std::chrono::milliseconds timeout = std::chrono::seconds(5)) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (!cv_.wait_for(lock, timeout, [&] { return ended_; })) {
        return grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "stream did not end");
      }
    }
    if (reader_.joinable()) reader_.join();
    grpc::Status s = stream_->Finish();
    stream_.reset();
    return s;
  }

  std::vector<v1::Decision> decisions() {
    std::lock_guard<std::mutex> lock(mu_);
    return {decisions_.begin(), decisions_.end()};
  }
  // Waits until the newest ReporterRole says `standby`; its from_step in
  // *from_step (may be null).
  bool WaitRole(bool standby, int64_t* from_step = nullptr,
                std::chrono::milliseconds timeout = std::chrono::seconds(5)) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, timeout, [&] {
      for (auto it = messages_.rbegin(); it != messages_.rend(); ++it) {
        if (!it->has_role()) continue;
        if (it->role().standby() != standby) return false;
        if (from_step) *from_step = it->role().from_step();
        return true;
      }
      return false;
    });
  }
  size_t roles_received() {
    std::lock_guard<std::mutex> lock(mu_);
    size_t n = 0;
    for (const v1::ServerMessage& m : messages_) n += m.has_role() ? 1 : 0;
    return n;
  }

  // Every message in arrival order.
  std::vector<v1::ServerMessage> messages() {
    std::lock_guard<std::mutex> lock(mu_);
    return {messages_.begin(), messages_.end()};
  }

  void Close() {
    if (!stream_) return;
    stream_->WritesDone();
    ctx_->TryCancel();
    if (reader_.joinable()) reader_.join();
    stream_->Finish();
    stream_.reset();
  }

  const std::vector<uint32_t>& unit_ids() const { return unit_ids_; }
  // Register says it can stand by (reporter election), as the client does.
  bool can_stand_by = false;
  // Register says held_through, as the client does; false: an old client.
  bool says_held_through = true;
  uint64_t session_id() const { return session_id_; }

 private:
  std::unique_ptr<v1::Gnmr::Stub> stub_;
  std::string job_;
  uint32_t rank_, world_;
  std::string token_;
  uint64_t session_id_ = 0;
  std::vector<uint32_t> unit_ids_;
  std::unique_ptr<grpc::ClientContext> ctx_;
  std::unique_ptr<grpc::ClientReaderWriter<v1::ClientMessage, v1::ServerMessage>> stream_;
  std::thread reader_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<v1::Decision> decisions_;
  std::deque<v1::ServerMessage> messages_;
  bool ended_ = false;
};

}  // namespace gnmr::testing
