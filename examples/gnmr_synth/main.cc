// gnmr-synth: a synthetic trainer rank (one process per rank). The users'
// smoke test and load tool; see synth_flags.h for the stable interface.
//
// Per step: produce gradients (with the requested spikes and NaNs),
// Observe, PlanFor, apply the plan (promote: flag; clip: scale; skip: zero;
// global skip: skip the step), Ack. With --json it ends by printing one
// JSON object: rank, steps run, decisions received, missed decisions,
// dropped reports, and the (step, digest) of every plan it applied.
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "common/text.h"
#include "examples/gnmr_synth/synth_flags.h"
#include "examples/gnmr_synth/synth_model.h"
#include "gnmr/client.h"

namespace gnmr::synth {
namespace {

volatile std::sig_atomic_t g_stop = 0;
void OnSignal(int) { g_stop = 1; }

struct Injection {
  int64_t step;
  uint32_t unit;
  bool nan;       // --nan, else --spike
  double factor;  // --spike
};

struct Totals {
  int64_t steps = 0;
  uint64_t global_skips = 0;
  uint64_t promoted_unit_steps = 0;
  uint64_t clipped_unit_steps = 0;
  uint64_t skipped_units = 0;
  uint64_t resets = 0;
  std::vector<std::pair<int64_t, uint64_t>> applied;  // (step, digest)
};

void Apply(const Plan& plan, SyntheticModel* model, Totals* t) {
  if (plan.skip_step) ++t->global_skips;  // a real trainer skips optimizer.step()
  for (const PlanEntry& e : plan.entries) {
    switch (e.action) {
      case Action::kPromote:
        ++t->promoted_unit_steps;  // a real trainer switches the unit's path
        if (e.first_step && e.entry == EntryTreatment::kClip) model->Scale(e.unit, e.scale);
        if (e.first_step && e.entry == EntryTreatment::kSkip) model->Zero(e.unit);
        break;
      case Action::kClip:
        ++t->clipped_unit_steps;
        model->Scale(e.unit, e.scale);
        break;
      case Action::kSkip:
        if (e.first_step) {
          ++t->skipped_units;
          model->Zero(e.unit);
        }
        break;
      case Action::kResetState:
        if (e.first_step) ++t->resets;
        break;
    }
  }
  if (plan.has_decision) t->applied.emplace_back(plan.step, plan.digest);
}

std::string Json(const Flags& f, const Totals& t, const ClientCounters& k) {
  std::string o = "{\"rank\":";
  AppendUint(&o, f.rank);
  o += ",\"world_size\":";
  AppendUint(&o, f.world_size);
  o += ",\"job\":";
  AppendJsonString(&o, f.job);
  o += ",\"steps\":";
  AppendInt(&o, t.steps);
  auto field = [&o](const char* name, uint64_t v) {
    o += ",\"";
    o += name;
    o += "\":";
    AppendUint(&o, v);
  };
  field("decisions_received", k.decisions_received);
  field("missed_decisions", k.missed_decisions);
  field("dropped_reports", k.reports_dropped);
  field("reports_sent", k.reports_sent);
  field("reports_held", k.reports_held);
  field("decisions_rejected", k.decisions_rejected);
  field("reconnects", k.reconnects);
  field("global_skips", t.global_skips);
  field("promoted_unit_steps", t.promoted_unit_steps);
  field("clipped_unit_steps", t.clipped_unit_steps);
  field("skipped_units", t.skipped_units);
  o += ",\"connected\":";
  o += k.connected ? "true" : "false";
  o += ",\"stats_seconds\":";
  AppendDouble(&o, k.stats_seconds);
  o += ",\"applied\":[";
  char digest[24];
  for (size_t i = 0; i < t.applied.size(); ++i) {
    if (i > 0) o += ',';
    o += "{\"step\":";
    AppendInt(&o, t.applied[i].first);
    std::snprintf(digest, sizeof digest, "%016llx",
                  static_cast<unsigned long long>(t.applied[i].second));
    o += ",\"digest\":\"";
    o += digest;
    o += "\"}";
  }
  o += "]}";
  return o;
}

int Run(const Flags& f) {
  std::vector<UnitLayout> layout = MakeLayout(f.units, f.rank, f.world_size);
  std::vector<Injection> injections;
  for (const Spike& s : f.spikes) {
    StatusOr<uint32_t> u = ResolveUnit(layout, s.unit);
    if (!u.ok()) {
      std::fprintf(stderr, "gnmr-synth: --spike: %s\n", u.status().message().c_str());
      return 2;
    }
    injections.push_back({s.step, *u, false, s.factor});
  }
  for (const NanAt& n : f.nans) {
    StatusOr<uint32_t> u = ResolveUnit(layout, n.unit);
    if (!u.ok()) {
      std::fprintf(stderr, "gnmr-synth: --nan: %s\n", u.status().message().c_str());
      return 2;
    }
    injections.push_back({n.step, *u, true, 1.0});
  }
  uint64_t seed = 1469598103934665603ull;  // FNV of the job id: same on every rank
  for (char c : f.job) seed = (seed ^ static_cast<unsigned char>(c)) * 1099511628211ull;
  SyntheticModel model(layout, seed);

  ClientOptions o;
  o.target = f.target;
  o.job_id = f.job;
  o.rank = f.rank;
  o.world_size = f.world_size;
  o.token = f.token;
  o.decision_wait = std::chrono::milliseconds(f.decision_wait_ms);
  StatusOr<std::unique_ptr<Client>> c = Client::Create(o);
  if (!c.ok()) {
    std::fprintf(stderr, "gnmr-synth: %s\n", c.status().ToString().c_str());
    return c.status().code() == StatusCode::kInvalidArgument ? 2 : 1;
  }
  Client& client = **c;
  for (uint32_t u = 0; u < layout.size(); ++u) {
    StatusOr<UnitHandle> h = client.AddUnit(layout[u].name, model.Tensors(u), layout[u].shard_index,
                                            layout[u].shard_count);
    if (!h.ok()) {
      std::fprintf(stderr, "gnmr-synth: %s\n", h.status().ToString().c_str());
      return 1;
    }
  }
  Status s = client.Start();
  if (!s.ok()) {
    std::fprintf(stderr, "gnmr-synth: %s\n", s.ToString().c_str());
    return 1;
  }

  // --plans-out: written per step (line-buffered), so a rank killed or
  // stopped midway still leaves every plan it made.
  std::FILE* plans_out = nullptr;
  if (!f.plans_out.empty()) {
    plans_out = std::fopen(f.plans_out.c_str(), "a");
    if (plans_out == nullptr) {
      std::fprintf(stderr, "gnmr-synth: --plans-out %s: %s\n", f.plans_out.c_str(),
                   std::strerror(errno));
      return 1;
    }
    std::setvbuf(plans_out, nullptr, _IOLBF, 0);
  }
  Totals totals;
  Plan plan;
  const auto start = std::chrono::steady_clock::now();
  for (int64_t step = 0; step < f.steps && !g_stop; ++step) {
    model.Produce(step);
    for (const Injection& in : injections) {
      if (in.step != step) continue;
      if (in.nan) {
        model.PutNan(in.unit);
      } else {
        model.Scale(in.unit, in.factor);
      }
    }
    s = client.Observe(step);
    if (!s.ok()) {
      std::fprintf(stderr, "gnmr-synth: step %lld: %s\n", static_cast<long long>(step),
                   s.ToString().c_str());
      return 1;
    }
    client.PlanFor(step, &plan);
    if (plans_out != nullptr) {
      std::fprintf(plans_out, "%lld,%d,%llu,%016llx,%s\n", static_cast<long long>(step),
                   plan.has_decision ? 1 : 0, static_cast<unsigned long long>(plan.generation),
                   static_cast<unsigned long long>(plan.digest), MissReasonName(plan.miss_reason));
    }
    Apply(plan, &model, &totals);
    (void)client.Ack(plan);  // fails only before Start; the report is best-effort
    totals.steps = step + 1;
    if (f.step_ms > 0) {
      std::this_thread::sleep_until(start + std::chrono::milliseconds(f.step_ms * (step + 1)));
    }
  }
  if (plans_out != nullptr) std::fclose(plans_out);
  // Let the daemon see the last steps, then wait (bounded) for the decision
  // made from the last one: Flush only says the reports were written, and
  // the summary's decision count must not depend on how fast that decision
  // comes back on a loaded machine.
  const auto drain_until = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  if (client.Flush(std::chrono::seconds(2))) {
    for (ClientCounters now = client.Counters();
         now.connected && now.last_decided_step < totals.steps - 1 &&
         std::chrono::steady_clock::now() < drain_until;
         now = client.Counters()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }
  const ClientCounters k = client.Counters();
  client.Stop();
  if (f.json) {
    std::printf("%s\n", Json(f, totals, k).c_str());
  } else {
    std::fprintf(stderr,
                 "gnmr-synth: rank %u: %lld steps, %llu decisions, %llu missed, %llu dropped "
                 "reports, %zu plans applied%s\n",
                 f.rank, static_cast<long long>(totals.steps),
                 static_cast<unsigned long long>(k.decisions_received),
                 static_cast<unsigned long long>(k.missed_decisions),
                 static_cast<unsigned long long>(k.reports_dropped), totals.applied.size(),
                 k.connected ? "" : " (not connected at the end)");
  }
  return 0;
}

}  // namespace
}  // namespace gnmr::synth

int main(int argc, char** argv) {
  using namespace gnmr::synth;
  // Logs go to stderr: stdout carries the JSON summary.
  spdlog::set_default_logger(spdlog::stderr_color_mt("gnmr-synth"));
  std::vector<std::string> args(argv + 1, argv + argc);
  gnmr::StatusOr<Flags> flags = ParseFlags(args);
  if (!flags.ok()) {
    std::fprintf(stderr, "gnmr-synth: %s\n(gnmr-synth --help for usage)\n",
                 flags.status().message().c_str());
    return 2;
  }
  if (flags->help) {
    std::fputs(Usage().c_str(), stdout);
    return 0;
  }
  std::signal(SIGINT, OnSignal);
  std::signal(SIGTERM, OnSignal);
  try {
    return Run(*flags);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gnmr-synth: %s\n", e.what());
    return 1;
  }
}
