#include "tests/soak/sim_rank.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

#include "controller/types/plan_coverage.h"

namespace gnmr::soak {

// ------------------------------------------------------------ DecisionLedger

void DecisionLedger::Enter(const HeldDecision& d) {
  std::lock_guard<std::mutex> lock(mu_);
  auto [it, added] = decisions_.try_emplace({d.generation, d.sequence}, d);
  if (!added && (it->second.digest != d.digest || it->second.apply != d.apply)) ++conflicts_;
}

std::optional<HeldDecision> DecisionLedger::Find(uint64_t generation, uint64_t sequence) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = decisions_.find({generation, sequence});
  if (it == decisions_.end()) return std::nullopt;
  return it->second;
}

uint64_t DecisionLedger::conflicts() const {
  std::lock_guard<std::mutex> lock(mu_);
  return conflicts_;
}

// ------------------------------------------------------------------ Stream

// One Session stream. Writes are queued (one in flight at a time, as the
// callback API requires); the queue is bounded, so a stalled daemon cannot
// make the soak itself grow.
class SimRank::Stream final : public grpc::ClientBidiReactor<v1::ClientMessage, v1::ServerMessage> {
 public:
  static constexpr size_t kMaxQueued = 64;

  Stream(SimRank* owner, v1::Gnmr::Stub* stub, const std::string& token, v1::ClientMessage hello)
      : owner_(owner) {
    ctx_.AddMetadata("x-gnmr-token", token);
    stub->async()->Session(&ctx_, this);
    {
      // Under the lock OnWriteDone takes on a gRPC thread: gRPC orders the
      // two, but TSan cannot see inside uninstrumented gRPC.
      std::lock_guard<std::mutex> lock(mu_);
      queue_.push_back(std::move(hello));
      writing_ = true;
      StartWrite(&queue_.front());
    }
    StartRead(&in_);
    StartCall();
  }

  void Send(v1::ClientMessage m) {
    std::lock_guard<std::mutex> lock(mu_);
    if (broken_ || queue_.size() >= kMaxQueued) return;
    queue_.push_back(std::move(m));
    if (!writing_) {
      writing_ = true;
      StartWrite(&queue_.front());
    }
  }
  void Cancel() { ctx_.TryCancel(); }

  void OnWriteDone(bool ok) override {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.pop_front();
    if (!ok) {
      broken_ = true;
      queue_.clear();
    }
    if (!queue_.empty()) {
      StartWrite(&queue_.front());
    } else {
      writing_ = false;
    }
  }
  void OnReadDone(bool ok) override {
    if (!ok) return;
    owner_->OnMessage(in_);
    StartRead(&in_);
  }
  // The last reaction: nothing of this object is touched after the owner
  // learns of it (the owner may delete it from then on).
  void OnDone(const grpc::Status& status) override { owner_->OnStreamDone(status); }

 private:
  SimRank* const owner_;
  grpc::ClientContext ctx_;
  v1::ServerMessage in_;
  std::mutex mu_;
  std::deque<v1::ClientMessage> queue_;
  bool writing_ = false;
  bool broken_ = false;
};

// ------------------------------------------------------------------ SimRank

namespace {

uint64_t RandomInstance() {
  static std::mutex mu;
  static std::mt19937_64 rng(std::random_device{}());
  std::lock_guard<std::mutex> lock(mu);
  uint64_t v = 0;
  while (v == 0) v = rng();
  return v;
}

HeldDecision Summary(const v1::Decision& d) {
  HeldDecision h;
  h.generation = d.generation();
  h.sequence = d.sequence();
  h.digest = d.digest();
  h.observed = d.observed_step();
  h.apply = d.apply_step();
  h.recovery = d.recovery_size();
  return h;
}

}  // namespace

SimRank::SimRank(const std::string& target, const JobSpec* job, uint32_t rank,
                 DecisionLedger* ledger, Progress* progress)
    : target_(target),
      job_(job),
      rank_(rank),
      instance_(RandomInstance()),
      ledger_(ledger),
      progress_(progress) {
  grpc::ChannelArguments args;
  // Its own connection, as a trainer rank has: the daemon sees one
  // connection (and file descriptor) per rank.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 500);
  args.SetMaxSendMessageSize(-1);
  channel_ = grpc::CreateCustomChannel(target_, grpc::InsecureChannelCredentials(), args);
  stub_ = v1::Gnmr::NewStub(channel_);
}

SimRank::~SimRank() { Detach(); }

grpc::Status SimRank::Register(v1::RegisterResponse* resp) {
  v1::RegisterRequest req;
  req.set_job_id(job_->job_id);
  req.set_rank(rank_);
  req.set_world_size(job_->world_size);
  req.set_client_version("gnmr-soak");
  req.set_instance(instance_);
  *req.mutable_config() = job_->config;
  {
    std::lock_guard<std::mutex> lock(mu_);
    req.set_held_through(held_through_);
    req.set_says_held_through(true);
  }
  for (uint32_t u = 0; u < job_->units; ++u) {
    v1::UnitSpec* s = req.add_units();
    s->set_name("layers." + std::to_string(u / 8) + ".unit" + std::to_string(u % 8));
    s->set_numel(1 << 20);
    s->set_dtype(v1::DTYPE_BF16);
    s->set_shard_count(1);
  }
  grpc::ClientContext ctx;
  ctx.AddMetadata("x-gnmr-token", job_->token);
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  grpc::Status s = stub_->Register(&ctx, req, resp);
  if (!s.ok()) return s;
  std::lock_guard<std::mutex> lock(mu_);
  session_id_ = resp->session_id();
  unit_ids_.assign(resp->unit_ids().begin(), resp->unit_ids().end());
  // The daemon's word on the generation (a restored job starts a new one).
  if (resp->generation() != generation_) {
    generation_ = resp->generation();
    decisions_.clear();
  }
  return s;
}

