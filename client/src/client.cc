// Client: its lifecycle. Create checks the options and picks the transport,
// AddUnit and SetTensors register the units and their memory, Start builds
// the outbox and the GPU path and starts the transport's thread, Flush
// waits for the queued reports and acks, Stop ends it all. The per-step
// calls are in client_observe.cc (Observe, MarkInactive), client_plan.cc
// (PlanFor, Ack), client_observe_unit.cc and client_forward.cc. Every
// public method runs inside Guard(), so not even std::bad_alloc crosses
// the API.
//
// Device units (tensors on a CUDA device) go through GpuPath, created by
// the first of them; a client with only host units never creates one.
#include "gnmr/client.h"

#include <algorithm>
#include <chrono>
#include <random>
#include <thread>
#include <utility>

#include "client/src/client_impl.h"
#include "controller/types/config_codec.h"

namespace gnmr {
namespace {

using Clock = std::chrono::steady_clock;

Status CheckOptions(const ClientOptions& o) {
  if (o.target.empty()) {
    return InvalidArgument("target is empty (unix:/path, host:port, or \"local\")");
  }
  GNMR_RETURN_IF_ERROR(CheckJobId(o.job_id));
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
    const Status s = o.config->Validate();
    if (!s.ok()) return InvalidArgument("config: " + s.message());
  }
  return Status::Ok();
}

}  // namespace

uint64_t NewInstanceId() {
  std::random_device rd;
  uint64_t id = 0;
  while (id == 0) {
    id = (static_cast<uint64_t>(rd()) << 32) ^ rd() ^
         static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  }
  return id;
}

Client::Client(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Client::~Client() { Stop(); }

StatusOr<std::unique_ptr<Client>> Client::Create(ClientOptions options) {
  std::unique_ptr<Client> out;
  Status s = Guard([&] {
    GNMR_RETURN_IF_ERROR(CheckOptions(options));
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
    GNMR_RETURN_IF_ERROR(m.units.SetTensors(unit, tensors, count));
    m.next_report.ForgetEarly(unit);  // of the old memory
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
      GNMR_RETURN_IF_ERROR(m.gpu->Start(device_units, device_tensors, shard_count,
                                        m.options.profile_gpu_overhead, m.outbox.get()));
    }
    m.observed.Resize(m.units.size());
    m.next_report.Resize(m.units.size());  // keeps marks made before Start
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
