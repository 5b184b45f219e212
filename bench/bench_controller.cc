// bench_controller: the cost of one controller decision (Observe) over many
// units in steady state: past warmup, with a few units spiking every step
// so that admissions, releases and budget denials all happen.
//
// Target (docs/perf.md): <= 1 ms per decision over 10,000 units on one
// core, i.e. about 100 ns per unit observation.
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>

#include "controller/controller.h"

namespace gnmr {
namespace {

constexpr int kTemplates = 64;  // distinct noisy steps, cycled

// Per-step samples for `units` units: log-normal noise around a per-unit
// base norm; `spikes` units per step x10, one NaN every 16 steps.
std::vector<std::vector<UnitSample>> MakeSteps(uint32_t units, int spikes) {
  std::mt19937_64 rng(42);
  std::normal_distribution<double> noise(0.0, 0.08);
  std::uniform_int_distribution<uint32_t> pick(0, units - 1);
  std::vector<double> base(units);
  for (uint32_t u = 0; u < units; ++u) base[u] = 0.2 + 0.001 * (u % 997);
  std::vector<std::vector<UnitSample>> steps(kTemplates);
  for (int t = 0; t < kTemplates; ++t) {
    std::vector<UnitSample>& s = steps[t];
    s.resize(units);
    for (uint32_t u = 0; u < units; ++u) {
      const double norm = base[u] * std::exp(noise(rng));
      s[u].unit_id = u;
      s[u].sumsq = norm * norm;
      s[u].amax = norm * 0.01;
      s[u].numel = 1 << 20;
    }
    for (int k = 0; k < spikes; ++k) s[pick(rng)].sumsq *= 100.0;
    if (t % 16 == 0) {
      s[pick(rng)].sumsq = NAN;
      s[pick(rng)].nonfinite = 3;
    }
  }
  return steps;
}

// A controller with `units` units, run past warmup on quiet steps.
Controller WarmController(uint32_t units) {
  ControllerConfig config;  // the defaults: warmup 50, max_o 4, lock 20
  Controller c = Controller::Create(config).value();
  for (uint32_t u = 0; u < units; ++u) {
    (void)c.AddUnit("model.layers." + std::to_string(u / 8) + ".unit" + std::to_string(u % 8));
  }
  std::vector<std::vector<UnitSample>> quiet = MakeSteps(units, 0);
  for (auto& s : quiet) {
    for (auto& x : s) {
      if (!std::isfinite(x.sumsq)) x.sumsq = 0.04;
      x.nonfinite = 0;
    }
  }
  Decision d;
  for (int64_t t = 0; t < config.warmup + 10; ++t) {
    (void)c.Observe(t, quiet[t % kTemplates], &d);
  }
  return c;
}

void BM_Decision(benchmark::State& state) {
  const uint32_t units = static_cast<uint32_t>(state.range(0));
  const int spikes = static_cast<int>(state.range(1));
  Controller c = WarmController(units);
  const std::vector<std::vector<UnitSample>> steps = MakeSteps(units, spikes);
  Decision d;
  int64_t step = *c.last_step() + 1;
  for (auto _ : state) {
    const std::vector<UnitSample>& s = steps[step % kTemplates];
    Status st = c.Observe(step++, s.data(), s.size(), &d);
    if (!st.ok()) {
      state.SkipWithError(st.message().c_str());
      break;
    }
    benchmark::DoNotOptimize(d.digest);
  }
  state.SetItemsProcessed(state.iterations() * units);
  state.counters["per_unit"] =
      benchmark::Counter(static_cast<double>(units), benchmark::Counter::kIsIterationInvariantRate |
                                                         benchmark::Counter::kInvert);
  const ControllerStats& st = c.stats();
  state.counters["admissions"] = static_cast<double>(st.admissions());
  state.counters["denials"] = static_cast<double>(st.denials);
}

// {units, spiking units per step}
BENCHMARK(BM_Decision)
    ->ArgNames({"units", "spikes"})
    ->Args({10000, 0})
    ->Args({10000, 8})
    ->Args({1000, 8})
    ->Args({100000, 8})
    ->Unit(benchmark::kMicrosecond);

// Issue 12, item 9: a decision whose recovery set is large. Every unit is
// non-finite at every step and max_o admits them all, so each step has
// `units` candidates checked against a recovery set of `units` entries
// (a linear scan per candidate before recovery membership was O(1)).
void BM_DecisionLargeRecovery(benchmark::State& state) {
  const uint32_t units = static_cast<uint32_t>(state.range(0));
  ControllerConfig config;
  config.max_o = static_cast<int32_t>(units);
  Controller c = Controller::Create(config).value();
  for (uint32_t u = 0; u < units; ++u) (void)c.AddUnit("u" + std::to_string(u));
  std::vector<UnitSample> samples(units);
  for (uint32_t u = 0; u < units; ++u) {
    samples[u].unit_id = u;
    samples[u].sumsq = NAN;
    samples[u].nonfinite = 1;
  }
  Decision d;
  int64_t step = 0;
  for (auto _ : state) {
    Status st = c.Observe(step++, samples, &d);
    if (!st.ok()) {
      state.SkipWithError(st.message().c_str());
      break;
    }
    benchmark::DoNotOptimize(d.digest);
  }
  state.counters["in_recovery"] = static_cast<double>(c.recovery().size());
}
BENCHMARK(BM_DecisionLargeRecovery)
    ->ArgNames({"units"})
    ->Arg(1000)
    ->Arg(10000)
    ->Arg(60000)
    ->Unit(benchmark::kMillisecond);

// Issue 12, item 9: resolving a unit's action against 256 hostile rules
// ('*' + 'a' x len + 'b') for a 256-byte name of 'a's that none matches:
// the cost of registering one unit, paid under the job lock.
void BM_AddUnitHostileRules(benchmark::State& state) {
  const size_t len = static_cast<size_t>(state.range(0));
  ControllerConfig config;
  for (size_t i = 0; i < ControllerConfig::kMaxActionRules; ++i) {
    config.actions.push_back({"*" + std::string(len, 'a') + "b", Action::kClip, -1.0});
  }
  Controller c = Controller::Create(config).value();
  uint64_t n = 0;
  for (auto _ : state) {
    const std::string id = std::to_string(n++);
    benchmark::DoNotOptimize(c.AddUnit(std::string(256 - id.size(), 'a') + id).ok());
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_AddUnitHostileRules)
    ->ArgNames({"len"})
    ->Arg(1022)
    ->Arg(128)
    ->Unit(benchmark::kMicrosecond);

// The same with a realistic rule list: what every registration pays.
void BM_AddUnitTypicalRules(benchmark::State& state) {
  ControllerConfig config;
  for (const char* p : {"*.attn.qkv", "*.mlp.fc[12]", "lm_head", "embed*", "layers.[0-3].*",
                        "*.norm?", "*.router", "experts.*.w[123]"}) {
    config.actions.push_back({p, Action::kClip, -1.0});
  }
  Controller c = Controller::Create(config).value();
  uint64_t n = 0;
  for (auto _ : state) {
    const uint64_t i = n++;
    benchmark::DoNotOptimize(
        c.AddUnit("model.layers." + std::to_string(i / 8) + ".mlp.unit" + std::to_string(i % 8))
            .ok());
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_AddUnitTypicalRules)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace gnmr

BENCHMARK_MAIN();