void SimRank::Attach() {
  v1::ClientMessage hello;
  hello.mutable_hello()->set_job_id(job_->job_id);
  hello.mutable_hello()->set_rank(rank_);
  hello.mutable_hello()->set_session_id(session_id_);
  std::lock_guard<std::mutex> lock(mu_);
  // A finished stream is kept until the rank goes (see Stream::OnDone).
  if (stream_ && !stream_done_) return;
  if (stream_) retired_.push_back(std::move(stream_));
  stream_done_ = false;
  last_end_ = grpc::Status::OK;
  stream_ = std::make_unique<Stream>(this, stub_.get(), job_->token, std::move(hello));
}

void SimRank::Detach() {
  std::unique_lock<std::mutex> lock(mu_);
  if (!stream_ || stream_done_) return;
  stream_->Cancel();
  done_cv_.wait(lock, [&] { return stream_done_; });
}

bool SimRank::attached() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stream_ && !stream_done_;
}

grpc::Status SimRank::last_end() const {
  std::lock_guard<std::mutex> lock(mu_);
  return last_end_;
}

double SimRank::SpikeFactor(int64_t step, uint32_t unit, uint32_t units) {
  // Every 40 steps one unit spikes (admissions, denials, releases, so the
  // recovery set changes and is snapshotted); every 500 steps one unit
  // reports NaN (the non-finite trigger).
  if (step >= 30 && step % 40 == 0 && unit == static_cast<uint32_t>(step / 40 * 131) % units) {
    return 400.0;
  }
  if (step > 0 && step % 500 == 0 && unit == static_cast<uint32_t>(step / 500 * 17) % units) {
    return std::numeric_limits<double>::quiet_NaN();
  }
  return 1.0;
}

void SimRank::SendStats(int64_t step) {
  v1::ClientMessage m;
  v1::StepStats* s = m.mutable_stats();
  s->set_step(step);
  {
    std::lock_guard<std::mutex> lock(mu_);
    s->mutable_unit_id()->Add(unit_ids_.begin(), unit_ids_.end());
  }
  s->mutable_sumsq()->Reserve(static_cast<int>(job_->units));
  for (uint32_t u = 0; u < job_->units; ++u) {
    const double base = 1.0 + 0.01 * static_cast<double>((step * 7 + u) % 13);
    s->add_sumsq(base * SpikeFactor(step, u, job_->units));
  }
  SendRaw(std::move(m));
}

void SimRank::SendAck(int64_t step, const std::optional<HeldDecision>& plan) {
  v1::ClientMessage m;
  v1::Ack* a = m.mutable_ack();
  a->set_step(step);
  a->set_has_decision(plan.has_value());
  a->set_generation(plan ? plan->generation : generation());
  if (plan) {
    a->set_sequence(plan->sequence);
    a->set_digest(plan->digest);
  }
  SendRaw(std::move(m));
}

void SimRank::SendRaw(v1::ClientMessage msg) {
  std::lock_guard<std::mutex> lock(mu_);
  if (stream_ && !stream_done_) stream_->Send(std::move(msg));
}

uint64_t SimRank::generation() const {
  std::lock_guard<std::mutex> lock(mu_);
  return generation_;
}

bool SimRank::HasDecisionFor(int64_t step) const {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = decisions_.rbegin(); it != decisions_.rend(); ++it) {
    if (it->observed == step) return true;
    if (it->observed < step) break;
  }
  return false;
}

std::optional<HeldDecision> SimRank::PlanFor(int64_t step) const {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = decisions_.rbegin(); it != decisions_.rend(); ++it) {
    if (it->apply <= step) return *it;
  }
  return std::nullopt;
}

std::optional<HeldDecision> SimRank::FirstOfGeneration() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (decisions_.empty()) return std::nullopt;
  return decisions_.front();
}

void SimRank::OnMessage(const v1::ServerMessage& msg) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (msg.has_generation()) {
      if (msg.generation().generation() > generation_) {
        generation_ = msg.generation().generation();
        decisions_.clear();
      }
    } else if (msg.has_decision()) {
      const HeldDecision d = Summary(msg.decision());
      held_through_ = std::max(held_through_,
                               LastPlannableStep(d.observed, d.apply, msg.decision().next_lag()));
      if (d.generation > generation_) {
        generation_ = d.generation;
        decisions_.clear();
      }
      if (d.generation == generation_) {
        // Usually the newest; re-sent history finds its place or is known.
        auto it = decisions_.end();
        while (it != decisions_.begin() && std::prev(it)->sequence >= d.sequence) --it;
        if (it == decisions_.end() || it->sequence != d.sequence) decisions_.insert(it, d);
        while (decisions_.size() > kKeptDecisions) decisions_.pop_front();
      }
      ledger_->Enter(d);
    }
  }
  progress_->Notify();
}

void SimRank::OnStreamDone(const grpc::Status& status) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stream_done_ = true;
    last_end_ = status;
  }
  done_cv_.notify_all();
  progress_->Notify();
}

}  // namespace gnmr::soak
