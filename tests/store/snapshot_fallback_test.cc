// The store's side of "a snapshot that fails to restore falls back to the
// previous one" (restore.h drives it): the previous generation alone, the
// newest replaced by it (kept aside), both moved aside; and the state dir
// lock and writability check (one daemon per state dir).
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <set>

#include <gtest/gtest.h>

#include "daemon/store/snapshot_store.h"
#include "daemon/store/state_dir.h"
#include "tests/store/scratch_dir.h"
#include "tests/testing/manual_clock.h"

namespace gnmr {
namespace store {
namespace {

using testing_util::ReadFileOrEmpty;
using testing_util::ScratchDir;
namespace fs = std::filesystem;

v1::ControllerState State(uint64_t sequence) {
  v1::ControllerState s;
  s.set_format_version(1);
  s.set_sequence(sequence);
  return s;
}

std::set<std::string> Names(const std::string& dir) {
  std::set<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.insert(e.path().filename().string());
  return out;
}

TEST(SnapshotFallbackTest, ReplaceNewestByPreviousKeepsTheNewestAside) {
  ScratchDir dir;
  SnapshotStore store(dir.path());
  ASSERT_TRUE(store.Save("j", State(1), "good").ok());
  ASSERT_TRUE(store.Save("j", State(2), "bad").ok());
  StatusOr<SnapshotStore::Loaded> previous = store.LoadPrevious("j");
  ASSERT_TRUE(previous.ok()) << previous.status().ToString();
  EXPECT_TRUE(previous->from_previous);
  EXPECT_EQ(previous->job_meta, "good");
  const std::string bad_bytes = ReadFileOrEmpty(dir / "jobs/j/snapshot.pb");

  StatusOr<std::string> kept = store.ReplaceNewestByPrevious("j");
  ASSERT_TRUE(kept.ok()) << kept.status().ToString();
  EXPECT_EQ(ReadFileOrEmpty(*kept), bad_bytes);
  EXPECT_EQ(store.Load("j")->job_meta, "good");
  // The next save keeps the good generation as previous, not the bad one.
  ASSERT_TRUE(store.Save("j", State(3), "next").ok());
  EXPECT_EQ(store.LoadPrevious("j")->job_meta, "good");
  EXPECT_EQ(store.Load("j")->job_meta, "next");
}

TEST(SnapshotFallbackTest, SetAsideKeepsBothAndTheJobIsNoLongerListed) {
  ScratchDir dir;
  SnapshotStore store(dir.path());
  ASSERT_TRUE(store.Save("j", State(1), "one").ok());
  ASSERT_TRUE(store.Save("j", State(2), "two").ok());
  ASSERT_TRUE(store.Save("other", State(1), "x").ok());
  StatusOr<std::vector<std::string>> kept = store.SetAside("j");
  ASSERT_TRUE(kept.ok()) << kept.status().ToString();
  ASSERT_EQ(kept->size(), 2u);
  EXPECT_EQ(store.ListJobs().value(), (std::vector<std::string>{"other"}));
  EXPECT_EQ(store.Load("j").status().code(), StatusCode::kNotFound);
  // A new job of the same id saves next to them without touching them.
  ASSERT_TRUE(store.Save("j", State(9), "new").ok());
  ASSERT_TRUE(store.Save("j", State(10), "newer").ok());
  const std::set<std::string> names = Names(dir / "jobs/j");
  EXPECT_EQ(names.size(), 4u);
  int aside = 0;
  for (const std::string& path : *kept) {
    aside += names.count(fs::path(path).filename().string());
  }
  EXPECT_EQ(aside, 2);
}

// The store reads the clock it is given, not the machine's: a snapshot's
// time and the <unix ms> of the file it sets aside are that clock's.
TEST(SnapshotFallbackTest, TheStoresClockDatesSnapshotsAndNamesWhatItSetsAside) {
  ScratchDir dir;
  gnmr::testing::ManualClock clock;
  SnapshotStore store(dir.path(), &clock);
  ASSERT_TRUE(store.Save("j", State(1), "one").ok());
  const int64_t first_ms = clock.UnixMillis();
  clock.Advance(std::chrono::hours(24));
  ASSERT_TRUE(store.Save("j", State(2), "two").ok());
  EXPECT_EQ(store.LoadPrevious("j")->saved_unix_ms, first_ms);
  EXPECT_EQ(store.Load("j")->saved_unix_ms, first_ms + 24 * 3600 * 1000);
  clock.Advance(std::chrono::seconds(1));
  StatusOr<std::string> kept = store.ReplaceNewestByPrevious("j");
  ASSERT_TRUE(kept.ok()) << kept.status().ToString();
  EXPECT_EQ(fs::path(*kept).filename().string(),
            "snapshot.pb.unrestorable-" + std::to_string(first_ms + (24 * 3600 + 1) * 1000));
}

TEST(StateDirTest, SecondLockNamesTheHolderAndTheLockEndsWithIt) {
  ScratchDir dir;
  auto first = StateDirLock::Acquire(dir.path());
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  auto second = StateDirLock::Acquire(dir.path());
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().message(), "state dir " + dir.path() + " is locked by pid " +
                                           std::to_string(::getpid()) +
                                           " (another gnmrd uses it; one daemon per state dir)");
  first = Status(StatusCode::kCancelled, "released");  // drops the lock
  EXPECT_TRUE(StateDirLock::Acquire(dir.path()).ok());
}

TEST(StateDirTest, WritabilityProbeLeavesNothingBehind) {
  // (A read-only state dir is tested with the real gnmrd, run as an
  // unprivileged user: gnmrd_startup_test.)
  ScratchDir dir;
  ASSERT_EQ(::mkdir((dir / "jobs").c_str(), 0700), 0);
  EXPECT_TRUE(CheckStateDirWritable(dir.path()).ok());
  EXPECT_EQ(Names(dir.path()), (std::set<std::string>{"jobs"}));
  EXPECT_TRUE(Names(dir / "jobs").empty());
  Status s = CheckStateDirWritable(dir / "missing");
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.message().rfind("state dir " + (dir / "missing") + " is not writable", 0), 0u)
      << s.message();
}

}  // namespace
}  // namespace store
}  // namespace gnmr
