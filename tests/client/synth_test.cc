// gnmr-synth: its command line, its model (layout, determinism across
// replicas, norm fluctuation), and the binary itself against an in-process
// daemon (two ranks apply the same decisions).
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <map>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "daemon/server/daemon.h"
#include "examples/gnmr_synth/synth_flags.h"
#include "examples/gnmr_synth/synth_model.h"
#include "kernels/cpu_stats.h"

namespace gnmr::synth {
namespace {

const std::vector<std::string> kRequired = {
    "--target", "unix:/x", "--job", "j", "--rank", "1", "--world-size", "2", "--steps", "10"};

std::vector<std::string> With(std::vector<std::string> extra) {
  std::vector<std::string> a = kRequired;
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

TEST(SynthFlags, ParsesTheStableInterface) {
  StatusOr<Flags> f = ParseFlags(
      With({"--units", "8", "--spike", "5:3:25", "--spike=7:layers.1.mlp.fc1:0.5", "--nan", "9:2",
            "--step-ms=4", "--decision-wait-ms", "100", "--token", "t", "--json"}));
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(f->target, "unix:/x");
  EXPECT_EQ(f->rank, 1u);
  EXPECT_EQ(f->world_size, 2u);
  EXPECT_EQ(f->steps, 10);
  EXPECT_EQ(f->units, 8u);
  ASSERT_EQ(f->spikes.size(), 2u);
  EXPECT_EQ(f->spikes[1].unit, "layers.1.mlp.fc1");
  EXPECT_EQ(f->spikes[1].factor, 0.5);
  ASSERT_EQ(f->nans.size(), 1u);
  EXPECT_EQ(f->nans[0].step, 9);
  EXPECT_EQ(f->step_ms, 4);
  EXPECT_EQ(f->decision_wait_ms, 100);
  EXPECT_TRUE(f->json);
  EXPECT_TRUE(ParseFlags({"--help"})->help);
}

TEST(SynthFlags, RejectsBadCommandLines) {
  EXPECT_FALSE(ParseFlags({}).ok());
  EXPECT_FALSE(
      ParseFlags({"--target", "x", "--job", "j", "--rank", "0", "--world-size", "1"}).ok());
  EXPECT_FALSE(ParseFlags(With({"--units", "0"})).ok());
  EXPECT_FALSE(ParseFlags(With({"--spike", "5:3"})).ok());
  EXPECT_FALSE(ParseFlags(With({"--spike", "x:3:2"})).ok());
  EXPECT_FALSE(ParseFlags(With({"--spike", "5:3:inf"})).ok());
  EXPECT_FALSE(ParseFlags(With({"--nan", "5"})).ok());
  EXPECT_FALSE(ParseFlags(With({"--bogus", "1"})).ok());
  EXPECT_FALSE(ParseFlags(With({"--steps"})).ok());
  EXPECT_FALSE(ParseFlags(With({"--step-ms", "-1"})).ok());
  EXPECT_FALSE(ParseFlags({"--target", "x", "--job", "j", "--rank", "2", "--world-size", "2",
                           "--steps", "1"})
                   .ok());
}

TEST(SynthModel, LayoutShardsWhenTheWorldIsEven) {
  const std::vector<UnitLayout> even = MakeLayout(8, 3, 4);
  ASSERT_EQ(even.size(), 8u);
  EXPECT_EQ(even[0].name, "layers.0.attn.qkv");
  EXPECT_EQ(even[6].name, "layers.1.mlp.fc1");
  EXPECT_EQ(even[0].shard_count, 2u);
  EXPECT_EQ(even[0].shard_index, 1u);
  EXPECT_EQ(even[0].tensor_numel[0], 3072u);
  EXPECT_EQ(even[1].shard_count, 1u);
  EXPECT_EQ(even[1].dtype, DType::kBf16);
  EXPECT_EQ(even[2].tensor_numel.size(), 2u);  // weight + bias
  const std::vector<UnitLayout> odd = MakeLayout(5, 0, 3);
  EXPECT_EQ(odd[0].shard_count, 1u);
  EXPECT_EQ(odd[0].tensor_numel[0], 6144u);
  EXPECT_EQ(*ResolveUnit(odd, "4"), 4u);
  EXPECT_EQ(*ResolveUnit(odd, "layers.0.mlp.fc2"), 3u);
  EXPECT_FALSE(ResolveUnit(odd, "5").ok());
  EXPECT_FALSE(ResolveUnit(odd, "layers.9.mlp.fc2").ok());
}

double Sumsq(const SyntheticModel& m, uint32_t unit) {
  const std::vector<TensorRef> t = m.Tensors(unit);
  UnitStats s;
  EXPECT_TRUE(cpu::ComputeStats(t.data(), t.size(), &s).ok());
  return s.sumsq;
}

TEST(SynthModel, ReplicasMatchShardsDifferNormsFluctuate) {
  // Ranks 0 and 2 of 4 hold the same shards; rank 1 the other half.
  SyntheticModel r0(MakeLayout(4, 0, 4), 42), r2(MakeLayout(4, 2, 4), 42),
      r1(MakeLayout(4, 1, 4), 42);
  std::vector<double> norms;
  for (int64_t step = 0; step < 200; ++step) {
    r0.Produce(step);
    r2.Produce(step);
    r1.Produce(step);
    for (uint32_t u = 0; u < 4; ++u) ASSERT_EQ(Sumsq(r0, u), Sumsq(r2, u));
    EXPECT_NE(Sumsq(r0, 0), Sumsq(r1, 0));  // sharded: different halves
    EXPECT_EQ(Sumsq(r0, 1), Sumsq(r1, 1));  // replicated everywhere
    norms.push_back(std::sqrt(Sumsq(r0, 3)));
  }
  double mean = 0, var = 0;
  for (double n : norms) mean += n / norms.size();
  for (double n : norms) var += (n - mean) * (n - mean) / norms.size();
  const double cv = std::sqrt(var) / mean;
  EXPECT_GT(cv, 0.04);
  EXPECT_LT(cv, 0.10);
  r0.Scale(3, 10.0);
  EXPECT_NEAR(std::sqrt(Sumsq(r0, 3)) / norms.back(), 10.0, 1e-3);
  r0.PutNan(1);
  EXPECT_TRUE(std::isnan(Sumsq(r0, 1)));
  r0.Zero(2);
  EXPECT_EQ(Sumsq(r0, 2), 0.0);
}

// Runs a command, returns (exit status, stdout).
std::pair<int, std::string> RunCommand(const std::string& cmd) {
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return {-1, out};
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int status = pclose(p);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

// The "applied" list of a JSON summary: step -> digest.
std::map<int64_t, std::string> Applied(const std::string& json) {
  std::map<int64_t, std::string> out;
  const std::regex item("\\{\"step\":(\\d+),\"digest\":\"([0-9a-f]+)\"\\}");
  for (std::sregex_iterator it(json.begin(), json.end(), item), end; it != end; ++it) {
    out[std::stoll((*it)[1].str())] = (*it)[2].str();
  }
  return out;
}

// Runs ranks 0 and 1 of `cmd` (rank 1 `delay_ms` later); their results.
std::vector<std::pair<int, std::string>> RunTwoRanks(const std::string& cmd, int delay_ms) {
  std::vector<std::pair<int, std::string>> results(2);
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r) {
    ranks.emplace_back([&, r] {
      if (r == 1) std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
      results[r] = RunCommand(cmd + " --rank " + std::to_string(r));
    });
  }
  for (auto& t : ranks) t.join();
  return results;
}

// Both ranks ran to the end and, at every step both applied a decision,
// applied the same one; the last `tail` steps have it on both.
void CheckSamePlans(const std::vector<std::pair<int, std::string>>& results, int64_t steps,
                    int64_t tail) {
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(results[r].first, 0) << results[r].second;
    EXPECT_NE(results[r].second.find("\"rank\":" + std::to_string(r)), std::string::npos);
    EXPECT_NE(results[r].second.find("\"steps\":" + std::to_string(steps)), std::string::npos);
    EXPECT_NE(results[r].second.find("\"decisions_rejected\":0"), std::string::npos);
    EXPECT_EQ(results[r].second.find("\"promoted_unit_steps\":0,"), std::string::npos)
        << results[r].second;
  }
  const std::map<int64_t, std::string> a0 = Applied(results[0].second);
  const std::map<int64_t, std::string> a1 = Applied(results[1].second);
  int64_t common = 0;
  for (const auto& [step, digest] : a0) {
    auto it = a1.find(step);
    if (it == a1.end()) continue;
    ++common;
    EXPECT_EQ(digest, it->second) << "step " << step;
  }
  for (int64_t step = steps - tail; step < steps; ++step) {
    EXPECT_TRUE(a0.count(step) && a1.count(step)) << "step " << step;
  }
  EXPECT_GE(common, tail);
}

TEST(SynthBinary, ExitCodesAndTwoRanksAgainstADaemon) {
  const std::string bin = GNMR_SYNTH_BINARY;
  EXPECT_EQ(RunCommand(bin + " --help").first, 0);
  EXPECT_EQ(RunCommand(bin + " --steps 3 2>/dev/null").first, 2);
  EXPECT_EQ(RunCommand(bin + " --target unix:/x --job j --rank 0 --world-size 1 --steps 1 "
                             "--nan 0:99 2>/dev/null")
                .first,
            2);

  const std::string path = "/tmp/gnmr_synth_test_" + std::to_string(getpid()) + ".sock";
  DaemonOptions d;
  d.listen = {"unix:" + path};
  auto daemon = Daemon::Start(d, nullptr, AdminContext());
  ASSERT_TRUE(daemon.ok()) << daemon.status().ToString();
  const std::string base = bin + " --target unix:" + path +
                           " --world-size 2 --units 8 --json --step-ms 2"
                           " --spike 70:layers.0.mlp.fc2:40 --spike 250:layers.1.mlp.fc2:40";
  const auto together = RunTwoRanks(base + " --job synth --steps 100 2>/dev/null", 0);
  // Started 300 ms apart (rank 0 is ~150 steps ahead): the late rank's
  // first steps were decided before it attached and have no plan there;
  // then the daemon holds rank 0 back until both report each step.
  const auto apart = RunTwoRanks(base + " --job synth-apart --steps 400 2>/dev/null", 300);
  (*daemon)->Shutdown(std::chrono::milliseconds(200));
  CheckSamePlans(together, 100, 95);
  CheckSamePlans(apart, 400, 200);
}

}  // namespace
}  // namespace gnmr::synth
