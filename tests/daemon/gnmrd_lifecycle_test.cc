// The real gnmrd binary across signals and restarts: every terminating
// signal is a graceful stop (final snapshot, socket removed, exit 0) and
// SIGHUP is ignored; a snapshot that passes its checksum but does not
// restore falls back to the previous one, and when none restores the files
// are moved aside instead of being overwritten.
#include <dirent.h>
#include <sys/stat.h>

#include <gtest/gtest.h>

#include "daemon/store/job_dir.h"
#include "daemon/store/snapshot_store.h"
#include "tests/daemon/gnmrd_process.h"
#include "tests/daemon/raw_rank.h"
#include "tests/daemon/test_daemon.h"

namespace gnmr::testing {
namespace {

const std::vector<RawRank::Unit>& Units() {
  static const std::vector<RawRank::Unit> units = {{"a"}, {"b"}};
  return units;
}

// Registers `job` (one rank) and runs steps [from, to) to their decisions.
void Drive(GnmrdProcess& gnmrd, const std::string& job, int64_t from, int64_t to,
           v1::RegisterResponse* resp = nullptr) {
  RawRank rank(gnmrd.Channel(), job, 0, 1, "tok");
  const v1::ControllerConfig cfg = FastConfig();
  ASSERT_TRUE(rank.Register(Units(), resp, &cfg).ok());
  rank.Open();
  for (int64_t s = from; s < to; ++s) {
    ASSERT_TRUE(rank.SendStats(s, {1.0, 1.0}));
    v1::Decision d;
    ASSERT_TRUE(rank.WaitDecision(s, &d)) << "step " << s;
  }
  rank.Close();
}

bool Exists(const std::string& path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0;
}

// Names in `dir` that start with `prefix`.
std::vector<std::string> Named(const std::string& dir, const std::string& prefix) {
  std::vector<std::string> out;
  if (DIR* d = ::opendir(dir.c_str())) {
    while (const dirent* e = ::readdir(d)) {
      if (std::string(e->d_name).rfind(prefix, 0) == 0) out.push_back(e->d_name);
    }
    ::closedir(d);
  }
  std::sort(out.begin(), out.end());
  return out;
}

TEST(GnmrdSignals, EveryTerminatingSignalStopsGracefullyAndSighupIsIgnored) {
  GnmrdProcess gnmrd;
  const std::vector<std::pair<int, std::string>> signals = {
      {SIGQUIT, "SIGQUIT"}, {SIGUSR1, "SIGUSR1"}, {SIGUSR2, "SIGUSR2"}, {SIGALRM, "SIGALRM"},
      {SIGXCPU, "SIGXCPU"}, {SIGTERM, "SIGTERM"}, {SIGINT, "SIGINT"}};
  store::SnapshotStore on_disk(gnmrd.state_dir());
  for (const auto& [sig, name] : signals) {
    SCOPED_TRACE(name);
    // Snapshots every 1000 steps: only the final one has the last step.
    ASSERT_TRUE(gnmrd.Start({"--snapshot-every", "1000"}, "info")) << gnmrd.log();
    const std::string job = "job-" + name;
    Drive(gnmrd, job, 0, 6);
    if (sig == SIGTERM) {  // once: SIGHUP leaves it running
      EXPECT_TRUE(gnmrd.SurvivesSignal(SIGHUP)) << gnmrd.log();
      EXPECT_NE(gnmrd.log().find("SIGHUP ignored"), std::string::npos) << gnmrd.log();
      Drive(gnmrd, job, 6, 8);
    }
    const int status = gnmrd.Kill(sig);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "wait status " << status << "\n"
                                                               << gnmrd.log();
    EXPECT_NE(gnmrd.log().find(name + ": shutting down"), std::string::npos) << gnmrd.log();
    EXPECT_FALSE(Exists(gnmrd.socket_path())) << "socket left behind";
    EXPECT_TRUE(Named(gnmrd.dir(), ".gnmrd.sock").empty());
    StatusOr<store::SnapshotStore::Loaded> saved = on_disk.Load(job);
    ASSERT_TRUE(saved.ok()) << saved.status().ToString();
    EXPECT_EQ(saved->state.last_step(), sig == SIGTERM ? 7 : 5) << "no final snapshot";
  }
}

class GnmrdRestoreFallback : public ::testing::Test {
 protected:
  // Job "j" decided steps 0..5 and was snapshotted at a graceful stop.
  void SetUp() override {
    ASSERT_TRUE(gnmrd_.Start({}, "info")) << gnmrd_.log();
    Drive(gnmrd_, "j", 0, 6);
    ASSERT_EQ(gnmrd_.Kill(SIGTERM), 0) << gnmrd_.log();
  }
  // Saves a generation that passes its checksum but cannot be restored
  // (its job layout says world size 0); the one before becomes previous.
  void SaveUnrestorable() {
    store::SnapshotStore on_disk(gnmrd_.state_dir());
    StatusOr<store::SnapshotStore::Loaded> loaded = on_disk.Load("j");
    ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
    v1::JobMeta meta;
    ASSERT_TRUE(meta.ParseFromString(loaded->job_meta));
    meta.set_world_size(0);
    ASSERT_TRUE(on_disk.Save("j", loaded->state, meta.SerializeAsString()).ok());
  }
  std::string JobDir() const { return store::JobDir(gnmrd_.state_dir(), "j"); }

