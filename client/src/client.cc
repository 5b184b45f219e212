// Client: the training-thread side of the client library.
//
// Observe computes statistics on the calling thread into a preallocated
// report slot and queues it; PlanFor reads the decision cache under a short
// lock (waiting only as ClientOptions::decision_wait allows, and never while
// disconnected). Neither touches the network nor allocates in steady state.
// Every public method runs inside Guard(), so not even std::bad_alloc
// crosses the API.
#include "gnmr/client.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "client/src/io_loop.h"
#include "client/src/outbox.h"
#include "client/src/shared_state.h"
#include "client/src/unit_registry.h"
#include "daemon/controller/state_codec.h"
#include "kernels/cpu/cpu_stats.h"

#ifndef GNMR_VERSION
#define GNMR_VERSION "0.0.0"
#endif

namespace gnmr {
namespace {

using Clock = std::chrono::steady_clock;

template <typename F>
Status Guard(F&& f) {
  try {
    return f();
  } catch (const std::exception& e) {
    return Internal(std::string("gnmr client: ") + e.what());
  } catch (...) {
    return Internal("gnmr client: unknown exception");
  }
}

Status CheckOptions(const ClientOptions& o) {
  if (o.target.empty()) return InvalidArgument("target is empty (unix:/path or host:port)");
  Status s = CheckJobId(o.job_id);
  if (!s.ok()) return s;
  if (o.world_size < 1 || o.world_size > 65536) {
    return InvalidArgument("world_size must be in 1..65536");
  }
  if (o.rank >= o.world_size) return InvalidArgument("rank must be < world_size");
  if (o.max_queued_reports < 1) return InvalidArgument("max_queued_reports must be >= 1");
  if (o.decision_wait.count() < 0) return InvalidArgument("decision_wait must be >= 0");
  if (o.backoff_initial.count() <= 0 || o.backoff_max < o.backoff_initial) {
    return InvalidArgument("need 0 < backoff_initial <= backoff_max");
  }
  if (o.config) {
    s = o.config->Validate();
    if (!s.ok()) return InvalidArgument("config: " + s.message());
  }
  return Status::Ok();
}

}  // namespace

double ClipScale(double ref_norm, double norm, double min_scale) {
  if (std::isnan(norm) || std::isinf(norm)) return min_scale;
  if (norm <= 0.0 || std::isnan(ref_norm)) return 1.0;
  return std::clamp(ref_norm / norm, min_scale, 1.0);
}

const PlanEntry* Plan::Find(UnitHandle unit) const {
  for (const PlanEntry& e : entries) {
    if (e.unit == unit) return &e;
  }
  return nullptr;
}

class Client::Impl {
 public:
  explicit Impl(ClientOptions o) : options(std::move(o)) {}

  const ClientOptions options;
  UnitRegistry units;
  SharedState shared;
  std::unique_ptr<Outbox> outbox;
  std::unique_ptr<IoLoop> io;
  bool started = false;
  bool stopped = false;

  // Training thread only.
  int64_t last_observed = -1;
  Clock::time_point last_observe_time;
  std::vector<double> norms;  // per unit, at norms_step
  int64_t norms_step = -1;

  std::atomic<uint64_t> reports_enqueued{0};
  std::atomic<uint64_t> missed{0};
  std::atomic<int64_t> stats_nanos{0};

