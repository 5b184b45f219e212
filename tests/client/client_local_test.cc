// Target "local" (docs/local_mode.md): the controller in the client. The
// acceptance check replays one sequence of gradients through a real gnmrd
// and through local mode, both clients observing the very same buffers, and
// compares the plans step by step (digests, entries, norms, scales) at lag
// 0 and 1 (and lag 0 with denied: clip, whose clip of the denied unit must
// reach the plan of exactly that step), the events the two write, and the
// exported controller states
// byte for byte. Also: sharded units and bad set-ups are refused loudly, a
// state round-trips through ExportState/ImportState (also one exported by
// gnmrd), and the training thread never waits on a stopped local client.
#include "gnmr/client_local.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "controller/publish/event_json.h"
#include "controller/publish/wire_names.h"
#include "gnmr/client.h"
#include "gnmr/gnmr_c.h"
#include "tests/daemon/gnmrd_process.h"
#include "tests/testing/decision_events.h"
#include "tests/testing/eventually.h"

namespace gnmr {
namespace {

using std::chrono::milliseconds;
using testing::DecisionEvents;
using testing::Eventually;

constexpr int kUnits = 4;
constexpr size_t kNumel = 256;

// The trainer's gradients: deterministic, with spikes (admissions, a
// denial at max_o 1) and a NaN (the nonfinite trigger, a global skip at lag 0).
class Gradients {
 public:
  Gradients() : g_(kUnits, std::vector<float>(kNumel)) {}
  void Fill(int64_t step) {
    for (int u = 0; u < kUnits; ++u) {
      float spike = 1.0f;
      if ((step == 25 && u == 1) || (step == 40 && (u == 2 || u == 3))) spike = 30.0f;
      if (step == 62 && u == 3) spike = 12.0f;
      for (size_t i = 0; i < kNumel; ++i) {
        g_[u][i] = spike * 0.01f *
                   static_cast<float>((i * 7 + static_cast<size_t>(step) * (3 + u)) % 17 + 1);
      }
    }
    if (step == 55) g_[0][7] = std::numeric_limits<float>::quiet_NaN();
  }
  TensorRef Ref(int u) {
    TensorRef t;
    t.data = g_[u].data();
    t.numel = kNumel;
    return t;
  }

