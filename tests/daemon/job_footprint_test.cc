// What a job reserves of the memory budget as ranks register
// (docs/limits.md, "Memory"): replicas that share a layout are charged for
// it once, and with `report: one_per_shard` only one replica per group is
// charged for the reports it sends.
#include <cstdint>
#include <memory>
#include <string>

#include <gtest/gtest.h>

#include "daemon/job/job.h"
#include "tests/daemon/quiet_listener.h"

namespace gnmr::testing {
namespace {

constexpr uint32_t kRanks = 16;
constexpr int kUnits = 100;

v1::RegisterRequest RegisterOf(uint32_t rank, bool reversed = false) {
  v1::RegisterRequest req;
  req.set_job_id("job");
  req.set_rank(rank);
  req.set_world_size(kRanks);
  req.set_client_version("test");
  req.set_can_stand_by(true);
  for (int i = 0; i < kUnits; ++i) {
    const int u = reversed ? kUnits - 1 - i : i;
    v1::UnitSpec* s = req.add_units();
    s->set_name("u" + std::to_string(u));
    s->set_numel(10);
  }
  return req;
}

uint64_t NameBytes() {
  uint64_t n = 0;
  for (int u = 0; u < kUnits; ++u) n += ("u" + std::to_string(u)).size();
  return n;
}

struct Fixture {
  explicit Fixture(ReportMode mode, uint64_t budget = uint64_t{1} << 30) {
    options.budget = std::make_shared<MemoryBudget>(budget);
    config.report = mode;
    StatusOr<std::unique_ptr<Job>> j = Job::Create("job", kRanks, "", config, options, &listener);
    EXPECT_TRUE(j.ok()) << j.status().ToString();
    job = std::move(j).value();
    empty = options.budget->used();
  }
  // What the job should reserve beyond its empty self for `ranks` ranks of
  // kUnits units with these layout entries and reported rank-units: the
  // formula's difference, so the terms every shape shares cancel.
  uint64_t Expected(uint64_t ranks, uint64_t layout_entries, uint64_t reported) const {
    JobCaps caps = options.caps;
    caps.max_open_step_bytes = options.aggregation.max_open_bytes;
    caps.decision_history_bytes = options.decision_history_bytes;
    JobShape s;
    s.window = static_cast<uint64_t>(config.short_window);
    s.max_o = static_cast<uint64_t>(config.max_o);
    const uint64_t none = JobFootprint(s, caps);
    s.units = kUnits;
    s.name_bytes = NameBytes();
    s.slots = kUnits;
    s.rank_units = ranks * kUnits;
    s.ranks = ranks;
    s.layout_entries = layout_entries;
    s.reported_rank_units = reported;
    return JobFootprint(s, caps) - none;
  }
  uint64_t Reserved() const { return options.budget->used() - empty; }

  QuietListener listener;
  JobOptions options;
  ControllerConfig config;
  std::unique_ptr<Job> job;
  uint64_t empty = 0;
};

TEST(JobFootprint, ReplicasAreChargedForOneLayoutAndEveryRanksReportsWithReportAll) {
  Fixture f(ReportMode::kAll);
  for (uint32_t r = 0; r < kRanks; ++r) ASSERT_TRUE(f.job->Register(RegisterOf(r)).ok());
  EXPECT_EQ(f.Reserved(), f.Expected(kRanks, kUnits, kRanks * kUnits));
}

TEST(JobFootprint, OnePerShardIsChargedForOneReporterPerGroup) {
  Fixture f(ReportMode::kOnePerShard);
  for (uint32_t r = 0; r < kRanks; ++r) ASSERT_TRUE(f.job->Register(RegisterOf(r)).ok());
  EXPECT_EQ(f.Reserved(), f.Expected(kRanks, kUnits, kUnits));
  Fixture all(ReportMode::kAll);
  for (uint32_t r = 0; r < kRanks; ++r) ASSERT_TRUE(all.job->Register(RegisterOf(r)).ok());
  EXPECT_LT(f.Reserved(), all.Reserved());

  // A replica registering the same units in another order holds a layout
  // of its own, and is charged for it; back in order, no longer.
  ASSERT_TRUE(f.job->Register(RegisterOf(3, /*reversed=*/true)).ok());
  EXPECT_EQ(f.Reserved(), f.Expected(kRanks, 2 * kUnits, 2 * kUnits));
  ASSERT_TRUE(f.job->Register(RegisterOf(3)).ok());
  EXPECT_EQ(f.Reserved(), f.Expected(kRanks, kUnits, kUnits));
}

TEST(JobFootprint, SwitchingToReportAllIsRefusedWhenTheBudgetCannotHoldEveryRanksReports) {
  // A budget that holds the job with one reporter per group, not with 16.
  // A registration reserves for a moment as if its layout were not shared
  // (that is known only once it is built), hence the room for one more.
  Fixture probe(ReportMode::kOnePerShard);
  const uint64_t fits = probe.empty + probe.Expected(kRanks, 2 * kUnits, 2 * kUnits);
  const uint64_t all = probe.empty + probe.Expected(kRanks, kUnits, kRanks * kUnits);
  ASSERT_LT(fits, all);
  Fixture f(ReportMode::kOnePerShard, fits);
  for (uint32_t r = 0; r < kRanks; ++r) {
    ASSERT_TRUE(f.job->Register(RegisterOf(r)).ok()) << "rank " << r;
  }
  ControllerConfig every = f.job->config();
  every.report = ReportMode::kAll;
  const Status s = f.job->SetConfig(every);
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted) << s.ToString();
  EXPECT_NE(s.message().find("memory_budget"), std::string::npos) << s.message();
  EXPECT_EQ(f.job->config().report, ReportMode::kOnePerShard);
  EXPECT_EQ(f.Reserved(), f.Expected(kRanks, kUnits, kUnits));
}

}  // namespace
}  // namespace gnmr::testing