  v1::RegisterRequest BuildRegister() const {
    v1::RegisterRequest req;
    req.set_job_id(options.job_id);
    req.set_rank(options.rank);
    req.set_world_size(options.world_size);
    req.set_client_version(std::string("gnmr-client/") + GNMR_VERSION);
    units.FillSpecs(&req);
    if (options.config) ConfigToProto(*options.config, req.mutable_config());
    return req;
  }
};

Client::Client(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Client::~Client() { Stop(); }

StatusOr<std::unique_ptr<Client>> Client::Create(ClientOptions options) {
  std::unique_ptr<Client> out;
  Status s = Guard([&] {
    Status c = CheckOptions(options);
    if (!c.ok()) return c;
    out.reset(new Client(std::make_unique<Impl>(std::move(options))));
    return Status::Ok();
  });
  if (!s.ok()) return s;
  return out;
}

StatusOr<UnitHandle> Client::AddUnit(const std::string& name,
                                     const std::vector<TensorRef>& tensors,
                                     uint32_t shard_index, uint32_t shard_count) {
  UnitHandle h = 0;
  Status s = Guard([&] {
    if (impl_->started) return FailedPrecondition("AddUnit after Start");
    StatusOr<UnitHandle> r = impl_->units.Add(name, tensors, shard_index, shard_count);
    if (!r.ok()) return r.status();
    h = *r;
    return Status::Ok();
  });
  if (!s.ok()) return s;
  return h;
}

Status Client::SetTensors(UnitHandle unit, const std::vector<TensorRef>& tensors) {
  return SetTensors(unit, tensors.data(), tensors.size());
}

Status Client::SetTensors(UnitHandle unit, const TensorRef* tensors, size_t count) {
  return Guard([&] { return impl_->units.SetTensors(unit, tensors, count); });
}

Status Client::Start() {
  return Guard([&] {
    Impl& m = *impl_;
    if (m.started) return FailedPrecondition("Start called twice");
    if (m.units.size() == 0) return FailedPrecondition("Start without units");
    m.outbox = std::make_unique<Outbox>(m.options.max_queued_reports, m.units.size());
    m.norms.assign(m.units.size(), std::numeric_limits<double>::quiet_NaN());
    m.io = std::make_unique<IoLoop>(m.options, m.BuildRegister(), m.outbox.get(), &m.shared);
    m.io->Start();
    m.started = true;
    return Status::Ok();
  });
}

Status Client::Observe(int64_t step) {
  return Guard([&] {
    Impl& m = *impl_;
    if (!m.started) return FailedPrecondition("Observe before Start");
    if (step < 0 || step <= m.last_observed) {
      return InvalidArgument("Observe(" + std::to_string(step) + "): steps must increase (last " +
                             std::to_string(m.last_observed) + ")");
    }
    Report* r = m.outbox->Acquire();
    const Clock::time_point t0 = Clock::now();
    for (size_t i = 0; i < m.units.size(); ++i) {
      const UnitRegistry::Unit& u = m.units.unit(static_cast<UnitHandle>(i));
      UnitStats st;
      Status s = cpu::ComputeStats(u.tensors.data(), u.tensors.size(), &st);
      if (!s.ok()) {  // cannot happen: tensors are checked when set
        m.outbox->Abandon(r);
        return Status(s.code(), "unit " + u.name + ": " + s.message());
      }
      r->sumsq[i] = st.sumsq;
      r->amax[i] = st.amax;
      r->nonfinite[i] = st.nonfinite;
      r->zeros[i] = st.zeros;
      m.norms[i] = std::sqrt(st.sumsq * u.shard_count);
    }
    const Clock::time_point t1 = Clock::now();
    const double stats_seconds = std::chrono::duration<double>(t1 - t0).count();
    const double step_seconds =
        m.last_observed >= 0 ? std::chrono::duration<double>(t0 - m.last_observe_time).count()
                             : 0.0;
    r->step = step;
    r->stats_seconds = stats_seconds;
    r->overhead_ratio = step_seconds > 0.0 ? stats_seconds / step_seconds : 0.0;
    r->missed_decisions = m.missed.load(std::memory_order_relaxed);
    m.last_observed = step;
    m.last_observe_time = t0;
    m.norms_step = step;
    m.stats_nanos.fetch_add(std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count(),
                            std::memory_order_relaxed);
    if (m.stopped) {
      m.outbox->Abandon(r);
      return Status::Ok();
    }
    m.outbox->Publish(r);
    m.reports_enqueued.fetch_add(1, std::memory_order_relaxed);
    std::lock_guard<std::mutex> lock(m.shared.mu);
    if (m.shared.connected && m.shared.session_first_step < 0) {
      m.shared.session_first_step = step;
    }
    return Status::Ok();
  });
}

Plan Client::PlanFor(int64_t step) {
  Plan p;
  PlanFor(step, &p);
  return p;
}

void Client::PlanFor(int64_t step, Plan* out) {
  Status s = Guard([&] {
    Impl& m = *impl_;
    SharedState& sh = m.shared;
    std::unique_lock<std::mutex> lock(sh.mu);
    if (!sh.cache.HasApply(step)) {
      const bool due = sh.connected && sh.session_first_step >= 0 &&
                       step - sh.lag >= sh.session_first_step;
      if (due && m.options.decision_wait.count() > 0) {
        sh.decision_cv.wait_for(lock, m.options.decision_wait, [&] {
          return sh.stopping || !sh.connected || sh.cache.NewestApply() >= step;
        });
      }
      if (due && !sh.cache.HasApply(step)) m.missed.fetch_add(1, std::memory_order_relaxed);
    }
    sh.cache.Fill(step, out);
    lock.unlock();
    const bool known = m.norms_step == step;
    for (PlanEntry& e : out->entries) {
      e.norm = known ? m.norms[e.unit] : std::numeric_limits<double>::quiet_NaN();
      e.scale = known ? ClipScale(e.ref_norm, e.norm, e.clip_min_scale) : 1.0;
    }
    return Status::Ok();
  });
  if (!s.ok()) {  // fail-open
    *out = Plan();
    out->step = step;
  }
}

Status Client::Ack(const Plan& plan) {
  return Guard([&] {
    Impl& m = *impl_;
    if (!m.started) return FailedPrecondition("Ack before Start");
    if (!plan.has_decision || m.stopped) return Status::Ok();
    AckItem a;
    a.step = plan.step;
    a.sequence = plan.sequence;
    a.digest = plan.digest;
    m.outbox->PushAck(a);
    return Status::Ok();
  });
}

bool Client::Flush(std::chrono::milliseconds timeout) {
  Impl& m = *impl_;
  if (!m.started) return true;
  const Clock::time_point deadline = Clock::now() + timeout;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    const auto slice = std::min(left, std::chrono::milliseconds(20));
    if (m.outbox->WaitEmpty(std::max(slice, std::chrono::milliseconds(0)))) return true;
    if (Clock::now() >= deadline || m.stopped ||
        !m.shared.connected_flag.load(std::memory_order_relaxed)) {
      return false;
    }
  }
}

void Client::Stop() {
  Impl& m = *impl_;
  if (!m.started || m.stopped) return;
  m.stopped = true;
  m.io->Stop();
  m.outbox->Clear();
}

ClientCounters Client::Counters() const {
  const Impl& m = *impl_;
  const SharedState& sh = m.shared;
  ClientCounters c;
  c.reports_enqueued = m.reports_enqueued.load();
  c.reports_sent = sh.reports_sent.load();
  c.reports_dropped = m.outbox ? m.outbox->reports_dropped() : 0;
  c.acks_sent = sh.acks_sent.load();
  c.acks_dropped = m.outbox ? m.outbox->acks_dropped() : 0;
  c.decisions_received = sh.decisions_received.load();
  c.decisions_rejected = sh.decisions_rejected.load();
  c.missed_decisions = m.missed.load();
  c.registrations = sh.registrations.load();
  c.reconnects = sh.reconnects.load();
  c.connect_failures = sh.connect_failures.load();
  c.stats_seconds = static_cast<double>(m.stats_nanos.load()) * 1e-9;
  std::lock_guard<std::mutex> lock(sh.mu);
  c.connected = sh.connected;
  c.last_decided_step = sh.cache.NewestObserved();
  c.last_error = sh.last_error;
  return c;
}

size_t Client::num_units() const { return impl_->units.size(); }

const std::string& Client::unit_name(UnitHandle unit) const {
  return impl_->units.name(unit);
}

const ClientOptions& Client::options() const { return impl_->options; }

}  // namespace gnmr
