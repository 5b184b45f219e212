// Client: the training-thread side of the client library.
//
// Observe computes statistics on the calling thread into a preallocated
// report slot and queues it; PlanFor reads the decision cache under a short
// lock (waiting only as ClientOptions::decision_wait allows, and never while
// disconnected). Neither touches the network nor allocates in steady state.
// Every public method runs inside Guard(), so not even std::bad_alloc
// crosses the API.
//
// Device units (tensors on a CUDA device) go through GpuPath: Observe fills
// the host units' columns, launches the device units on the caller's stream
// and parks the report slot; it is published when the launch completes
// (polled by the I/O thread and by the next Observe). A client with only
// host units never creates a GpuPath and behaves as before.
#include "gnmr/client.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <thread>
#include <utility>

#include "client/src/client_impl.h"
#include "core/config_codec.h"
#include "gnmr/cpu_stats.h"

namespace gnmr {
namespace {

using Clock = std::chrono::steady_clock;

Status CheckOptions(const ClientOptions& o) {
  if (o.target.empty()) {
    return InvalidArgument("target is empty (unix:/path, host:port, or \"local\")");
  }
  Status s = CheckJobId(o.job_id);
  if (!s.ok()) return s;
  if (o.world_size < 1 || o.world_size > 65536) {
    return InvalidArgument("world_size must be in 1..65536");
  }
  if (o.rank >= o.world_size) return InvalidArgument("rank must be < world_size");
  if (o.pipeline_stage >= o.world_size) {  // every stage holds a rank
    return InvalidArgument("pipeline_stage " + std::to_string(o.pipeline_stage) +
                           " must be < world_size " + std::to_string(o.world_size));
  }
  if (o.max_queued_reports < 1) return InvalidArgument("max_queued_reports must be >= 1");
  if (o.decision_wait.count() < 0) return InvalidArgument("decision_wait must be >= 0");
  if (o.attach_timeout.count() <= 0) return InvalidArgument("attach_timeout must be > 0");
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

Client::Client(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Client::~Client() { Stop(); }

StatusOr<std::unique_ptr<Client>> Client::Create(ClientOptions options) {
  std::unique_ptr<Client> out;
  Status s = Guard([&] {
    Status c = CheckOptions(options);
    if (!c.ok()) return c;
    auto impl = std::make_unique<Impl>(std::move(options));
    if (IsLocalTarget(impl->options.target)) {
      const LocalTransportFactory local = GetLocalTransportFactory();
      if (local == nullptr) {
        return InvalidArgument(
            "target \"local\" runs the controller in this process and needs the "
            "gnmr_client_local library: link gnmr::gnmr_client_local (it enables the "
            "target), or call gnmr::EnableLocalTarget() from <gnmr/client_local.h>");
      }
      StatusOr<std::unique_ptr<Transport>> t = local(impl->options);
      if (!t.ok()) return t.status();
      impl->transport = std::move(t).value();
    } else {
      impl->transport = NewGrpcTransport(impl->options);
    }
    out.reset(new Client(std::move(impl)));
    return Status::Ok();
  });
  if (!s.ok()) return s;
  return out;
}

StatusOr<UnitHandle> Client::AddUnit(const std::string& name, const std::vector<TensorRef>& tensors,
                                     uint32_t shard_index, uint32_t shard_count) {
  UnitHandle h = 0;
  Status s = Guard([&] {
    Impl& m = *impl_;
    if (m.started) return FailedPrecondition("AddUnit after Start");
    GNMR_RETURN_IF_ERROR(m.transport->CheckUnit(name, shard_index, shard_count));
    StatusOr<int32_t> device = UnitDevice(tensors.data(), tensors.size());
    if (device.ok() && *device != kHostDevice) {
      if (m.gpu && m.gpu->device() != *device) {
        return InvalidArgument("unit '" + name + "': on CUDA device " + std::to_string(*device) +
                               ", but this client's device units are on CUDA device " +
                               std::to_string(m.gpu->device()) +
                               " (one device per client; host units may be mixed in)");
      }
      if (!m.gpu) {
        StatusOr<std::unique_ptr<GpuPath>> g = GpuPath::Create(*device);
        if (!g.ok()) {
          return Status(g.status().code(),
                        "unit '" + name + "': its tensors are on CUDA device " +
                            std::to_string(*device) + " but GPU statistics are unavailable (" +
                            g.status().message() +
                            "); register host tensors instead, host units are unaffected");
        }
        m.gpu = std::move(g).value();
      }
    }
    StatusOr<UnitHandle> r = m.units.Add(name, tensors, shard_index, shard_count);
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
  return Guard([&] {
    Impl& m = *impl_;
    Status s = m.units.SetTensors(unit, tensors, count);
    if (!s.ok()) return s;
    if (unit < m.early_done.size()) m.early_done[unit] = 0;  // of the old memory
    // Before Start the registry is the source of the GPU tables.
    if (m.started && m.gpu && m.units.unit(unit).device != kHostDevice) {
      m.gpu->SetPointers(unit, tensors, count);
    }
    return Status::Ok();
  });
}

Status Client::Start() {
  return Guard([&] {
    Impl& m = *impl_;
    if (m.started) return FailedPrecondition("Start called twice");
    if (m.units.size() == 0) return FailedPrecondition("Start without units");
    std::vector<UnitHandle> device_units;
    std::vector<std::vector<TensorRef>> device_tensors;
    std::vector<uint32_t> shard_count;
    m.host_units.clear();
    for (size_t i = 0; i < m.units.size(); ++i) {
      const UnitRegistry::Unit& u = m.units.unit(static_cast<UnitHandle>(i));
      shard_count.push_back(u.shard_count);
      if (u.device == kHostDevice) {
        m.host_units.push_back(static_cast<UnitHandle>(i));
      } else {
        device_units.push_back(static_cast<UnitHandle>(i));
        device_tensors.push_back(u.tensors);
      }
    }
    m.any_device = !device_units.empty();
    m.outbox = std::make_unique<Outbox>(m.options.max_queued_reports, m.units.size(), 256,
                                        m.any_device ? GpuPath::kMaxParked : 0);
    if (m.any_device) {
      Status g = m.gpu->Start(device_units, device_tensors, shard_count,
                              m.options.profile_gpu_overhead, m.outbox.get());
      if (!g.ok()) return g;
    }
    m.norms.assign(m.units.size(), std::numeric_limits<double>::quiet_NaN());
    m.forward.Resize(m.units.size());
    m.early.assign(m.units.size(), UnitStats{});
    m.early_done.assign(m.units.size(), 0);
    m.inactive.resize(m.units.size(), 0);  // keeps marks made before Start
    TransportWiring wiring;
    wiring.request = m.BuildRegister();
    wiring.outbox = m.outbox.get();
    wiring.shared = &m.shared;
    wiring.gpu = m.any_device ? m.gpu.get() : nullptr;
    Status t = m.transport->Start(std::move(wiring));
    if (!t.ok()) {
      if (m.any_device) m.gpu->Stop();
      return t;
    }
    m.started = true;
    return Status::Ok();
  });
}

Status Client::Observe(int64_t step) { return Observe(step, nullptr); }

Status Client::Observe(int64_t step, void* stream) {
  return Guard([&] {
    Impl& m = *impl_;
    if (!m.started) return FailedPrecondition("Observe before Start");
    if (step < 0 || step <= m.last_observed) {
      return InvalidArgument("Observe(" + std::to_string(step) + "): steps must increase (last " +
                             std::to_string(m.last_observed) + ")");
    }
    // Results of earlier launches first (frees their slots; cheap queries).
    if (m.any_device) m.gpu->Drain(false);
    Report* r = m.outbox->Acquire();
    const Clock::time_point t0 = Clock::now();
    bool nonfinite = false;
    // A recycled report clears only marks it still carries, so a step with
    // no unit marked costs nothing here; after that it is all zeros, and the
    // swap hands those zeros to the next step's marks.
    if (r->inactive_count > 0) std::fill(r->inactive.begin(), r->inactive.end(), 0);
    r->inactive_count = 0;
    if (m.inactive_count > 0) {
      r->inactive.swap(m.inactive);  // both sized num_units: no allocation
      r->inactive_count = m.inactive_count;
      m.inactive_count = 0;
    }
    m.forward.MoveInto(r);  // this step's ObserveForward calls
    // ObserveUnit's host time belongs to this step's statistics as well.
    const int64_t forward_nanos = m.forward_nanos + m.early_nanos;
    m.forward_nanos = 0;
    m.early_nanos = 0;
    for (UnitHandle i : m.host_units) {
      const UnitRegistry::Unit& u = m.units.unit(i);
      UnitStats st;
      Status s;
      if (r->inactive[i]) {
        // nothing to report: zeros, not computed
      } else if (m.early_done[i]) {
        st = m.early[i];  // ObserveUnit's: the same kernels on the same memory
      } else {
        s = cpu::ComputeStats(u.tensors.data(), u.tensors.size(), &st);
      }
      m.early_done[i] = 0;
      if (!s.ok()) {  // cannot happen: tensors are checked when set
        m.outbox->Abandon(r);
        return Status(s.code(), "unit " + u.name + ": " + s.message());
      }
      r->sumsq[i] = st.sumsq;
      r->amax[i] = st.amax;
      r->nonfinite[i] = st.nonfinite;
      r->zeros[i] = st.zeros;
      r->saturated[i] = st.saturated;
      m.norms[i] = std::sqrt(st.sumsq * u.shard_count);
      nonfinite = nonfinite || st.nonfinite > 0 || !std::isfinite(st.sumsq);
    }
    r->step = step;
    r->missed_decisions = m.missed.load(std::memory_order_relaxed);
    r->stats_gpu_seconds = 0.0;
    r->overhead_source = static_cast<int>(OverheadSource::kHostWall);
    r->overhead_step = step;
    if (m.any_device && !m.stopped) {
      // Device units: the launch's columns and overhead come with its
      // results; the host time spent here is the enqueue.
      // Parks or gives back r: from here on r is not ours to touch.
      Status g = m.gpu->Launch(stream, step, t0, r);
      const Clock::time_point t1 = Clock::now();
      m.stats_nanos.fetch_add(std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count(),
                              std::memory_order_relaxed);
      if (!g.ok()) return g;  // this step goes unreported; nothing else changes
      m.last_observed = step;
      m.last_observe_time = t0;
      m.norms_step = step;
      m.host_nonfinite = nonfinite;
      m.reports_enqueued.fetch_add(1, std::memory_order_relaxed);
      m.RecordObserved(step);
      return Status::Ok();
    }
    const Clock::time_point t1 = Clock::now();
    // The forward statistics' host time belongs to this step's overhead too.
    const double stats_seconds =
        std::chrono::duration<double>(t1 - t0).count() + static_cast<double>(forward_nanos) * 1e-9;
    const double step_seconds =
        m.last_observed >= 0 ? std::chrono::duration<double>(t0 - m.last_observe_time).count()
                             : 0.0;
    r->stats_seconds = stats_seconds;
    r->overhead_ratio = step_seconds > 0.0 ? stats_seconds / step_seconds : 0.0;
    m.last_observed = step;
    m.last_observe_time = t0;
    m.norms_step = step;
    m.host_nonfinite = nonfinite;
    m.stats_nanos.fetch_add(std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count(),
                            std::memory_order_relaxed);
    m.host_ratio.store(r->overhead_ratio, std::memory_order_relaxed);
    m.host_ratio_step.store(step, std::memory_order_relaxed);
    if (m.stopped) {
      m.outbox->Abandon(r);
      return Status::Ok();
    }
    m.outbox->Publish(r);
    m.reports_enqueued.fetch_add(1, std::memory_order_relaxed);
    m.RecordObserved(step);
    return Status::Ok();
  });
}

Status Client::MarkInactive(UnitHandle unit) {
  return Guard([&] {
    Impl& m = *impl_;
    GNMR_RETURN_IF_ERROR(m.CheckHandle("MarkInactive", unit));
    if (m.inactive.size() < m.units.size()) m.inactive.resize(m.units.size(), 0);
    if (m.inactive[unit] == 0) {
      m.inactive[unit] = 1;
      ++m.inactive_count;
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
    m.FillPlanFromDecisions(step, out);
    const bool known = m.norms_step == step;
    // The same-step guard: this rank's own statistics of `step`.
    out->nonfinite_observed = known && m.NonfiniteAt(step);
    out->skip_step = out->global_skip || out->nonfinite_observed;
    if (out->skip_step && m.skip_counted_step != step) {
      m.skip_counted_step = step;
      m.skipped_steps.fetch_add(1, std::memory_order_relaxed);
    }
    if (m.any_device && !out->entries.empty()) m.gpu->Drain(false);
    for (PlanEntry& e : out->entries) {
      double norm = std::numeric_limits<double>::quiet_NaN();
      bool have = false;
      if (m.any_device && e.unit < m.units.size() && m.units.unit(e.unit).device != kHostDevice) {
        have = m.gpu->NormAt(step, e.unit, &norm);
      } else if (known && e.unit < m.norms.size()) {
        norm = m.norms[e.unit];
        have = true;
      }
      e.norm = have ? norm : std::numeric_limits<double>::quiet_NaN();
      e.scale = have ? ClipScale(e.ref_norm, e.norm, e.clip_min_scale) : 1.0;
    }
    return Status::Ok();
  });
  if (!s.ok()) {  // fail-open; the guard still holds if it can be read
    *out = Plan();
    out->step = step;
    out->miss_reason = MissReason::kNotReceived;
  }
  (void)Guard([&] {
    impl_->CountDecisionRun(*out);
    return Status::Ok();
  });
}

Status Client::Ack(const Plan& plan) {
  return Guard([&] {
    Impl& m = *impl_;
    if (!m.started) return FailedPrecondition("Ack before Start");
    if (m.stopped) return Status::Ok();
    AckItem a;
    a.step = plan.step;
    a.sequence = plan.sequence;
    a.digest = plan.digest;
    a.has_decision = plan.has_decision;
    a.generation = plan.generation;
    a.skip_step = plan.skip_step;
    m.outbox->PushAck(a);
    return Status::Ok();
  });
}

namespace {
bool FlushImpl(Client::Impl& m, std::chrono::milliseconds timeout);
}  // namespace

bool Client::Flush(std::chrono::milliseconds timeout) {
  bool empty = false;
  Status s = Guard([&] {
    empty = FlushImpl(*impl_, timeout);
    return Status::Ok();
  });
  return s.ok() && empty;
}

namespace {

bool FlushImpl(Client::Impl& m, std::chrono::milliseconds timeout) {
  if (!m.started) return true;
  const Clock::time_point deadline = Clock::now() + timeout;
  for (;;) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    const auto slice = std::min(left, std::chrono::milliseconds(20));
    if (m.any_device) {
      // Reports still waiting for their GPU results count as queued.
      m.gpu->Drain(false);
      if (m.gpu->pending() > 0) {
        if (Clock::now() >= deadline || m.stopped) return false;
        std::this_thread::sleep_for(std::chrono::microseconds(200));
        continue;
      }
    }
    if (m.outbox->WaitEmpty(std::max(slice, std::chrono::milliseconds(0)))) return true;
    if (Clock::now() >= deadline || m.stopped ||
        !m.shared.connected_flag.load(std::memory_order_relaxed)) {
      return false;
    }
  }
}

}  // namespace

void Client::Stop() {
  (void)Guard([&] {
    Impl& m = *impl_;
    if (!m.started || m.stopped) return Status::Ok();
    m.stopped = true;
    m.transport->Stop();
    if (m.gpu) m.gpu->Stop();
    m.outbox->Clear();
    return Status::Ok();
  });
}

}  // namespace gnmr
