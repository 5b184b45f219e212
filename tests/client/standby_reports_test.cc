// StandbyReports' notes (client/src/standby_reports.h): each ack says what
// the standby held back last; the figures ride along at most every
// kFiguresEvery, summed in between, and leave the held reports.
#include "client/src/standby_reports.h"

#include <gtest/gtest.h>

#include "proto/report_fingerprint.h"

namespace gnmr {
namespace {

using Clock = std::chrono::steady_clock;

v1::StepStats Report(int64_t step, double sumsq, double seconds) {
  v1::StepStats s;
  s.set_step(step);
  s.add_unit_id(0);
  s.add_sumsq(sumsq);
  s.mutable_overhead()->set_stats_seconds(seconds);
  s.mutable_overhead()->set_overhead_ratio(0.01 * static_cast<double>(step));
  s.mutable_overhead()->set_dropped_reports(static_cast<uint64_t>(step));
  return s;
}

TEST(StandbyReportsTest, NotesCarryTheNewestFingerprintAndFiguresEveryFewSeconds) {
  StandbyReports standby(8);
  ASSERT_TRUE(standby.SetRole(true, 0) == false);
  v1::StandbyNote note;
  const Clock::time_point t0 = Clock::now();
  EXPECT_FALSE(standby.TakeNote(t0, &note));  // nothing held yet

  standby.Hold(Report(1, 4.0, 0.25));
  ASSERT_TRUE(standby.TakeNote(t0, &note));
  EXPECT_EQ(note.step(), 1);
  EXPECT_EQ(note.fingerprint(), ReportFingerprint(Report(1, 4.0, 0.0)));
  ASSERT_TRUE(note.has_overhead());  // the first figures go at once
  EXPECT_EQ(note.overhead().stats_seconds(), 0.25);
  EXPECT_FALSE(standby.TakeNote(t0, &note));  // taken

  // Two more reports within kFiguresEvery: fingerprints each time, the
  // figures once the interval passed, with the seconds of both.
  standby.Hold(Report(2, 5.0, 0.5));
  ASSERT_TRUE(standby.TakeNote(t0 + std::chrono::seconds(1), &note));
  EXPECT_EQ(note.step(), 2);
  EXPECT_FALSE(note.has_overhead());
  standby.Hold(Report(3, 6.0, 0.125));
  ASSERT_TRUE(standby.TakeNote(t0 + StandbyReports::kFiguresEvery, &note));
  EXPECT_EQ(note.step(), 3);
  EXPECT_EQ(note.fingerprint(), ReportFingerprint(Report(3, 6.0, 0.0)));
  ASSERT_TRUE(note.has_overhead());
  EXPECT_EQ(note.overhead().stats_seconds(), 0.625);
  EXPECT_DOUBLE_EQ(note.overhead().overhead_ratio(), 0.03);  // the newest
  EXPECT_EQ(note.overhead().dropped_reports(), 3u);          // cumulative: the newest

  // Elected: the held reports go out without the seconds the notes counted.
  ASSERT_TRUE(standby.SetRole(false, 2));
  const std::vector<v1::StepStats> wanted = standby.TakeWanted();
  ASSERT_EQ(wanted.size(), 2u);
  EXPECT_EQ(wanted[0].step(), 2);
  EXPECT_EQ(wanted[0].overhead().stats_seconds(), 0.0);
  EXPECT_DOUBLE_EQ(wanted[0].overhead().overhead_ratio(), 0.02);
}

}  // namespace
}  // namespace gnmr
