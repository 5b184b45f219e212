// bench_replay: end-to-end replay throughput (CSV parsing + controller +
// JSON Lines to a null sink) on a generated trace of 1.2 M rows, in unit
// observations per second, next to baselines over the same bytes: counting
// newlines (the floor any reader pays) and parsing alone.
//
// Target (docs/perf.md): >= 1 M unit observations per second end to end.
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>

#include "controller/replay/replay.h"
#include "controller/replay/trace_reader.h"

namespace gnmr {
namespace {

constexpr int kUnits = 1000;
constexpr int kSteps = 1200;

// A realistic trace: all seven columns, per-unit norms with noise, a few
// spikes per 10 steps, a NaN now and then, an idle unit now and then.
const std::string& Trace() {
  static const std::string trace = [] {
    std::string t = "step,unit,sumsq,amax,nonfinite,zeros,numel\n";
    t.reserve(static_cast<size_t>(kUnits) * kSteps * 72);
    std::mt19937_64 rng(7);
    std::normal_distribution<double> noise(0.0, 0.08);
    std::vector<std::string> names;
    for (int u = 0; u < kUnits; ++u) {
      static const char* kKinds[] = {"attn.qkv", "attn.out", "mlp.fc1", "mlp.fc2"};
      names.push_back("model.layers." + std::to_string(u / 4) + "." + kKinds[u % 4]);
    }
    char buf[32];
    auto num = [&](double v) {
      auto r = std::to_chars(buf, buf + sizeof(buf), v, std::chars_format::general, 7);
      t.append(buf, r.ptr);
    };
    for (int s = 0; s < kSteps; ++s) {
      for (int u = 0; u < kUnits; ++u) {
        double norm = (0.2 + 0.001 * u) * std::exp(noise(rng));
        if (s > 60 && (s * 31 + u * 17) % 4001 == 0) norm *= 12.0;
        const bool nan = s > 60 && (s * 7 + u) % 50021 == 0;
        const bool idle = (s * 13 + u * 3) % 997 == 0;
        t += std::to_string(s);
        t += ',';
        t += names[u];
        t += ',';
        if (nan) {
          t += "nan";
        } else {
          num(idle ? 0.0 : norm * norm);
        }
        t += ',';
        num(norm * 0.004);
        t += nan ? ",5," : ",0,";
        t += std::to_string((s + u) % 50);
        t += ",1048576\n";
      }
    }
    return t;
  }();
  return trace;
}

void Finish(benchmark::State& state, uint64_t rows) {
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * rows));
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * Trace().size()));
}

// Baseline: the cheapest pass over the same bytes.
void BM_CountNewlines(benchmark::State& state) {
  const std::string& t = Trace();
  uint64_t lines = 0;
  for (auto _ : state) {
    lines = 0;
    const char* p = t.data();
    const char* e = p + t.size();
    while ((p = static_cast<const char*>(std::memchr(p, '\n', e - p)))) {
      ++lines;
      ++p;
    }
    benchmark::DoNotOptimize(lines);
  }
  Finish(state, lines - 1);
}

// Parsing alone: TraceReader over the buffer, no controller.
void BM_ParseOnly(benchmark::State& state) {
  uint64_t rows = 0;
  for (auto _ : state) {
    TraceReader r;
    if (!r.OpenBuffer(Trace(), "bench.csv").ok()) {
      state.SkipWithError("open");
      return;
    }
    TraceStep step;
    bool got = true;
    while (got) {
      Status s = r.Next(&step, &got);
      if (!s.ok()) {
        state.SkipWithError(s.message().c_str());
        return;
      }
    }
    rows = r.rows();
  }
  Finish(state, rows);
}

void RunReplayBench(benchmark::State& state, bool from_file) {
  std::string path;
  if (from_file) {
    path = "/tmp/gnmr_bench_replay_trace.csv";
    std::FILE* f = std::fopen(path.c_str(), "wb");
    if (f == nullptr || std::fwrite(Trace().data(), 1, Trace().size(), f) != Trace().size()) {
      state.SkipWithError("cannot write the temporary trace");
      if (f != nullptr) std::fclose(f);
      return;
    }
    std::fclose(f);
  }
  ReplayOptions options;  // the defaults
  ReplaySummary summary;
  uint64_t out_bytes = 0;
  for (auto _ : state) {
    TraceReader r;
    Status s = from_file ? r.OpenFile(path) : r.OpenBuffer(Trace(), "bench.csv");
    if (!s.ok()) {
      state.SkipWithError(s.message().c_str());
      return;
    }
    NullSink sink;
    StatusOr<ReplaySummary> got = RunReplay(&r, options, &sink);
    if (!got.ok()) {
      state.SkipWithError(got.status().message().c_str());
      return;
    }
    summary = got.value();
    out_bytes = sink.bytes();
  }
  if (from_file) std::remove(path.c_str());
  Finish(state, summary.stats.unit_steps_observed);
  state.counters["decisions"] = static_cast<double>(summary.decisions_written);
  state.counters["admissions"] = static_cast<double>(summary.stats.admissions());
  state.counters["denials"] = static_cast<double>(summary.stats.denials);
  state.counters["jsonl_bytes"] = static_cast<double>(out_bytes);
}

void BM_Replay(benchmark::State& state) { RunReplayBench(state, false); }
void BM_ReplayFromFile(benchmark::State& state) { RunReplayBench(state, true); }

BENCHMARK(BM_CountNewlines)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_ParseOnly)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_Replay)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_ReplayFromFile)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace gnmr

BENCHMARK_MAIN();