 private:
  std::vector<std::vector<float>> g_;
};

ClientOptions LocalOptions(const std::string& job) {
  ClientOptions o;
  o.target = "local";
  o.job_id = job;
  return o;
}

TensorRef HostRef(std::vector<float>& g) {
  TensorRef t;
  t.data = g.data();
  t.numel = g.size();
  return t;
}

ControllerConfig TestConfig(int32_t lag, DeniedTreatment denied = DeniedTreatment::kNone) {
  ControllerConfig c;
  c.warmup = 5;
  c.max_o = 1;
  c.lock_steps = 10;
  c.lag = lag;
  c.denied = denied;
  return c;
}

std::unique_ptr<Client> MakeClient(const std::string& target, const std::string& job,
                                   const ControllerConfig& config, Gradients* grads,
                                   const std::string& events = "") {
  ClientOptions o;
  o.target = target;
  o.job_id = job;
  o.decision_wait = milliseconds(10000);
  o.config = config;
  o.local_events_path = events;
  StatusOr<std::unique_ptr<Client>> c = Client::Create(o);
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  if (!c.ok()) return nullptr;
  for (int u = 0; u < kUnits; ++u) {
    EXPECT_TRUE((*c)->AddUnit("layers." + std::to_string(u) + ".fc", {grads->Ref(u)}).ok());
  }
  EXPECT_TRUE((*c)->Start().ok());
  return std::move(c).value();
}

bool SameDouble(double a, double b) {
  return (std::isnan(a) && std::isnan(b)) || std::memcmp(&a, &b, sizeof a) == 0;
}

// Everything a trainer reads from a plan, bit for bit.
void ExpectSamePlan(const Plan& d, const Plan& l) {
  SCOPED_TRACE("step " + std::to_string(d.step));
  EXPECT_EQ(d.has_decision, l.has_decision);
  EXPECT_EQ(d.miss_reason, l.miss_reason);
  EXPECT_EQ(d.generation, l.generation);
  EXPECT_EQ(d.observed_step, l.observed_step);
  EXPECT_EQ(d.apply_step, l.apply_step);
  EXPECT_EQ(d.sequence, l.sequence);
  EXPECT_EQ(d.digest, l.digest);
  EXPECT_EQ(d.global_skip, l.global_skip);
  EXPECT_EQ(d.nonfinite_observed, l.nonfinite_observed);
  EXPECT_EQ(d.skip_step, l.skip_step);
  ASSERT_EQ(d.entries.size(), l.entries.size());
  for (size_t i = 0; i < d.entries.size(); ++i) {
    const PlanEntry& a = d.entries[i];
    const PlanEntry& b = l.entries[i];
    EXPECT_EQ(a.unit, b.unit);
    EXPECT_EQ(a.action, b.action);
    EXPECT_EQ(a.entry, b.entry);
    EXPECT_EQ(a.first_step, b.first_step);
    EXPECT_EQ(a.since, b.since);
    EXPECT_EQ(a.until, b.until);
    EXPECT_TRUE(SameDouble(a.ref_norm, b.ref_norm));
    EXPECT_TRUE(SameDouble(a.clip_min_scale, b.clip_min_scale));
    EXPECT_TRUE(SameDouble(a.norm, b.norm));
    EXPECT_TRUE(SameDouble(a.scale, b.scale));
    // Why it is in recovery: said, and the same, with gnmrd and locally.
    EXPECT_NE(a.trigger, Trigger::kNone);
    EXPECT_EQ(a.trigger, b.trigger);
    EXPECT_TRUE(SameDouble(a.gnmr, b.gnmr));
    EXPECT_TRUE(SameDouble(a.delta, b.delta));
    EXPECT_TRUE(SameDouble(a.fwd_ratio, b.fwd_ratio));
    EXPECT_TRUE(SameDouble(a.saturation_ratio, b.saturation_ratio));
    EXPECT_TRUE(SameDouble(a.underflow_ratio, b.underflow_ratio));
    EXPECT_EQ(a.denied_clip, b.denied_clip);
  }
}

std::string FindFile(const std::string& dir, const std::string& name, const std::string& under) {
  for (const auto& f : std::filesystem::recursive_directory_iterator(dir)) {
    const std::string p = f.path().string();
    if (f.path().filename() == name && p.find(under) != std::string::npos) return p;
  }
  return "";
}

struct Variant {
  int32_t lag;
  DeniedTreatment denied;
};

class LocalVsGnmrd : public ::testing::TestWithParam<Variant> {};

TEST_P(LocalVsGnmrd, SamePlansEventsAndStateAsTheDaemon) {
  testing::GnmrdProcess gnmrd;
  ASSERT_TRUE(gnmrd.Start());
  const int32_t lag = GetParam().lag;
  const bool clip_denied = GetParam().denied == DeniedTreatment::kClip;
  const std::string job = "cmp-lag" + std::to_string(lag) + (clip_denied ? "-clip" : "");
  const std::string events = gnmrd.dir() + "/local-events.jsonl";
  const ControllerConfig config = TestConfig(lag, GetParam().denied);
  Gradients grads;
  auto daemon = MakeClient(gnmrd.target(), job, config, &grads);
  auto local = MakeClient("local", job, config, &grads, events);
  ASSERT_TRUE(daemon && local);
  ASSERT_TRUE(daemon->WaitConnected(milliseconds(10000)).ok());
  ASSERT_TRUE(local->WaitConnected(milliseconds(0)).ok()) << "local mode is connected at Start";

  constexpr int64_t kSteps = 80;
  int with_entries = 0;
  int skipped = 0;
  std::vector<int64_t> denied_clip_steps;
  std::vector<double> denied_clip_scales;
  for (int64_t step = 0; step < kSteps; ++step) {
    grads.Fill(step);
    ASSERT_TRUE(daemon->Observe(step).ok());
    ASSERT_TRUE(local->Observe(step).ok());
    const Plan d = daemon->PlanFor(step);
    const Plan l = local->PlanFor(step);
    ExpectSamePlan(d, l);
    EXPECT_EQ(l.has_decision, step >= lag) << "step " << step;
    with_entries += !l.entries.empty();
    skipped += l.skip_step;
    for (const PlanEntry& e : d.entries) {
      if (!e.denied_clip) continue;
      // Exactly this step, a clip toward the unit's mean.
      EXPECT_EQ(e.action, Action::kClip);
      EXPECT_TRUE(e.first_step);
      EXPECT_EQ(e.since, step);
      EXPECT_EQ(e.until, step + 1);
      EXPECT_DOUBLE_EQ(e.scale, ClipScale(e.ref_norm, e.norm, e.clip_min_scale));
      denied_clip_steps.push_back(step);
      denied_clip_scales.push_back(e.scale);
    }
    EXPECT_TRUE(daemon->Ack(d).ok());
    EXPECT_TRUE(local->Ack(l).ok());
  }
  EXPECT_GT(with_entries, 10) << "the spikes must put units in recovery";
  EXPECT_GE(skipped, 1) << "the NaN step must be skipped";
  if (clip_denied) {
    // Units 2 and 3 spike together at step 40 with max_o 1: the one left
    // out is clipped at that step (a 30x spike: scaled well below 1).
    ASSERT_FALSE(denied_clip_steps.empty());
    EXPECT_EQ(denied_clip_steps.front(), 40);
    EXPECT_LT(denied_clip_scales.front(), 0.2);
  } else {
    EXPECT_TRUE(denied_clip_steps.empty());
  }

  // The exported controller states, byte for byte, once both have decided
  // the last step.
  ASSERT_TRUE(daemon->Flush(milliseconds(10000)));
  ASSERT_TRUE(local->Flush(milliseconds(10000)));
  ASSERT_TRUE(Eventually([&] { return daemon->Counters().last_decided_step == kSteps - 1; },
                         std::chrono::seconds(10)));
  EXPECT_EQ(local->Counters().last_decided_step, kSteps - 1);
  StatusOr<std::string> ds = daemon->ExportState(milliseconds(10000));
  StatusOr<std::string> ls = local->ExportState(milliseconds(10000));
  ASSERT_TRUE(ds.ok() && ls.ok());
  EXPECT_EQ(*ds, *ls);

  // The same decision events, in the same order (the daemon writes its log
  // in the background: wait for all of them).
  const std::vector<v1::Event> mine = DecisionEvents(events);
  EXPECT_GE(mine.size(), 4u);  // admissions, a denial, a release, a skip or nonfinite
  size_t clip_events = 0;
  for (const v1::Event& e : mine) clip_events += e.kind() == v1::EVENT_KIND_DENIED_CLIP;
  EXPECT_EQ(clip_events, denied_clip_steps.size());
  std::vector<v1::Event> theirs;
  ASSERT_TRUE(Eventually(
      [&] {
        const std::string path = FindFile(gnmrd.state_dir(), "events.jsonl", job);
        theirs = path.empty() ? std::vector<v1::Event>() : DecisionEvents(path);
        return theirs.size() >= mine.size();
      },
      std::chrono::seconds(10)));
  ASSERT_EQ(theirs.size(), mine.size());
  for (size_t i = 0; i < mine.size(); ++i) {
    std::string a, b;
    AppendEventJsonLine(job, theirs[i], &a);
    AppendEventJsonLine(job, mine[i], &b);
    EXPECT_EQ(a, b);
  }
  const ClientCounters k = local->Counters();
  EXPECT_EQ(k.decisions_received, static_cast<uint64_t>(kSteps));
  EXPECT_EQ(k.decisions_rejected, 0u);
  EXPECT_EQ(k.missed_decisions, 0u);
  EXPECT_EQ(k.reports_sent, static_cast<uint64_t>(kSteps));
}

INSTANTIATE_TEST_SUITE_P(Lags, LocalVsGnmrd,
                         ::testing::Values(Variant{0, DeniedTreatment::kNone},
                                           Variant{1, DeniedTreatment::kNone},
                                           Variant{0, DeniedTreatment::kClip}),
                         [](const ::testing::TestParamInfo<Variant>& info) {
                           return "lag" + std::to_string(info.param.lag) +
                                  (info.param.denied == DeniedTreatment::kClip ? "_denied_clip"
                                                                               : "");
                         });

TEST(LocalMode, RefusesShardedUnitsPointingToGnmrd) {
  auto c = std::move(Client::Create(LocalOptions("sharded"))).value();
  std::vector<float> g(16);
  const TensorRef t = HostRef(g);
  StatusOr<UnitHandle> h = c->AddUnit("tp.fc", {t}, 0, 2);
  ASSERT_FALSE(h.ok());
  EXPECT_EQ(h.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(h.status().message().find("gnmrd"), std::string::npos) << h.status().message();
  EXPECT_NE(h.status().message().find("shard 0 of 2"), std::string::npos);
  EXPECT_TRUE(c->AddUnit("tp.fc", {t}).ok());  // unsharded: fine
}

TEST(LocalMode, SetUpErrorsAreLoud) {
  ClientOptions o = LocalOptions("bad");
  ControllerConfig bad;
  bad.max_o = -1;
  o.config = bad;
  StatusOr<std::unique_ptr<Client>> c = Client::Create(o);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(c.status().message().find("max_o"), std::string::npos) << c.status().message();

  o.config.reset();
  o.local_events_path = "/nonexistent-dir/events.jsonl";
  c = Client::Create(o);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(c.status().message().find("/nonexistent-dir/events.jsonl"), std::string::npos);

  o.local_events_path.clear();
  c = Client::Create(o);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ((*c)->ImportState("x", milliseconds(100)).status().code(),
            StatusCode::kFailedPrecondition);  // before Start: no units yet
}

// A checkpoint taken at step 49 and loaded by a fresh local client gives the
// plans of the uninterrupted run; so does a state exported by gnmrd.
TEST(LocalMode, StateRoundTripsAndResumesBitIdentically) {
  testing::GnmrdProcess gnmrd;
  ASSERT_TRUE(gnmrd.Start());
  Gradients grads;
  auto run = MakeClient("local", "resume", TestConfig(1), &grads);
  auto daemon = MakeClient(gnmrd.target(), "resume", TestConfig(1), &grads);
  ASSERT_TRUE(daemon->WaitConnected(milliseconds(10000)).ok());
  constexpr int64_t kCut = 50;
  for (int64_t step = 0; step < kCut; ++step) {
    grads.Fill(step);
    ASSERT_TRUE(run->Observe(step).ok());
    ASSERT_TRUE(daemon->Observe(step).ok());
    run->PlanFor(step);
    daemon->PlanFor(step);
  }
  ASSERT_TRUE(run->Flush(milliseconds(10000)));
  ASSERT_TRUE(daemon->Flush(milliseconds(10000)));
  ASSERT_TRUE(Eventually([&] { return daemon->Counters().last_decided_step == kCut - 1; },
                         std::chrono::seconds(10)));
  StatusOr<std::string> saved = run->ExportState(milliseconds(1000));
  StatusOr<std::string> from_daemon = daemon->ExportState(milliseconds(10000));
  ASSERT_TRUE(saved.ok() && from_daemon.ok());

  auto resumed = MakeClient("local", "resume", TestConfig(1), &grads);
  auto adopted = MakeClient("local", "resume2", TestConfig(1), &grads);
  StatusOr<uint64_t> g1 = resumed->ImportState(*saved, milliseconds(1000));
  StatusOr<uint64_t> g2 = adopted->ImportState(*from_daemon, milliseconds(1000));
  ASSERT_TRUE(g1.ok()) << g1.status().ToString();
  ASSERT_TRUE(g2.ok()) << g2.status().ToString();
  EXPECT_EQ(*g1, 2u);
  EXPECT_EQ(resumed->Counters().generation, 2u);
  int with_entries = 0;
  for (int64_t step = kCut; step < 80; ++step) {
    grads.Fill(step);
    ASSERT_TRUE(run->Observe(step).ok());
    ASSERT_TRUE(resumed->Observe(step).ok());
    ASSERT_TRUE(adopted->Observe(step).ok());
    const Plan a = run->PlanFor(step);
    Plan b = resumed->PlanFor(step);
    Plan c = adopted->PlanFor(step);
    ASSERT_TRUE(b.has_decision) << "step " << step;
    // The generation differs (the import started one); all else is equal.
    b.generation = a.generation;
    c.generation = a.generation;
    ExpectSamePlan(a, b);
    ExpectSamePlan(a, c);
    with_entries += !a.entries.empty();
  }
  EXPECT_GT(with_entries, 0);

  // A state of other units is refused and changes nothing.
  auto other = std::move(Client::Create(LocalOptions("other"))).value();
  std::vector<float> g(8);
  ASSERT_TRUE(other->AddUnit("something.else", {HostRef(g)}).ok());
  ASSERT_TRUE(other->Start().ok());
  StatusOr<uint64_t> refused = other->ImportState(*saved, milliseconds(1000));
  EXPECT_EQ(refused.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(other->Counters().generation, 1u);
  EXPECT_EQ(other->ImportState("not a state", milliseconds(1000)).status().code(),
            StatusCode::kInvalidArgument);
}

TEST(LocalMode, EnableLocalTargetIsIdempotent) {
  EnableLocalTarget();
  EnableLocalTarget();
  gnmr_enable_local_target();
  EXPECT_TRUE(Client::Create(LocalOptions("idem")).ok());
}

// The C API reaches the same transport: target "local" and its events file.
TEST(LocalMode, CApiRunsLocallyAndWritesEvents) {
  char tmpl[] = "/tmp/gnmr-local-c-XXXXXX";
  const std::string dir = ::mkdtemp(tmpl);
  const std::string events = dir + "/events.jsonl";
  gnmr_options o;
  gnmr_options_init(&o);
  o.target = "local";
  o.job_id = "c-local";
  o.local_events_path = events.c_str();
  gnmr_client* c = nullptr;
  ASSERT_EQ(gnmr_client_create(&o, &c), GNMR_OK) << gnmr_last_error();
  std::vector<float> g(64, 0.5f);
  gnmr_tensor t{};
  t.data = g.data();
  t.numel = g.size();
  t.dtype = GNMR_DTYPE_FP32;
  ASSERT_EQ(gnmr_add_unit(c, "fc", &t, 1, 0, 1, nullptr), GNMR_OK) << gnmr_last_error();
  ASSERT_EQ(gnmr_start(c), GNMR_OK);
  gnmr_plan* plan = gnmr_plan_new();
  bool admitted = false;
  for (int64_t step = 0; step < 30; ++step) {
    g[0] = step == 20 ? std::numeric_limits<float>::infinity() : 0.5f;
    ASSERT_EQ(gnmr_observe(c, step), GNMR_OK);
    ASSERT_EQ(gnmr_plan_for(c, step, plan), GNMR_OK);
    gnmr_plan_info info;
    ASSERT_EQ(gnmr_plan_info_get(plan, &info), GNMR_OK);
    EXPECT_EQ(info.has_decision != 0, step >= 1) << step;  // default lag 1
    admitted = admitted || info.num_entries > 0;
    if (info.num_entries > 0) {
      gnmr_entry_reason why{};
      ASSERT_EQ(gnmr_plan_entry_reason(plan, 0, &why), GNMR_OK) << gnmr_last_error();
      EXPECT_EQ(why.trigger, GNMR_TRIGGER_NONFINITE);
      EXPECT_EQ(why.gnmr, 0.0);  // no GNMR for a non-finite sample
      EXPECT_EQ(gnmr_plan_entry_reason(plan, info.num_entries, &why), GNMR_EOUT_OF_RANGE);
      EXPECT_EQ(gnmr_plan_entry_reason(plan, 0, nullptr), GNMR_EINVALID_ARGUMENT);
    }
  }
  gnmr_plan_free(plan);
  gnmr_client_destroy(c);
  EXPECT_TRUE(admitted) << "the Inf at step 20 is a nonfinite admission";
  const std::string text = testing::ReadText(events);
  EXPECT_NE(text.find("\"kind\":\"admission\""), std::string::npos) << text;
  EXPECT_NE(text.find("\"trigger\":\"nonfinite\""), std::string::npos) << text;
  std::filesystem::remove_all(dir);
}

// Stop: the training thread goes on, fail-open, without waiting.
TEST(LocalMode, StoppedClientFailsOpen) {
  Gradients grads;
  auto c = MakeClient("local", "stop", TestConfig(1), &grads);
  grads.Fill(0);
  ASSERT_TRUE(c->Observe(0).ok());
  c->Stop();
  grads.Fill(1);
  EXPECT_TRUE(c->Observe(1).ok());
  const Plan p = c->PlanFor(1);
  EXPECT_FALSE(p.has_decision && p.observed_step == 1);
  EXPECT_FALSE(c->Counters().connected);
}

}  // namespace
}  // namespace gnmr
