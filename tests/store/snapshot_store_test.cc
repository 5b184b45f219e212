// SnapshotStore: frame round trip, crash safety (stray temp files, torn and
// corrupted files), hostile job ids, listing.
#include "daemon/store/snapshot_store.h"

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <set>

#include <gtest/gtest.h>

#include "daemon/store/crc32c.h"
#include "daemon/store/job_dir.h"
#include "daemon/store/snapshot_format.h"
#include "tests/store/scratch_dir.h"

namespace gnmr {
namespace store {
namespace {

using testing_util::ReadFileOrEmpty;
using testing_util::ScratchDir;
using testing_util::WriteFileOrFail;
namespace fs = std::filesystem;

v1::ControllerState MakeState(uint64_t sequence) {
  v1::ControllerState s;
  s.set_format_version(1);
  s.set_sequence(sequence);
  s.set_has_last_step(true);
  s.set_last_step(static_cast<int64_t>(sequence) * 10);
  v1::UnitHistory* u = s.add_units();
  u->set_name("layers.0.mlp.fc1");
  u->set_mu(1.5 + static_cast<double>(sequence));
  u->add_window(0.25);
  s.mutable_config()->set_max_o(4);
  return s;
}

TEST(Crc32cTest, CheckValue) {
  EXPECT_EQ(Crc32c("123456789"), 0xE3069283u);
  EXPECT_EQ(Crc32c(""), 0u);
  const std::string a = "hello, ", b = "snapshot world";
  EXPECT_EQ(Crc32cExtend(Crc32c(a), b.data(), b.size()), Crc32c(a + b));
}

TEST(SnapshotFormatTest, RoundTripAndEveryTruncationIsDataLoss) {
  SnapshotFrame f{"job-1", std::string("state\0bytes", 11), "meta", 1234};
  StatusOr<std::string> bytes = EncodeSnapshotFrame(f);
  ASSERT_TRUE(bytes.ok());
  StatusOr<SnapshotFrame> back = DecodeSnapshotFrame(*bytes, "x");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->job_id, f.job_id);
  EXPECT_EQ(back->state, f.state);
  EXPECT_EQ(back->meta, f.meta);
  EXPECT_EQ(back->saved_unix_ms, 1234);
  for (size_t n = 0; n < bytes->size(); ++n) {
    StatusOr<SnapshotFrame> cut = DecodeSnapshotFrame(bytes->substr(0, n), "x");
    ASSERT_FALSE(cut.ok()) << n;
    EXPECT_EQ(cut.status().code(), StatusCode::kDataLoss) << n;
  }
  for (size_t i = 0; i < bytes->size(); ++i) {
    std::string flipped = *bytes;
    flipped[i] = static_cast<char>(flipped[i] ^ 0x10);
    EXPECT_EQ(DecodeSnapshotFrame(flipped, "x").status().code(), StatusCode::kDataLoss) << i;
  }
  EXPECT_EQ(DecodeSnapshotFrame(*bytes + "x", "x").status().code(), StatusCode::kDataLoss);
}

TEST(SnapshotStoreTest, SaveLoadRoundTrip) {
  ScratchDir dir;
  SnapshotStore store(dir.path());
  EXPECT_EQ(store.Load("job").status().code(), StatusCode::kNotFound);
  const v1::ControllerState state = MakeState(7);
  ASSERT_TRUE(store.Save("job", state, "meta-bytes").ok());
  StatusOr<SnapshotStore::Loaded> got = store.Load("job");
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->job_id, "job");
  EXPECT_EQ(got->state.SerializeAsString(), state.SerializeAsString());
  EXPECT_EQ(got->job_meta, "meta-bytes");
  EXPECT_FALSE(got->from_previous);
  EXPECT_GT(got->saved_unix_ms, 1600000000000);
  // Owner-only: the job metadata holds the job's token.
  struct stat st;
  ASSERT_EQ(::stat((dir / "jobs/job/snapshot.pb").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
}

TEST(SnapshotStoreTest, ReplacementKeepsPreviousGeneration) {
  ScratchDir dir;
  SnapshotStore store(dir.path());
  ASSERT_TRUE(store.Save("j", MakeState(1), "m1").ok());
  ASSERT_TRUE(store.Save("j", MakeState(2), "m2").ok());
  ASSERT_TRUE(store.Save("j", MakeState(3), "m3").ok());
  StatusOr<SnapshotStore::Loaded> got = store.Load("j");
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->state.sequence(), 3u);
  EXPECT_EQ(got->job_meta, "m3");
  // Only the two generations remain: no temp files.
  std::set<std::string> names;
  for (const auto& e : fs::directory_iterator(dir / "jobs/j")) {
    names.insert(e.path().filename().string());
  }
  EXPECT_EQ(names, (std::set<std::string>{"snapshot.pb", "snapshot.prev.pb"}));
}

TEST(SnapshotStoreTest, CrashMidWriteNeverYieldsGarbage) {
  ScratchDir dir;
  SnapshotStore store(dir.path());
  ASSERT_TRUE(store.Save("j", MakeState(1), "m1").ok());
  ASSERT_TRUE(store.Save("j", MakeState(2), "m2").ok());
  const std::string newest = dir / "jobs/j/snapshot.pb";
  const std::string previous = dir / "jobs/j/snapshot.prev.pb";

  // A writer died before its rename: a stray, half-written temp file.
  const std::string good = ReadFileOrEmpty(newest);
  WriteFileOrFail(newest + ".tmp-99999-0", good.substr(0, good.size() / 2));
  StatusOr<SnapshotStore::Loaded> got = store.Load("j");
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->state.sequence(), 2u);
  EXPECT_FALSE(got->from_previous);

