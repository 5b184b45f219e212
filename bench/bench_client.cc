// Client benchmarks (the performance target and the CPU statistics
// throughput).
//
// BM_ObservePlanFor: one training step of Observe + PlanFor at N units,
//   statistics excluded: the counter `excl_stats_us` is the step time minus
//   the time Observe spent in statistics (ClientCounters::stats_seconds);
//   the target is <= 20 us at 1,024 units. Units hold empty tensors, so the
//   statistics part is only the per-unit call. Two set-ups:
//   - failopen: no daemon at the target (the client keeps reconnecting);
//   - connected: an in-process gnmrd core on a Unix socket, decisions
//     flowing (lag 1), so PlanFor reads a live cache.
// BM_ObservePlanFor_Replica: the same step on one of two data-parallel
//   replicas of a `report: one_per_shard` job (docs/scale.md), connected:
//   arg 0 measures the reporter, arg 1 the standby (which keeps its reports
//   on its I/O thread instead of sending them); a helper thread steps the
//   other replica alongside, so decisions flow in both cases. The
//   training-thread cost should not depend on the role.
// BM_CpuStats / BM_MemoryRead: statistics throughput per dtype against the
//   best single-core vectorized read of the same bytes (both single-threaded,
//   same buffer); BM_MemoryReadScalar is the old plain-loop baseline.
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <benchmark/benchmark.h>

#include "bench/stats_throughput.h"
#include "daemon/server/daemon.h"
#include "gnmr/client.h"
#include "kernels/cpu_stats.h"

