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
// BM_CpuStats / BM_MemoryRead: statistics throughput per dtype against the
//   best single-core vectorized read of the same bytes (both single-threaded,
//   same buffer); BM_MemoryReadScalar is the old plain-loop baseline.
#include <benchmark/benchmark.h>
#include <unistd.h>

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#endif

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

// The streaming-read baseline: the best single-core read of the same
// 64 MiB buffer we can write. BM_MemoryRead/<isa>/<prefetch bytes ahead>:
// 64-byte-aligned vector loads (AVX-512: 4 x 64 B per step; AVX2: 8 x 32 B),
// folded into 4 independent integer-add accumulators (cheap, and the loads
// cannot be dropped: the sum goes to DoNotOptimize), with a software
// prefetch (T0) of every line `prefetch` bytes ahead (0: none, hardware
// prefetcher only). Same run-time ISA dispatch as the kernels
// (cpu::IsaAvailable); a variant the CPU lacks is skipped. The fastest
// variant is the reference for BM_CpuStats. BM_MemoryReadScalar is the
// former baseline, a plain scalar 8-byte loop.
#if defined(__x86_64__) || defined(_M_X64)
template <int kPrefetch>
__attribute__((target("avx512f"))) uint64_t ReadAvx512(const unsigned char* p, size_t n) {
  uint64_t head = 0;
  while ((reinterpret_cast<uintptr_t>(p) & 63) != 0 && n > 0) head += *p++, --n;
  __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
  const unsigned char* end = p + (n & ~size_t{255});
  for (; p < end; p += 256) {
    if (kPrefetch > 0) {
      // Prefetches never fault; an integer address avoids forming a pointer
      // past the buffer.
      const uintptr_t ahead = reinterpret_cast<uintptr_t>(p) + kPrefetch;
      for (int l = 0; l < 4; ++l) {
        _mm_prefetch(reinterpret_cast<const char*>(ahead + 64 * l), _MM_HINT_T0);
      }
    }
    a0 = _mm512_add_epi64(a0, _mm512_load_si512(p));
    a1 = _mm512_add_epi64(a1, _mm512_load_si512(p + 64));
    a2 = _mm512_add_epi64(a2, _mm512_load_si512(p + 128));
    a3 = _mm512_add_epi64(a3, _mm512_load_si512(p + 192));
  }
  n &= 255;
  for (size_t i = 0; i < n; ++i) head += p[i];
  const __m512i s = _mm512_add_epi64(_mm512_add_epi64(a0, a1), _mm512_add_epi64(a2, a3));
  alignas(64) uint64_t lanes[8];  // (not _mm512_reduce_add_epi64: GCC 12 warns in it)
  _mm512_store_si512(lanes, s);
  for (uint64_t l : lanes) head += l;
  return head;
}

template <int kPrefetch>
__attribute__((target("avx2"))) uint64_t ReadAvx2(const unsigned char* p, size_t n) {
  uint64_t head = 0;
  while ((reinterpret_cast<uintptr_t>(p) & 63) != 0 && n > 0) head += *p++, --n;
  __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
  const unsigned char* end = p + (n & ~size_t{255});
  for (; p < end; p += 256) {
    if (kPrefetch > 0) {
      const uintptr_t ahead = reinterpret_cast<uintptr_t>(p) + kPrefetch;
      for (int l = 0; l < 4; ++l) {
        _mm_prefetch(reinterpret_cast<const char*>(ahead + 64 * l), _MM_HINT_T0);
      }
    }
    const __m256i* v = reinterpret_cast<const __m256i*>(p);
    a0 = _mm256_add_epi64(a0, _mm256_add_epi64(_mm256_load_si256(v + 0), _mm256_load_si256(v + 1)));
    a1 = _mm256_add_epi64(a1, _mm256_add_epi64(_mm256_load_si256(v + 2), _mm256_load_si256(v + 3)));
    a2 = _mm256_add_epi64(a2, _mm256_add_epi64(_mm256_load_si256(v + 4), _mm256_load_si256(v + 5)));
    a3 = _mm256_add_epi64(a3, _mm256_add_epi64(_mm256_load_si256(v + 6), _mm256_load_si256(v + 7)));
  }
  n &= 255;
  for (size_t i = 0; i < n; ++i) head += p[i];
  const __m256i s = _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3));
  alignas(32) uint64_t lanes[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), s);
  return head + lanes[0] + lanes[1] + lanes[2] + lanes[3];
}
#endif

using ReadFn = uint64_t (*)(const unsigned char*, size_t);

template <int kPrefetch>
ReadFn ReadFor(cpu::Isa isa) {
#if defined(__x86_64__) || defined(_M_X64)
  if (isa == cpu::Isa::kAvx512) return &ReadAvx512<kPrefetch>;
  if (isa == cpu::Isa::kAvx2) return &ReadAvx2<kPrefetch>;
#endif
  (void)isa;
  return nullptr;
}

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

template <int kPrefetch>
void RegisterMemoryRead(cpu::Isa isa) {
  const std::string name = std::string("BM_MemoryRead/") + cpu::IsaName(isa) + "/" +
                           std::to_string(kPrefetch);
  benchmark::RegisterBenchmark(name.c_str(), [isa](benchmark::State& state) {
    MemoryRead(state, isa, kPrefetch, ReadFor<kPrefetch>(isa));
  })->Unit(benchmark::kMillisecond);
}

[[maybe_unused]] const bool kMemoryReadRegistered = [] {
  for (cpu::Isa isa : {cpu::Isa::kAvx512, cpu::Isa::kAvx2}) {
    RegisterMemoryRead<0>(isa);
    RegisterMemoryRead<1024>(isa);
    RegisterMemoryRead<4096>(isa);
    RegisterMemoryRead<8192>(isa);
    RegisterMemoryRead<16384>(isa);
  }
  return true;
}();

void BM_MemoryReadScalar(benchmark::State& state) {
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
BENCHMARK(BM_MemoryReadScalar)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace gnmr

BENCHMARK_MAIN();
