// OverheadAccountant fed with synthetic kernel activity records, as a CUPTI
// profiler would deliver them: ratio, step attribution across streams, late
// and out-of-order records, lost records.
#include "client/src/overhead_accountant.h"

#include <vector>

#include <gtest/gtest.h>

namespace gnmr {
namespace {

// Statistics launch of `step`: one kernel [start, end) tagged with `corr`.
void StatsLaunch(OverheadAccountant* a, int64_t step, uint32_t corr, uint64_t start, uint64_t end) {
  a->Add({KernelActivity{start, end, corr}}, {StatsCorrelation{corr, step}});
}

std::vector<StepOverhead> Drain(OverheadAccountant* a) {
  std::vector<StepOverhead> out;
  StepOverhead o;
  while (a->Next(&o)) out.push_back(o);
  return out;
}

TEST(OverheadAccountantTest, RatioOfStatsToAllKernelsPerStep) {
  OverheadAccountant a;
  // Step 0 opens the first window (no ratio); kernels before it are ignored.
  a.Add({{0, 500, 1}}, {});
  StatsLaunch(&a, 0, 100, 900, 1000);
  // Step 1: two training kernels (800 ns) + statistics (200 ns).
  a.Add({{1100, 1500, 2}, {1500, 1900, 3}}, {});
  StatsLaunch(&a, 1, 101, 1900, 2100);
  // Step 2: training 600 + statistics 200 on a second stream overlapping.
  a.Add({{2200, 2800, 4}}, {});
  StatsLaunch(&a, 2, 102, 2800, 3000);
  // Final only after kSettleSteps later boundaries: step 0 is final now
  // (no output), step 1 needs step 3.
  EXPECT_TRUE(Drain(&a).empty());
  StatsLaunch(&a, 3, 103, 3100, 3200);
  std::vector<StepOverhead> got = Drain(&a);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].step, 1);
  EXPECT_TRUE(got[0].valid);
  EXPECT_DOUBLE_EQ(got[0].ratio, 200.0 / 1000.0);
  EXPECT_DOUBLE_EQ(got[0].stats_gpu_seconds, 200e-9);
  EXPECT_DOUBLE_EQ(got[0].total_gpu_seconds, 1000e-9);
  StatsLaunch(&a, 4, 104, 3300, 3400);
  got = Drain(&a);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].step, 2);
  EXPECT_DOUBLE_EQ(got[0].ratio, 200.0 / 800.0);
}

TEST(OverheadAccountantTest, KernelsGoToTheStepTheyEndInAcrossStreams) {
  OverheadAccountant a;
  StatsLaunch(&a, 10, 1, 0, 100);
  // A long kernel on another stream starts in step 11's window and ends in
  // step 12's: all of it counts for step 12.
  a.Add({{150, 450, 50}, {120, 200, 51}}, {});
  StatsLaunch(&a, 11, 2, 300, 400);
  StatsLaunch(&a, 12, 3, 500, 600);
  StatsLaunch(&a, 13, 4, 700, 800);
  StatsLaunch(&a, 14, 5, 900, 1000);
  std::vector<StepOverhead> got = Drain(&a);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].step, 11);
  EXPECT_DOUBLE_EQ(got[0].ratio, 100.0 / (100.0 + 80.0));
  EXPECT_EQ(got[1].step, 12);
  EXPECT_DOUBLE_EQ(got[1].ratio, 100.0 / (100.0 + 300.0));
}

TEST(OverheadAccountantTest, StatsLaunchOfSeveralKernelsAndLateTags) {
  OverheadAccountant a;
  StatsLaunch(&a, 0, 1, 0, 10);
  // Step 1's three statistics kernels arrive before their tags (another
  // buffer): they are recognised once the tags come.
  a.Add({{20, 60, 7}, {100, 130, 8}, {130, 150, 9}, {150, 170, 10}}, {});
  a.Add({}, {{8, 1}, {9, 1}, {10, 1}});
  StatsLaunch(&a, 2, 11, 200, 210);
  StatsLaunch(&a, 3, 12, 300, 310);
  std::vector<StepOverhead> got = Drain(&a);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].step, 1);
  EXPECT_DOUBLE_EQ(got[0].stats_gpu_seconds, 70e-9);
  EXPECT_DOUBLE_EQ(got[0].ratio, 70.0 / 110.0);
}

TEST(OverheadAccountantTest, LateRecordsAreCountedNotMisattributed) {
  OverheadAccountant a;
  for (int64_t s = 0; s < 4; ++s) {
    StatsLaunch(&a, s, static_cast<uint32_t>(s + 1), static_cast<uint64_t>(s) * 100 + 50,
                static_cast<uint64_t>(s) * 100 + 60);
  }
  ASSERT_EQ(Drain(&a).size(), 1u);  // step 1 final (window (60, 160])
  // A training kernel ending inside step 1's window arrives now: too late.
  a.Add({{100, 120, 77}}, {});
  EXPECT_EQ(a.late_records(), 1u);
  // So is a statistics kernel of a final step.
  a.Add({{55, 58, 99}}, {{99, 0}});
  EXPECT_EQ(a.late_records(), 2u);  // the tag of a final step is ignored
  StatsLaunch(&a, 4, 5, 450, 460);
  std::vector<StepOverhead> got = Drain(&a);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].step, 2);
  EXPECT_DOUBLE_EQ(got[0].ratio, 1.0);  // only its own statistics kernel
}

TEST(OverheadAccountantTest, LostRecordsMakeTheStepUnmeasured) {
  OverheadAccountant a;
  StatsLaunch(&a, 0, 1, 0, 10);
  StatsLaunch(&a, 1, 2, 100, 110);
  a.AddDropped(3);
  for (int64_t s = 2; s <= 5; ++s) {
    StatsLaunch(&a, s, static_cast<uint32_t>(s + 1), static_cast<uint64_t>(s) * 100,
                static_cast<uint64_t>(s) * 100 + 10);
  }
  // Open at the loss: steps 0 and 1; the next one (2) may miss records too.
  std::vector<StepOverhead> got = Drain(&a);
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[0].step, 1);
  EXPECT_FALSE(got[0].valid);
  EXPECT_EQ(got[1].step, 2);
  EXPECT_FALSE(got[1].valid);
  EXPECT_EQ(got[2].step, 3);
  EXPECT_TRUE(got[2].valid);
  EXPECT_EQ(a.discarded_records(), 3u);
}

TEST(OverheadAccountantTest, MemoryStaysBoundedWithoutStatsLaunches) {
  OverheadAccountant a;
  std::vector<KernelActivity> many(OverheadAccountant::kMaxKernels + 10);
  for (size_t i = 0; i < many.size(); ++i) many[i] = {i, i + 1, static_cast<uint32_t>(i)};
  a.Add(many, {});
  EXPECT_EQ(a.discarded_records(), 10u);
}

}  // namespace
}  // namespace gnmr