namespace gnmr {
namespace {

std::string SocketPath(const char* tag) {
  return "/tmp/gnmr_bench_" + std::string(tag) + "_" + std::to_string(getpid()) + ".sock";
}

std::unique_ptr<Client> MakeClient(const std::string& target, int units,
                                   std::vector<float>* storage, ClientOptions o = {}) {
  o.target = target;
  if (o.job_id.empty()) o.job_id = "bench";
  auto c = Client::Create(o);
  if (!c.ok()) return nullptr;
  std::unique_ptr<Client> client = std::move(c).value();
  storage->assign(static_cast<size_t>(units), 1.0f);
  for (int u = 0; u < units; ++u) {
    TensorRef t;
    t.data = storage->data() + u;
    t.numel = 0;
    if (!client->AddUnit("layers." + std::to_string(u / 4) + ".unit" + std::to_string(u % 4), {t})
             .ok()) {
      std::abort();  // a benchmark set up wrong measures nothing
    }
  }
  if (!client->Start().ok()) return nullptr;
  return client;
}

void RunSteps(benchmark::State& state, Client* client) {
  Plan plan;
  int64_t step = 0;
  const double stats0 = client->Counters().stats_seconds;
  const auto t0 = std::chrono::steady_clock::now();
  for (auto _ : state) {
    benchmark::DoNotOptimize(client->Observe(step).ok());
    client->PlanFor(step, &plan);
    benchmark::DoNotOptimize(plan.entries.data());
    ++step;
  }
  const double total = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double stats = client->Counters().stats_seconds - stats0;
  const double n = static_cast<double>(state.iterations());
  state.counters["excl_stats_us"] = (total - stats) / n * 1e6;
  state.counters["stats_us"] = stats / n * 1e6;
  state.counters["connected"] = client->Counters().connected ? 1 : 0;
}

void BM_ObservePlanFor_FailOpen(benchmark::State& state) {
  std::vector<float> storage;
  auto client =
      MakeClient("unix:" + SocketPath("absent"), static_cast<int>(state.range(0)), &storage);
  if (!client) return state.SkipWithError("client");
  RunSteps(state, client.get());
}
BENCHMARK(BM_ObservePlanFor_FailOpen)->Arg(1024)->Arg(4096);

void BM_ObservePlanFor_Connected(benchmark::State& state) {
  const std::string path = SocketPath("live");
  DaemonOptions d;
  d.listen = {"unix:" + path};
  auto daemon = Daemon::Start(d, nullptr, AdminContext());
  if (!daemon.ok()) return state.SkipWithError(daemon.status().ToString().c_str());
  std::vector<float> storage;
  auto client = MakeClient("unix:" + path, static_cast<int>(state.range(0)), &storage);
  if (!client) return state.SkipWithError("client");
  for (int i = 0; i < 200 && !client->Counters().connected; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  RunSteps(state, client.get());
  client->Stop();
  (*daemon)->Shutdown(std::chrono::milliseconds(100));
  unlink(path.c_str());
}
BENCHMARK(BM_ObservePlanFor_Connected)->Arg(1024)->Iterations(20000);

void BM_ObservePlanFor_Replica(benchmark::State& state) {
  const bool measure_standby = state.range(0) == 1;
  const std::string path = SocketPath(measure_standby ? "standby" : "reporter");
  DaemonOptions d;
  d.listen = {"unix:" + path};
  auto daemon = Daemon::Start(d, nullptr, AdminContext());
  if (!daemon.ok()) return state.SkipWithError(daemon.status().ToString().c_str());
  ControllerConfig config;
  config.report = ReportMode::kOnePerShard;
  std::vector<float> storage[2];
  std::unique_ptr<Client> replica[2];
  for (uint32_t rank = 0; rank < 2; ++rank) {
    ClientOptions o;
    o.job_id = "replicas";
    o.rank = rank;
    o.world_size = 2;
    o.config = config;
    replica[rank] = MakeClient("unix:" + path, 1024, &storage[rank], o);
    if (!replica[rank]) return state.SkipWithError("client");
  }
  // Rank 0 (the lowest) reports, rank 1 stands by once its role arrives.
  for (int i = 0; i < 500 && !replica[1]->Counters().standby; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (!replica[1]->Counters().standby) return state.SkipWithError("rank 1 never stood by");
  Client* measured = replica[measure_standby ? 1 : 0].get();
  Client* other = replica[measure_standby ? 0 : 1].get();
  // The other replica follows the measured one's steps.
  std::atomic<int64_t> next_step{0};
  std::atomic<bool> done{false};
  std::thread helper([&] {
    Plan plan;
    for (int64_t step = 0; !done.load();) {
      if (step < next_step.load()) {
        benchmark::DoNotOptimize(other->Observe(step).ok());
        other->PlanFor(step, &plan);
        ++step;
      } else {
        std::this_thread::yield();
      }
    }
  });
  Plan plan;
  int64_t step = 0;
  const double stats0 = measured->Counters().stats_seconds;
  const auto t0 = std::chrono::steady_clock::now();
  for (auto _ : state) {
    next_step.store(step + 1);
    benchmark::DoNotOptimize(measured->Observe(step).ok());
    measured->PlanFor(step, &plan);
    benchmark::DoNotOptimize(plan.entries.data());
    ++step;
  }
  const double total = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  done.store(true);
  helper.join();
  const double stats = measured->Counters().stats_seconds - stats0;
  const double n = static_cast<double>(state.iterations());
  state.counters["excl_stats_us"] = (total - stats) / n * 1e6;
  state.counters["standby"] = measured->Counters().standby ? 1 : 0;
  state.counters["reports_held"] = static_cast<double>(measured->Counters().reports_held);
  for (auto& r : replica) r->Stop();
  (*daemon)->Shutdown(std::chrono::milliseconds(100));
  unlink(path.c_str());
}
BENCHMARK(BM_ObservePlanFor_Replica)->Arg(0)->Arg(1)->Iterations(20000);

// 64 MiB of N(0, 0.01) gradients in `dtype` (denormal: N(0, 1e-39) for
// fp32/bf16, mostly subnormal), larger than the caches.
// 64 MiB (larger than the 32 MiB L3 of the tuning machine) per input kind.
const std::vector<unsigned char>& Buffer(DType dtype, bool denormal) {
  static std::vector<unsigned char> bufs[16];
  std::vector<unsigned char>& b = bufs[static_cast<int>(dtype) * 2 + (denormal ? 1 : 0)];
  if (b.empty()) b = bench::GradientBuffer(dtype, denormal, 64u << 20);
  return b;
}

void CpuStats(benchmark::State& state, bool denormal) {
  const DType dtype = static_cast<DType>(state.range(0));
  const std::vector<unsigned char>& buf = Buffer(dtype, denormal);
  TensorRef t;
  t.data = buf.data();
  t.numel = buf.size() / DTypeSize(dtype);
  t.dtype = dtype;
  UnitStats u;
  for (auto _ : state) {
    benchmark::DoNotOptimize(cpu::ComputeStats(&t, 1, &u).ok());
    benchmark::DoNotOptimize(u);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * buf.size()));
  state.SetLabel(std::string(DTypeName(dtype)) + " " + cpu::IsaName(cpu::SelectedIsa()));
}
void BM_CpuStats(benchmark::State& state) { CpuStats(state, false); }
void BM_CpuStatsDenormal(benchmark::State& state) { CpuStats(state, true); }
BENCHMARK(BM_CpuStats)
    ->Arg(static_cast<int>(DType::kFp32))
    ->Arg(static_cast<int>(DType::kBf16))
    ->Arg(static_cast<int>(DType::kFp16))
    ->Arg(static_cast<int>(DType::kFp8E4M3))
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_CpuStatsDenormal)
    ->Arg(static_cast<int>(DType::kFp32))
    ->Arg(static_cast<int>(DType::kBf16))
    ->Unit(benchmark::kMillisecond);

// The streaming-read baseline (bench/stats_throughput.h):
// BM_MemoryRead/<isa>/<prefetch bytes ahead> over the same 64 MiB; the
// fastest variant is the reference for BM_CpuStats. BM_MemoryReadScalar is
// the former baseline, a plain scalar 8-byte loop. (bench/cpu_stats_vs_read
// measures the same ratio rep by rep, which cancels drift between runs.)
using bench::ReadFn;

void MemoryRead(benchmark::State& state, cpu::Isa isa, int prefetch, ReadFn fn) {
  const std::vector<unsigned char>& buf = Buffer(DType::kFp32, false);  // touched
  if (!cpu::IsaAvailable(isa) || fn == nullptr) return state.SkipWithError("ISA not available");
  benchmark::DoNotOptimize(fn(buf.data(), buf.size()));  // warm the TLB, like the kernels' runs
  for (auto _ : state) {
    uint64_t acc = fn(buf.data(), buf.size());
    benchmark::DoNotOptimize(acc);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * buf.size()));
  state.SetLabel(std::string(cpu::IsaName(isa)) + " prefetch " + std::to_string(prefetch));
}

[[maybe_unused]] const bool kMemoryReadRegistered = [] {
  for (const bench::ReadVariant& v : bench::ReadVariants()) {
    const std::string name = "BM_MemoryRead/" + v.name;
    benchmark::RegisterBenchmark(name.c_str(), [v](benchmark::State& state) {
      MemoryRead(state, v.isa, v.prefetch, v.fn);
    })->Unit(benchmark::kMillisecond);
  }
  return true;
}();

void BM_MemoryReadScalar(benchmark::State& state) {
  const std::vector<unsigned char>& buf = Buffer(DType::kFp32, false);
  for (auto _ : state) {
    uint64_t acc = bench::ReadScalar(buf.data(), buf.size());
    benchmark::DoNotOptimize(acc);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * buf.size()));
}
BENCHMARK(BM_MemoryReadScalar)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace gnmr

BENCHMARK_MAIN();