  // The newest file itself torn (a file system that lost synced data):
  // the previous generation is returned, flagged.
  ASSERT_EQ(::truncate(newest.c_str(), static_cast<off_t>(good.size() / 2)), 0);
  got = store.Load("j");
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->state.sequence(), 1u);
  EXPECT_EQ(got->job_meta, "m1");
  EXPECT_TRUE(got->from_previous);

  // Both torn: DataLoss naming the file, never a parsed half state.
  ASSERT_EQ(::truncate(previous.c_str(), 10), 0);
  got = store.Load("j");
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(got.status().message().find("snapshot.pb"), std::string::npos);

  // The next Save repairs the job; RemoveTempFiles cleans the stray file.
  ASSERT_TRUE(store.Save("j", MakeState(3), "m3").ok());
  EXPECT_EQ(store.Load("j")->state.sequence(), 3u);
  ASSERT_TRUE(store.RemoveTempFiles().ok());
  EXPECT_FALSE(fs::exists(newest + ".tmp-99999-0"));
}

TEST(SnapshotStoreTest, CorruptedChecksumIsDataLoss) {
  ScratchDir dir;
  SnapshotStore store(dir.path());
  ASSERT_TRUE(store.Save("j", MakeState(1), "meta").ok());
  const std::string path = dir / "jobs/j/snapshot.pb";
  std::string bytes = ReadFileOrEmpty(path);
  bytes[bytes.size() / 2] = static_cast<char>(bytes[bytes.size() / 2] ^ 1);
  WriteFileOrFail(path, bytes);
  StatusOr<SnapshotStore::Loaded> got = store.Load("j");
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(got.status().message().find("checksum"), std::string::npos) << got.status().message();
}

TEST(SnapshotStoreTest, SnapshotOfAnotherJobIsRejected) {
  ScratchDir dir;
  SnapshotStore store(dir.path());
  ASSERT_TRUE(store.Save("a", MakeState(1), "").ok());
  ASSERT_TRUE(store.Save("b", MakeState(2), "").ok());
  fs::copy_file(dir / "jobs/a/snapshot.pb", dir / "jobs/b/snapshot.pb",
                fs::copy_options::overwrite_existing);
  fs::remove(dir / "jobs/b/snapshot.prev.pb");
  EXPECT_EQ(store.Load("b").status().code(), StatusCode::kDataLoss);
}

