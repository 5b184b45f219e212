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
// BM_CpuStats / BM_MemoryRead: statistics throughput per dtype against a
//   plain read of the same bytes (both single-threaded, same buffer).
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "daemon/server/daemon.h"
#include "gnmr/client.h"
#include "kernels/cpu/cpu_stats.h"

namespace gnmr {
namespace {

std::string SocketPath(const char* tag) {
  return "/tmp/gnmr_bench_" + std::string(tag) + "_" + std::to_string(getpid()) + ".sock";
}

std::unique_ptr<Client> MakeClient(const std::string& target, int units,
                                   std::vector<float>* storage) {
  ClientOptions o;
  o.target = target;
  o.job_id = "bench";
  auto c = Client::Create(o);
  if (!c.ok()) return nullptr;
  std::unique_ptr<Client> client = std::move(c).value();
  storage->assign(static_cast<size_t>(units), 1.0f);
  for (int u = 0; u < units; ++u) {
    TensorRef t;
    t.data = storage->data() + u;
    t.numel = 0;
    client->AddUnit("layers." + std::to_string(u / 4) + ".unit" + std::to_string(u % 4), {t});
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
    client->Observe(step);
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
  auto client = MakeClient("unix:" + SocketPath("absent"), static_cast<int>(state.range(0)),
                           &storage);
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

// 64 MiB of N(0, 0.01) gradients in `dtype` (denormal: N(0, 1e-39) for
// fp32/bf16, mostly subnormal), larger than the caches.
const std::vector<unsigned char>& Buffer(DType dtype, bool denormal) {
  static std::vector<unsigned char> bufs[16];
  std::vector<unsigned char>& b = bufs[static_cast<int>(dtype) * 2 + (denormal ? 1 : 0)];
  if (!b.empty()) return b;
  b.resize(64u << 20);
  std::mt19937 rng(1);
  std::normal_distribution<float> dist(0.0f, denormal ? 1e-39f : 0.01f);
  const size_t size = DTypeSize(dtype);
  for (size_t i = 0; i + size <= b.size(); i += size) {
    const float f = dist(rng);
    uint32_t u;
    std::memcpy(&u, &f, 4);
    if (dtype == DType::kFp32) {
      std::memcpy(&b[i], &u, 4);
    } else if (dtype == DType::kBf16) {
      const uint16_t h = static_cast<uint16_t>(u >> 16);  // truncation is fine here
      std::memcpy(&b[i], &h, 2);
    } else if (dtype == DType::kFp16) {
      const uint16_t h = static_cast<uint16_t>(0x2000 + (u & 0x8fff));  // small normals
      std::memcpy(&b[i], &h, 2);
    } else {
      b[i] = static_cast<unsigned char>(0x20 + (u & 0x9f));  // fp8, no NaN/Inf
    }
  }
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
    cpu::ComputeStats(&t, 1, &u);
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

void BM_MemoryRead(benchmark::State& state) {
  const std::vector<unsigned char>& buf = Buffer(DType::kFp32, false);
  const size_t words = buf.size() / 8;
  for (auto _ : state) {
    uint64_t acc = 0;
    for (size_t i = 0; i < words; ++i) {
      uint64_t w;
      std::memcpy(&w, &buf[i * 8], 8);
      acc += w;
    }
    benchmark::DoNotOptimize(acc);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * buf.size()));
}
BENCHMARK(BM_MemoryRead)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace gnmr

BENCHMARK_MAIN();
