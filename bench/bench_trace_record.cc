// bench_trace_record: what live trace recording adds to a job's decision
// path - TraceRecorder::Record, called under the job's lock after the
// decision went out (a copy of the step's samples into the bounded queue) -
// next to the decision itself (Controller::Observe) over the same units.
// The background writer runs meanwhile, as in gnmrd, and is waited for
// (untimed) every 32 steps (docs/perf.md, "Trace recording").
#include <cstdlib>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>

#include "controller/controller.h"
#include "daemon/store/trace_recorder.h"

namespace gnmr {
namespace {

Controller MakeController(uint32_t units) {
  Controller c = Controller::Create(ControllerConfig()).value();
  for (uint32_t u = 0; u < units; ++u) {
    (void)c.AddUnit("model.layers." + std::to_string(u / 8) + ".unit" + std::to_string(u % 8));
  }
  return c;
}

std::vector<UnitSample> MakeSamples(uint32_t units) {
  std::vector<UnitSample> s(units);
  for (uint32_t u = 0; u < units; ++u) {
    s[u].unit_id = u;
    s[u].sumsq = 0.04 + 1e-5 * u;
    s[u].amax = 0.002;
    s[u].numel = 1 << 20;
  }
  return s;
}

void BM_Record(benchmark::State& state) {
  const uint32_t units = static_cast<uint32_t>(state.range(0));
  char tmpl[] = "/tmp/bench-trace-XXXXXX";
  const std::string dir = ::mkdtemp(tmpl);
  store::TraceRecorderOptions o;
  o.dir = dir;
  o.max_file_bytes = uint64_t{64} << 20;  // rotates: the disk stays bounded
  store::TraceRecorder rec(o);
  Controller c = MakeController(units);
  const std::vector<UnitSample> samples = MakeSamples(units);
  int64_t step = 0;
  uint64_t dropped = 0;
  for (auto _ : state) {
    if (rec.Record("job", step++, samples, c) != store::TraceRecorder::Outcome::kQueued) {
      ++dropped;
    }
    // The writer keeps up in gnmrd (50 steps/s); here Record runs at
    // memcpy speed, so let the writer drain (untimed) before the queue
    // fills: what is measured is the queued path, not the drop path.
    if (step % 32 == 0) {
      state.PauseTiming();
      (void)rec.Flush();
      state.ResumeTiming();
    }
  }
  rec.Stop();
  state.counters["dropped"] = static_cast<double>(dropped);
  state.SetItemsProcessed(state.iterations() * units);
  std::system(("rm -rf " + dir).c_str());
}
BENCHMARK(BM_Record)->Arg(1024)->Arg(10000);

void BM_Decision(benchmark::State& state) {
  const uint32_t units = static_cast<uint32_t>(state.range(0));
  Controller c = MakeController(units);
  const std::vector<UnitSample> samples = MakeSamples(units);
  Decision d;
  int64_t step = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(c.Observe(step++, samples, &d));
  }
  state.SetItemsProcessed(state.iterations() * units);
}
BENCHMARK(BM_Decision)->Arg(1024)->Arg(10000);

}  // namespace
}  // namespace gnmr

BENCHMARK_MAIN();