TEST(SnapshotStoreTest, HostileJobIdsStayInsideStateDir) {
  ScratchDir root;
  const std::string state_dir = root / "state";
  SnapshotStore store(state_dir);
  const std::vector<std::string> ids = {"../../etc",
                                        "..",
                                        ".",
                                        "/etc/passwd",
                                        "a/b",
                                        "",
                                        "%",
                                        "%2E",
                                        "~x",
                                        ".hidden",
                                        std::string(5000, 'x'),
                                        std::string(300, '/'),
                                        "\xc3\xbcnic\xc3\xb8"
                                        "de-\xf0\x9f\x92\xa5",
                                        std::string("nul\0byte", 8),
                                        "\x01\xff\xfe",
                                        "job:1.2_3-4",
                                        std::string(199, 'y'),
                                        std::string(200, 'y'),
                                        std::string(201, 'y'),
                                        std::string(80, '.')};
  for (size_t i = 0; i < ids.size(); ++i) {
    const std::string name = EscapeJobId(ids[i]);
    EXPECT_EQ(name.find('/'), std::string::npos) << i;
    EXPECT_NE(name[0], '.') << i;
    EXPECT_LE(name.size(), kMaxJobDirName) << i;
    ASSERT_TRUE(store.Save(ids[i], MakeState(i + 1), ids[i]).ok()) << i;
  }
  // Nothing outside <state_dir>/jobs, one directory per id.
  for (const auto& e : fs::directory_iterator(root.path())) {
    EXPECT_EQ(e.path().filename(), "state");
  }
  for (const auto& e : fs::directory_iterator(state_dir)) {
    EXPECT_EQ(e.path().filename(), "jobs");
  }
  size_t dirs = 0;
  for (const auto& e : fs::directory_iterator(state_dir + "/jobs")) {
    EXPECT_TRUE(e.is_directory());
    ++dirs;
  }
  EXPECT_EQ(dirs, ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    StatusOr<SnapshotStore::Loaded> got = store.Load(ids[i]);
    ASSERT_TRUE(got.ok()) << i << ": " << got.status().ToString();
    EXPECT_EQ(got->state.sequence(), i + 1);
    EXPECT_EQ(got->job_id, ids[i]);
  }
  StatusOr<std::vector<std::string>> listed = store.ListJobs();
  ASSERT_TRUE(listed.ok());
  EXPECT_EQ(std::set<std::string>(listed->begin(), listed->end()),
            std::set<std::string>(ids.begin(), ids.end()));
}

TEST(JobDirTest, EscapingIsReadableAndReversible) {
  EXPECT_EQ(EscapeJobId("llama-7b.run:3_a"), "llama-7b.run:3_a");
  EXPECT_EQ(EscapeJobId("../x"), "%2E.%2Fx");
  EXPECT_EQ(EscapeJobId(""), "%");
  for (const std::string id : {"", "a", "../x", "%", "a b", "\xff"}) {
    EXPECT_EQ(UnescapeJobDir(EscapeJobId(id)), id);
  }
  EXPECT_EQ(UnescapeJobDir("%41"), std::nullopt);  // not canonical
  EXPECT_EQ(UnescapeJobDir("%4"), std::nullopt);
  EXPECT_EQ(UnescapeJobDir(".."), std::nullopt);
  EXPECT_EQ(UnescapeJobDir(EscapeJobId(std::string(500, 'z'))), std::nullopt);
  EXPECT_NE(EscapeJobId(std::string(500, 'z')), EscapeJobId(std::string(501, 'z')));
}

TEST(SnapshotStoreTest, ListJobsOnMissingDirIsEmptyAndIgnoresStrays) {
  ScratchDir dir;
  SnapshotStore store(dir / "nope");
  StatusOr<std::vector<std::string>> listed = store.ListJobs();
  ASSERT_TRUE(listed.ok());
  EXPECT_TRUE(listed->empty());

  SnapshotStore real(dir.path());
  ASSERT_TRUE(real.Save("b", MakeState(1), "").ok());
  ASSERT_TRUE(real.Save("a", MakeState(1), "").ok());
  fs::create_directories(dir / "jobs/no-snapshot");
  WriteFileOrFail(dir / "jobs/stray-file", "x");
  listed = real.ListJobs();
  ASSERT_TRUE(listed.ok());
  EXPECT_EQ(*listed, (std::vector<std::string>{"a", "b"}));
}

TEST(SnapshotStoreTest, UnwritableStateDirIsAStatus) {
  ScratchDir dir;
  WriteFileOrFail(dir / "file", "not a directory");
  SnapshotStore store(dir / "file");
  Status s = store.Save("j", MakeState(1), "");
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("file"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace store
}  // namespace gnmr