  GnmrdProcess gnmrd_;
};

TEST_F(GnmrdRestoreFallback, NewestDoesNotRestoreSoThePreviousIsUsedAndKept) {
  SaveUnrestorable();
  ASSERT_TRUE(gnmrd_.Start({}, "info")) << gnmrd_.log();
  EXPECT_NE(gnmrd_.log().find("restored the PREVIOUS snapshot instead (last step 5"),
            std::string::npos)
      << gnmrd_.log();
  v1::RegisterResponse resp;
  Drive(gnmrd_, "j", 6, 8, &resp);
  EXPECT_EQ(resp.last_step(), 5);  // the job resumed, not re-created
  ASSERT_EQ(gnmrd_.Kill(SIGTERM), 0) << gnmrd_.log();
  // The unrestorable file is kept; the newest snapshot is the resumed job.
  EXPECT_EQ(Named(JobDir(), "snapshot.pb.unrestorable-").size(), 1u);
  store::SnapshotStore on_disk(gnmrd_.state_dir());
  StatusOr<store::SnapshotStore::Loaded> now = on_disk.Load("j");
  ASSERT_TRUE(now.ok());
  EXPECT_FALSE(now->from_previous);
  EXPECT_EQ(now->state.last_step(), 7);
  // And the fallback generation is the good one it restored, not the bad.
  StatusOr<store::SnapshotStore::Loaded> previous = on_disk.LoadPrevious("j");
  ASSERT_TRUE(previous.ok());
  v1::JobMeta meta;
  ASSERT_TRUE(meta.ParseFromString(previous->job_meta));
  EXPECT_EQ(meta.world_size(), 1u);
}

TEST_F(GnmrdRestoreFallback, NoGenerationRestoresSoBothAreMovedAsideNotOverwritten) {
  SaveUnrestorable();
  SaveUnrestorable();  // previous and newest both unrestorable
  const std::string newest = ReadText(JobDir() + "/snapshot.pb");
  const std::string previous = ReadText(JobDir() + "/snapshot.prev.pb");
  ASSERT_FALSE(newest.empty());
  ASSERT_FALSE(previous.empty());
  ASSERT_TRUE(gnmrd_.Start({}, "info")) << gnmrd_.log();
  EXPECT_NE(gnmrd_.log().find("[critical] job j: NOT RESTORED"), std::string::npos) << gnmrd_.log();
  // The job starts afresh when it registers again...
  v1::RegisterResponse resp;
  Drive(gnmrd_, "j", 0, 3, &resp);
  EXPECT_LT(resp.last_step(), 0);
  ASSERT_EQ(gnmrd_.Kill(SIGTERM), 0) << gnmrd_.log();
  // ...and its snapshots did not overwrite the old files.
  const auto kept_newest = Named(JobDir(), "snapshot.pb.unrestorable-");
  const auto kept_previous = Named(JobDir(), "snapshot.prev.pb.unrestorable-");
  ASSERT_EQ(kept_newest.size(), 1u);
  ASSERT_EQ(kept_previous.size(), 1u);
  EXPECT_EQ(ReadText(JobDir() + "/" + kept_newest[0]), newest);
  EXPECT_EQ(ReadText(JobDir() + "/" + kept_previous[0]), previous);
}

}  // namespace
}  // namespace gnmr::testing
