// SnapshotWriter: latest-wins background writes, Flush, failures, storms.
#include "daemon/store/snapshot_writer.h"

#include <atomic>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "daemon/store/job_removal.h"
#include "tests/store/scratch_dir.h"

namespace gnmr {
namespace store {
namespace {

using testing_util::ScratchDir;
using testing_util::WriteFileOrFail;

v1::ControllerState StateWithSequence(uint64_t seq) {
  v1::ControllerState s;
  s.set_format_version(1);
  s.set_sequence(seq);
  return s;
}

TEST(SnapshotWriterTest, FlushMakesSubmittedSnapshotsDurable) {
  ScratchDir dir;
  SnapshotStore store(dir.path());
  SnapshotWriter writer(&store);
  EXPECT_FALSE(writer.LastSuccessUnix("a").has_value());
  ASSERT_TRUE(writer.Submit("a", StateWithSequence(1), "meta-a"));
  ASSERT_TRUE(writer.Submit("b", StateWithSequence(2), "meta-b"));
  ASSERT_TRUE(writer.Flush().ok());
  EXPECT_EQ(store.Load("a")->state.sequence(), 1u);
  EXPECT_EQ(store.Load("b")->job_meta, "meta-b");
  ASSERT_TRUE(writer.LastSuccessUnix("a").has_value());
  EXPECT_GT(*writer.LastSuccessUnix("a"), 1.6e9);
  const SnapshotWriter::Counters c = writer.counters();
  EXPECT_EQ(c.submitted, 2u);
  EXPECT_EQ(c.writes + c.superseded, 2u);
  EXPECT_EQ(c.failures, 0u);
  writer.Forget("a");
  EXPECT_FALSE(writer.LastSuccessUnix("a").has_value());
}

TEST(SnapshotWriterTest, StopWritesPendingAndRefusesLaterSubmits) {
  ScratchDir dir;
  SnapshotStore store(dir.path());
  {
    SnapshotWriter writer(&store);
    for (uint64_t i = 1; i <= 50; ++i) {
      ASSERT_TRUE(writer.Submit("j", StateWithSequence(i), ""));
    }
    writer.Stop();
    EXPECT_FALSE(writer.Submit("j", StateWithSequence(99), ""));
    EXPECT_TRUE(writer.Flush().ok());  // nothing outstanding: returns
    writer.Stop();                     // idempotent
  }
  // Latest wins: the last submission is what is on disk.
  EXPECT_EQ(store.Load("j")->state.sequence(), 50u);
}

TEST(SnapshotWriterTest, ConcurrentSubmitStormKeepsTheLatestPerJob) {
  ScratchDir dir;
  SnapshotStore store(dir.path());
  SnapshotWriter writer(&store);
  constexpr int kThreads = 8;
  constexpr uint64_t kPerThread = 300;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&writer, t] {
      const std::string job = "job-" + std::to_string(t);
      for (uint64_t i = 1; i <= kPerThread; ++i) {
        writer.Submit(job, StateWithSequence(i), job);
        if (i % 100 == 0) (void)writer.Flush();
      }
    });
  }
  for (std::thread& th : threads) th.join();
  ASSERT_TRUE(writer.Flush().ok());
  for (int t = 0; t < kThreads; ++t) {
    const std::string job = "job-" + std::to_string(t);
    StatusOr<SnapshotStore::Loaded> got = store.Load(job);
    ASSERT_TRUE(got.ok()) << job;
    EXPECT_EQ(got->state.sequence(), kPerThread) << job;
    EXPECT_EQ(got->job_meta, job);
  }
  const SnapshotWriter::Counters c = writer.counters();
  EXPECT_EQ(c.submitted, kThreads * kPerThread);
  EXPECT_EQ(c.writes + c.superseded, c.submitted);
  EXPECT_EQ(c.failures, 0u);
  StatusOr<std::vector<std::string>> jobs = store.ListJobs();
  ASSERT_TRUE(jobs.ok());
  EXPECT_EQ(jobs->size(), static_cast<size_t>(kThreads));
}

TEST(SnapshotWriterTest, FailuresAreCountedAndReportedNotFatal) {
  ScratchDir dir;
  WriteFileOrFail(dir / "file", "x");
  SnapshotStore store(dir / "file");  // a file where a directory must be
  SnapshotWriter writer(&store);
  ASSERT_TRUE(writer.Submit("j", StateWithSequence(1), ""));
  Status s = writer.Flush();
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(writer.counters().failures, 1u);
  EXPECT_FALSE(writer.LastSuccessUnix("j").has_value());
  // Keeps working after a failure.
  ASSERT_TRUE(writer.Submit("j", StateWithSequence(2), ""));
  EXPECT_FALSE(writer.Flush().ok());
  EXPECT_EQ(writer.counters().failures, 2u);
}

TEST(SnapshotWriterTest, CancelJobLeavesNoWriteOfTheJobBehind) {
  ScratchDir dir;
  SnapshotStore store(dir.path());
  SnapshotWriter writer(&store);
  // Many writes of "j" pending or in flight when it is cancelled.
  for (uint64_t i = 1; i <= 200; ++i) {
    ASSERT_TRUE(writer.Submit("j", StateWithSequence(i), ""));
    ASSERT_TRUE(writer.Submit("k", StateWithSequence(i), ""));
  }
  writer.CancelJob("j");
  ASSERT_TRUE(RemoveJobDir(dir.path(), "j").ok());
  ASSERT_TRUE(writer.Flush().ok());
  EXPECT_EQ(store.Load("j").status().code(), StatusCode::kNotFound)
      << "a snapshot of the cancelled job was written after CancelJob";
  EXPECT_FALSE(writer.LastSuccessUnix("j").has_value());
  EXPECT_EQ(store.Load("k")->state.sequence(), 200u);  // others unaffected
  // The id can be written again afterwards.
  ASSERT_TRUE(writer.Submit("j", StateWithSequence(7), ""));
  ASSERT_TRUE(writer.Flush().ok());
  EXPECT_EQ(store.Load("j")->state.sequence(), 7u);
}

}  // namespace
}  // namespace store
}  // namespace gnmr
