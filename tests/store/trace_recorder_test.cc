// TraceRecorder: what it writes reads back through the replay's TraceReader
// bit for bit (NaN, Inf, names with commas), files are named by the escaped
// job id inside the configured directory, a file starts over (old one to
// .csv.1) when full, when steps go back and per process, the queue drops
// and reports gaps instead of growing, and removed jobs stop being written.
#include "daemon/store/trace_recorder.h"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "controller/replay/trace_reader.h"
#include "tests/store/scratch_dir.h"

namespace gnmr {
namespace store {
namespace {

using testing_util::ReadFileOrEmpty;
using testing_util::ScratchDir;

Controller MakeController(const std::vector<std::string>& names) {
  Controller c = Controller::Create(ControllerConfig()).value();
  for (const std::string& n : names) EXPECT_TRUE(c.AddUnit(n).ok());
  return c;
}

UnitSample Sample(uint32_t id, double sumsq) {
  UnitSample s;
  s.unit_id = id;
  s.sumsq = sumsq;
  s.amax = std::isfinite(sumsq) ? std::sqrt(sumsq) / 3.0 : 0.5;  // over finite values
  s.nonfinite = id;
  s.zeros = 2 * id;
  s.numel = 1000 + id;
  // Forward statistics on every other unit (fwd_numel 0: none).
  if (id % 2 == 0) {
    s.fwd_sumsq = std::isfinite(sumsq) ? sumsq * 3.0 : sumsq;
    s.fwd_amax = 448.0;
    s.fwd_saturated = 1 + id;
    s.fwd_zeros = 7;
    s.fwd_numel = 4096;
    s.fwd_order = ForwardOrderKey(id, 1 + id);
    if (id % 4 == 0) {  // block-scaled on every other of them
      s.fwd_blocks = 128;
      s.fwd_saturated_blocks = 1 + id % 3;
      s.fwd_dead_blocks = id % 5;
      s.fwd_scale_clamps = 2;
      if (id % 8 == 0) {  // and observed with its source on every other of those
        s.fwd_source_numel = 4096;
        s.fwd_underflow = 3 + id;
        s.fwd_error_sumsq = 1.0 / 7.0;
        s.fwd_source_sumsq = 1e3 / 3.0;
      }
    }
  }
  if (id % 3 == 0) {  // backward statistics on every third unit
    s.bwd_sumsq = std::isfinite(sumsq) ? sumsq / 7.0 : sumsq;
    s.bwd_saturated = id % 4;
    s.bwd_zeros = 11 + id % 100;
    s.bwd_numel = 2048;
    s.bwd_order = BackwardOrderKey(id % 3, 1 + id);
  }
  return s;
}

// Every field of the samples, NaN equal to NaN, other doubles bit for bit.
void ExpectSameSample(const UnitSample& got, const UnitSample& want) {
  auto same = [](double a, double b) { return std::isnan(a) ? std::isnan(b) : a == b; };
  EXPECT_TRUE(same(got.sumsq, want.sumsq)) << got.sumsq << " " << want.sumsq;
  EXPECT_EQ(got.amax, want.amax);
  EXPECT_EQ(got.nonfinite, want.nonfinite);
  EXPECT_EQ(got.zeros, want.zeros);
  EXPECT_EQ(got.numel, want.numel);
  EXPECT_TRUE(same(got.fwd_sumsq, want.fwd_sumsq)) << got.fwd_sumsq << " " << want.fwd_sumsq;
  EXPECT_EQ(got.fwd_amax, want.fwd_amax);
  EXPECT_EQ(got.fwd_saturated, want.fwd_saturated);
  EXPECT_EQ(got.fwd_zeros, want.fwd_zeros);
  EXPECT_EQ(got.fwd_numel, want.fwd_numel);
  EXPECT_EQ(got.fwd_order, want.fwd_order);
  EXPECT_EQ(got.fwd_blocks, want.fwd_blocks);
  EXPECT_EQ(got.fwd_saturated_blocks, want.fwd_saturated_blocks);
  EXPECT_EQ(got.fwd_dead_blocks, want.fwd_dead_blocks);
  EXPECT_EQ(got.fwd_scale_clamps, want.fwd_scale_clamps);
  EXPECT_EQ(got.fwd_source_numel, want.fwd_source_numel);
  EXPECT_EQ(got.fwd_underflow, want.fwd_underflow);
  EXPECT_EQ(got.fwd_error_sumsq, want.fwd_error_sumsq);
  EXPECT_EQ(got.fwd_source_sumsq, want.fwd_source_sumsq);
  EXPECT_TRUE(same(got.bwd_sumsq, want.bwd_sumsq)) << got.bwd_sumsq << " " << want.bwd_sumsq;
  EXPECT_EQ(got.bwd_saturated, want.bwd_saturated);
  EXPECT_EQ(got.bwd_zeros, want.bwd_zeros);
  EXPECT_EQ(got.bwd_numel, want.bwd_numel);
  EXPECT_EQ(got.bwd_order, want.bwd_order);
}

struct ReadStep {
  int64_t step;
  std::vector<std::pair<std::string, UnitSample>> rows;
};

std::vector<ReadStep> ReadTrace(const std::string& path) {
  TraceReader r;
  Status s = r.OpenFile(path);
  EXPECT_TRUE(s.ok()) << s.message();
  std::vector<ReadStep> out;
  TraceStep step;
  bool got = s.ok();
  while (got) {
    s = r.Next(&step, &got);
    EXPECT_TRUE(s.ok()) << s.message();
    if (!s.ok() || !got) break;
    ReadStep rs{step.step, {}};
    for (const UnitSample& u : step.samples) {
      rs.rows.emplace_back(std::string(r.unit_name(u.unit_id)), u);
    }
    out.push_back(std::move(rs));
  }
  return out;
}

TEST(TraceRecorder, WritesATraceTheReplayReadsBitForBit) {
  ScratchDir dir;
  TraceRecorderOptions o;
  o.dir = dir / "traces";
  TraceRecorder rec(o);
  Controller c = MakeController({"layers.0,fc1", "b", "c\"q\""});
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  const std::vector<std::vector<UnitSample>> steps = {
      {Sample(0, 0.1), Sample(1, 1.0 / 3.0), Sample(2, 5e-300)},
      {Sample(0, nan), Sample(1, inf), Sample(2, 123456789.123456789)},
      {Sample(0, 2.0), Sample(2, 7.25)},  // b incomplete at this step
  };
  for (size_t i = 0; i < steps.size(); ++i) {
    EXPECT_EQ(rec.Record("job/1", static_cast<int64_t>(10 + i), steps[i], c),
              TraceRecorder::Outcome::kQueued);
  }
  ASSERT_TRUE(rec.Flush().ok());

  // The job id cannot name another path: it is escaped into one file name.
  const std::string path = TraceRecorder::TracePath(o.dir, "job/1");
  EXPECT_EQ(path, o.dir + "/job%2F1.csv");
  EXPECT_EQ(ReadFileOrEmpty(path).rfind(kTraceHeader, 0), 0u);
  const std::vector<ReadStep> read = ReadTrace(path);
  ASSERT_EQ(read.size(), steps.size());
  for (size_t i = 0; i < steps.size(); ++i) {
    EXPECT_EQ(read[i].step, static_cast<int64_t>(10 + i));
    ASSERT_EQ(read[i].rows.size(), steps[i].size());
    for (size_t k = 0; k < steps[i].size(); ++k) {
      const UnitSample& want = steps[i][k];
      const auto& [name, got] = read[i].rows[k];
      EXPECT_EQ(name, c.unit(want.unit_id).name);
      ExpectSameSample(got, want);  // bit for bit, not approximately
    }
  }
  EXPECT_EQ(rec.counters().steps_written, 3u);
  EXPECT_EQ(rec.counters().steps_dropped, 0u);
}

// Names are RFC 4180 fields: one holding a comma, a quote, a CR or a
// newline, or with spaces at either end, is quoted (quotes doubled) and
// reads back as it was. gnmrd's own names are printable ASCII without space
// (common/unit_name.h), so only commas and quotes occur there; the recorder
// quotes whatever its controller holds.
TEST(TraceRecorder, NamesNeedingQuotesRoundTrip) {
  ScratchDir dir;
  TraceRecorderOptions o;
  o.dir = dir.path();
  TraceRecorder rec(o);
  const std::vector<std::string> names = {"plain",      "a,b",      "\"q\"",    "x\"\"y",
                                          ",",          "\"",       "\"a\"b",   "say \"hi\", ok",
                                          "two\nlines", "cr\r\nlf", " padded ", "cr-at-end\r"};
  Controller c = MakeController(names);
  std::vector<UnitSample> samples;
  for (uint32_t id = 0; id < names.size(); ++id) samples.push_back(Sample(id, 1.0 + id));
  for (int64_t step = 0; step < 3; ++step) rec.Record("j", step, samples, c);
  ASSERT_TRUE(rec.Flush().ok());

  const std::string path = TraceRecorder::TracePath(o.dir, "j");
  const std::string text = ReadFileOrEmpty(path);
  EXPECT_NE(text.find(",\"a,b\","), std::string::npos) << text;
  EXPECT_NE(text.find(",\"\"\"q\"\"\","), std::string::npos) << text;
  EXPECT_NE(text.find(",plain,"), std::string::npos) << text;  // quoted only when needed
  const std::vector<ReadStep> read = ReadTrace(path);
  ASSERT_EQ(read.size(), 3u);
  for (const ReadStep& step : read) {
    ASSERT_EQ(step.rows.size(), names.size());
    for (size_t i = 0; i < names.size(); ++i) {
      EXPECT_EQ(step.rows[i].first, names[i]);
      ExpectSameSample(step.rows[i].second, samples[i]);
    }
  }
}

// A budget of open files, not one per job: with more jobs than the budget
// the least recently written files are closed, and reopened (appending, no
// new file) when their job writes again.
TEST(TraceRecorder, HoldsAtMostItsBudgetOfOpenFiles) {
  auto open_fds = [] {
    size_t n = 0;
    for (const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) n += e.exists();
    return n;
  };
  ScratchDir dir;
  TraceRecorderOptions o;
  o.dir = dir.path();
  o.max_open_files = 4;
  TraceRecorder rec(o);
  Controller c = MakeController({"a", "b"});
  const size_t before = open_fds();
  constexpr int kJobs = 40;
  for (int64_t step = 0; step < 3; ++step) {
    for (int j = 0; j < kJobs; ++j) {
      rec.Record("job-" + std::to_string(j), step, {Sample(0, 1.0 + j), Sample(1, 2.0)}, c);
    }
    ASSERT_TRUE(rec.Flush().ok());
    const size_t held = open_fds() - before;
    std::printf("step %lld: %d jobs recorded, %zu trace files open (budget %zu)\n",
                static_cast<long long>(step), kJobs, held, o.max_open_files);
    EXPECT_LE(held, o.max_open_files);
  }
  EXPECT_EQ(rec.counters().steps_written, 3u * kJobs);
  EXPECT_EQ(rec.counters().rotations, 0u);  // reopened to append, not started anew
  for (int j = 0; j < kJobs; ++j) {
    const std::string path = TraceRecorder::TracePath(o.dir, "job-" + std::to_string(j));
    const std::vector<ReadStep> read = ReadTrace(path);
    ASSERT_EQ(read.size(), 3u) << path;
    EXPECT_EQ(read[2].step, 2);
    EXPECT_FALSE(std::filesystem::exists(path + ".1"));
  }
}

TEST(TraceRecorder, OnlyJobsMatchingTheGlobAreRecorded) {
  ScratchDir dir;
  TraceRecorderOptions o;
  o.dir = dir.path();
  o.jobs = "pretrain-*";
  TraceRecorder rec(o);
  Controller c = MakeController({"a"});
  EXPECT_EQ(rec.Record("pretrain-7", 0, {Sample(0, 1)}, c), TraceRecorder::Outcome::kQueued);
  EXPECT_EQ(rec.Record("finetune", 0, {Sample(0, 1)}, c), TraceRecorder::Outcome::kNotRecorded);
  ASSERT_TRUE(rec.Flush().ok());
  EXPECT_TRUE(std::filesystem::exists(TraceRecorder::TracePath(o.dir, "pretrain-7")));
  EXPECT_FALSE(std::filesystem::exists(TraceRecorder::TracePath(o.dir, "finetune")));
}

TEST(TraceRecorder, StartsANewFileWhenFullWhenStepsGoBackAndPerProcess) {
  ScratchDir dir;
  TraceRecorderOptions o;
  o.dir = dir.path();
  o.max_file_bytes = 4096;
  const std::string path = TraceRecorder::TracePath(o.dir, "j");
  Controller c = MakeController({"unit.a", "unit.b"});
  {
    TraceRecorder rec(o);
    for (int64_t s = 0; s < 200; ++s) {
      rec.Record("j", s, {Sample(0, 1.0 + s), Sample(1, 2.0)}, c);
    }
    ASSERT_TRUE(rec.Flush().ok());
    EXPECT_GT(rec.counters().rotations, 0u);
    // Each file is a trace on its own, within the bound, the newest steps
    // in the current file and the ones before them in .1.
    const auto now = ReadTrace(path);
    const auto before = ReadTrace(path + ".1");
    ASSERT_FALSE(now.empty());
    ASSERT_FALSE(before.empty());
    EXPECT_EQ(now.back().step, 199);
    EXPECT_EQ(before.back().step + 1, now.front().step);
    EXPECT_LE(std::filesystem::file_size(path), o.max_file_bytes);

    // A new generation whose steps start over: a new file, so the trace
    // never goes back.
    rec.Record("j", 5, {Sample(0, 9.0)}, c);
    ASSERT_TRUE(rec.Flush().ok());
    const auto restarted = ReadTrace(path);
    ASSERT_EQ(restarted.size(), 1u);
    EXPECT_EQ(restarted[0].step, 5);
    EXPECT_EQ(ReadTrace(path + ".1").back().step, 199);
  }
  // A later process (a restarted gnmrd) does not append to the old file.
  TraceRecorder rec(o);
  rec.Record("j", 300, {Sample(1, 4.0)}, c);
  ASSERT_TRUE(rec.Flush().ok());
  ASSERT_EQ(ReadTrace(path).size(), 1u);
  EXPECT_EQ(ReadTrace(path)[0].step, 300);
  EXPECT_EQ(ReadTrace(path + ".1")[0].step, 5);
}

TEST(TraceRecorder, AFullQueueDropsStepsAndReportsEachGapOnce) {
  ScratchDir dir;
  TraceRecorderOptions o;
  o.dir = dir.path();
  o.max_queued_bytes = 1u << 20;
  o.flush_interval = std::chrono::hours(1);  // the writer waits for half full
  TraceRecorder rec(o);
  std::vector<std::string> names;
  for (int i = 0; i < 4096; ++i) names.push_back("u" + std::to_string(i));
  Controller c = MakeController(names);
  std::vector<UnitSample> big;
  for (uint32_t i = 0; i < 4096; ++i) big.push_back(Sample(i, 1.0));
  // Each step is ~200 KiB: the writer is woken past half the queue; steps
  // recorded meanwhile beyond the bound are dropped, never waited for.
  int queued = 0, gaps = 0, dropped = 0;
  for (int64_t s = 0; s < 2000; ++s) {
    switch (rec.Record("j", s, big, c)) {
      case TraceRecorder::Outcome::kQueued:
        ++queued;
        break;
      case TraceRecorder::Outcome::kGapStarted:
        ++gaps;
        ++dropped;
        break;
      case TraceRecorder::Outcome::kDropped:
        ++dropped;
        break;
      case TraceRecorder::Outcome::kNotRecorded:
        ADD_FAILURE();
        break;
    }
  }
  ASSERT_TRUE(rec.Flush().ok());
  const TraceRecorder::Counters k = rec.counters();
  EXPECT_EQ(k.steps_queued, static_cast<uint64_t>(queued));
  EXPECT_EQ(k.steps_dropped, static_cast<uint64_t>(dropped));
  EXPECT_EQ(k.steps_written, static_cast<uint64_t>(queued));
  EXPECT_EQ(queued + dropped, 2000);
  // 2000 x 200 KiB could never all wait in a 1 MiB queue.
  EXPECT_GT(dropped, 0);
  EXPECT_GE(gaps, 1);
  EXPECT_LE(gaps, dropped);
  EXPECT_EQ(ReadTrace(TraceRecorder::TracePath(o.dir, "j")).size(), static_cast<size_t>(queued));
}

TEST(TraceRecorder, NamesFollowTheControllerAndRemovedJobsStop) {
  ScratchDir dir;
  TraceRecorderOptions o;
  o.dir = dir.path();
  TraceRecorder rec(o);
  Controller c = MakeController({"a"});
  rec.Record("j", 0, {Sample(0, 1)}, c);
  ASSERT_TRUE(c.AddUnit("b").ok());  // a rank registered a new unit
  rec.Record("j", 1, {Sample(0, 1), Sample(1, 2)}, c);
  ASSERT_TRUE(rec.Flush().ok());
  const auto read = ReadTrace(TraceRecorder::TracePath(o.dir, "j"));
  ASSERT_EQ(read.size(), 2u);
  ASSERT_EQ(read[1].rows.size(), 2u);
  EXPECT_EQ(read[1].rows[1].first, "b");

  rec.RemoveJob("j");
  ASSERT_TRUE(rec.Flush().ok());
  // The file stays (the operator's recording); a new job of the id starts
  // a new file.
  EXPECT_TRUE(std::filesystem::exists(TraceRecorder::TracePath(o.dir, "j")));
  rec.Record("j", 0, {Sample(0, 3)}, c);
  ASSERT_TRUE(rec.Flush().ok());
  EXPECT_EQ(ReadTrace(TraceRecorder::TracePath(o.dir, "j")).size(), 1u);
  EXPECT_EQ(ReadTrace(TraceRecorder::TracePath(o.dir, "j") + ".1").size(), 2u);
}

TEST(TraceRecorder, AnUnwritableDirectoryIsCountedNotFatal) {
  ScratchDir dir;
  TraceRecorderOptions o;
  o.dir = dir / "file-not-dir";
  {
    FILE* f = std::fopen(o.dir.c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fclose(f);
  }
  TraceRecorder rec(o);
  Controller c = MakeController({"a"});
  rec.Record("j", 0, {Sample(0, 1)}, c);
  rec.Record("j", 1, {Sample(0, 1)}, c);
  EXPECT_FALSE(rec.Flush().ok());
  EXPECT_EQ(rec.counters().steps_failed, 2u);
  EXPECT_EQ(rec.counters().steps_written, 0u);
  rec.Stop();
  EXPECT_EQ(rec.Record("j", 2, {Sample(0, 1)}, c), TraceRecorder::Outcome::kGapStarted);
}

}  // namespace
}  // namespace store
}  // namespace gnmr
