// EventLog over a job's life: rotation by size (events.jsonl ->
// events.jsonl.1, ReloadTail reading across both) and RemoveJob (ring,
// buffered events and files gone; nothing written for the job afterwards).
#include <sys/stat.h>

#include <sstream>

#include <gtest/gtest.h>

#include "controller/publish/event_json.h"
#include "daemon/store/event_log.h"
#include "daemon/store/job_dir.h"
#include "daemon/store/job_removal.h"
#include "tests/store/scratch_dir.h"

namespace gnmr {
namespace store {
namespace {

using testing_util::Lines;
using testing_util::ReadFileOrEmpty;
using testing_util::ScratchDir;
using testing_util::WriteFileOrFail;

v1::Event Numbered(int64_t step) {
  v1::Event e;
  e.set_observed_step(step);
  e.set_kind(v1::EVENT_KIND_ADMISSION);
  e.set_unit("layers." + std::to_string(step) + ".mlp.fc1");
  e.set_detail(std::string(100, 'x'));  // ~300 bytes a line
  e.set_time_unix(1767225600.25);
  return e;
}

int64_t StepOf(const std::string& line) {
  StatusOr<v1::Event> e = ParseEventJsonLine(line);
  EXPECT_TRUE(e.ok()) << line;
  return e.ok() ? e->observed_step() : -1;
}

bool Exists(const std::string& path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0;
}

TEST(EventLogRotation, FileRotatesPastTheBoundKeepingOneOlderFile) {
  ScratchDir dir;
  EventLogOptions options;
  options.max_file_bytes = 4096;
  const std::string path = JobDir(dir.path(), "j") + "/events.jsonl";
  {
    EventLog log(dir.path(), options);
    // One event per flush: every write is small, so each file stays within
    // the bound.
    for (int i = 0; i < 100; ++i) {
      log.Append("j", Numbered(i));
      ASSERT_TRUE(log.Flush().ok());
    }
    EXPECT_GE(log.counters().rotations, 5u);
  }
  const std::string current = ReadFileOrEmpty(path);
  const std::string rotated = ReadFileOrEmpty(path + ".1");
  EXPECT_LE(current.size(), 4096u);
  EXPECT_LE(rotated.size(), 4096u);
  EXPECT_GT(rotated.size(), 4096u / 2);
  EXPECT_FALSE(Exists(path + ".2"));
  // The two files are the newest events, contiguous and in order.
  std::vector<std::string> lines = Lines(rotated);
  for (const std::string& l : Lines(current)) lines.push_back(l);
  ASSERT_FALSE(lines.empty());
  EXPECT_EQ(StepOf(lines.back()), 99);
  for (size_t i = 1; i < lines.size(); ++i) {
    EXPECT_EQ(StepOf(lines[i]), StepOf(lines[i - 1]) + 1);
  }
}

TEST(EventLogRotation, ReloadTailReadsOnIntoTheRotatedFile) {
  ScratchDir dir;
  EventLogOptions options;
  options.max_file_bytes = 4096;
  options.ring_capacity = 1000;
  {
    EventLog log(dir.path(), options);
    for (int i = 0; i < 40; ++i) {
      log.Append("j", Numbered(i));
      ASSERT_TRUE(log.Flush().ok());
    }
  }
  const std::string path = JobDir(dir.path(), "j") + "/events.jsonl";
  const size_t in_current = Lines(ReadFileOrEmpty(path)).size();
  const size_t in_rotated = Lines(ReadFileOrEmpty(path + ".1")).size();
  ASSERT_GT(in_rotated, 0u);
  {
    EventLog log(dir.path(), options);
    ASSERT_TRUE(log.ReloadTail("j").ok());
    std::vector<v1::Event> events = log.List("j", 0, 0);
    ASSERT_EQ(events.size(), in_current + in_rotated);
    EXPECT_EQ(events.back().observed_step(), 39);
    EXPECT_EQ(events.front().observed_step(), 40 - static_cast<int64_t>(events.size()));
  }
  // A ring smaller than the current file reads nothing of the rotated one.
  options.ring_capacity = 3;
  EventLog log(dir.path(), options);
  ASSERT_TRUE(log.ReloadTail("j").ok());
  std::vector<v1::Event> events = log.List("j", 0, 0);
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events.front().observed_step(), 37);
}

TEST(EventLogRemoval, RemoveJobDropsRingBufferAndFiles) {
  ScratchDir dir;
  EventLogOptions options;
  options.max_file_bytes = 4096;
  options.flush_interval = std::chrono::hours(1);  // nothing written unless asked
  EventLog log(dir.path(), options);
  for (int i = 0; i < 30; ++i) {
    log.Append("j", Numbered(i));
    ASSERT_TRUE(log.Flush().ok());
  }
  log.Append("other", Numbered(0));
  const std::string path = JobDir(dir.path(), "j") + "/events.jsonl";
  ASSERT_TRUE(Exists(path));
  ASSERT_TRUE(Exists(path + ".1"));
  // Buffered, not written yet: must never reach a file.
  for (int i = 30; i < 40; ++i) log.Append("j", Numbered(i));

  ASSERT_TRUE(log.RemoveJob("j").ok());
  EXPECT_TRUE(log.List("j", 0, 0).empty());
  EXPECT_FALSE(Exists(path));
  EXPECT_FALSE(Exists(path + ".1"));
  ASSERT_TRUE(log.Flush().ok());
  EXPECT_FALSE(Exists(path)) << "a buffered event of the removed job was written";
  EXPECT_EQ(log.List("other", 0, 0).size(), 1u);  // other jobs untouched
  EXPECT_TRUE(Exists(JobDir(dir.path(), "other") + "/events.jsonl"));

  // The same id starts afresh.
  log.Append("j", Numbered(100));
  ASSERT_TRUE(log.Flush().ok());
  ASSERT_EQ(Lines(ReadFileOrEmpty(path)).size(), 1u);
  EXPECT_EQ(StepOf(Lines(ReadFileOrEmpty(path))[0]), 100);
  // Removing a job that has no file, and after Stop, both work.
  EXPECT_TRUE(log.RemoveJob("never-seen").ok());
  log.Stop();
  EXPECT_TRUE(log.RemoveJob("j").ok());
  EXPECT_FALSE(Exists(path));
}

TEST(EventLogRemoval, KeepingTheFilesLeavesThemToRemoveJobDir) {
  ScratchDir dir;
  EventLog log(dir.path());
  log.Append("j", Numbered(1));
  ASSERT_TRUE(log.Flush().ok());
  const std::string job_dir = JobDir(dir.path(), "j");
  WriteFileOrFail(job_dir + "/snapshot.pb", "x");
  WriteFileOrFail(job_dir + "/snapshot.pb.unrestorable-1", "y");
  ASSERT_TRUE(log.RemoveJob("j", /*delete_files=*/false).ok());
  EXPECT_TRUE(Exists(job_dir + "/events.jsonl"));
  ASSERT_TRUE(RemoveJobDir(dir.path(), "j").ok());
  EXPECT_FALSE(Exists(job_dir));
  // Nothing is left under jobs/: no ".deleted-*" directory either.
  StatusOr<int> leftovers = RemoveDeletedJobDirs(dir.path());
  ASSERT_TRUE(leftovers.ok());
  EXPECT_EQ(*leftovers, 0);
  EXPECT_TRUE(RemoveJobDir(dir.path(), "j").ok());  // no directory: fine
}

TEST(JobRemoval, CrashLeftoverIsFinishedAtStart) {
  ScratchDir dir;
  const std::string doomed = JobsDir(dir.path()) + "/.deleted-j-123";
  ASSERT_EQ(::mkdir(JobsDir(dir.path()).c_str(), 0700), 0);
  ASSERT_EQ(::mkdir(doomed.c_str(), 0700), 0);
  WriteFileOrFail(doomed + "/snapshot.pb", "x");
  WriteFileOrFail(doomed + "/events.jsonl", "y");
  StatusOr<int> removed = RemoveDeletedJobDirs(dir.path());
  ASSERT_TRUE(removed.ok()) << removed.status().ToString();
  EXPECT_EQ(*removed, 1);
  EXPECT_FALSE(Exists(doomed));
}

}  // namespace
}  // namespace store
}  // namespace gnmr
