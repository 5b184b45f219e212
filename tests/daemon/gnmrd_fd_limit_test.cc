// gnmrd under a low open-file limit (docs/limits.md, "File descriptors"):
// started as under `prlimit --nofile=256:512`, it raises its soft limit to
// the hard one and logs it, and 600 recorded jobs - each with a trace file
// and an event log - hold a bounded number of descriptors, not one per job,
// so gnmrd keeps accepting connections (a new gnmrctl call answers) and
// every job's trace is complete.
#include <dirent.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>

#include <gtest/gtest.h>

#include "daemon/store/trace_recorder.h"
#include "tests/daemon/gnmrd_process.h"
#include "tests/daemon/raw_rank.h"
#include "tests/daemon/test_daemon.h"

namespace gnmr::testing {
namespace {

constexpr int kJobs = 600;
constexpr rlim_t kSoft = 256;
constexpr rlim_t kHard = 512;

// The descriptors process `pid` holds (ls /proc/PID/fd | wc -l).
size_t OpenFds(pid_t pid) {
  DIR* d = ::opendir(("/proc/" + std::to_string(pid) + "/fd").c_str());
  if (d == nullptr) return 0;
  size_t n = 0;
  while (const dirent* e = ::readdir(d)) n += e->d_name[0] != '.';
  ::closedir(d);
  return n;
}

TEST(GnmrdFdLimit, ManyRecordedJobsKeepItAcceptingUnderALowLimit) {
  GnmrdProcess gnmrd;
  gnmrd.set_nofile_limit(kSoft, kHard);
  const std::string traces = gnmrd.dir() + "/traces";
  ASSERT_TRUE(gnmrd.Start({"--trace-dir", traces}, "info")) << gnmrd.log();
  EXPECT_NE(gnmrd.log().find("open files: soft limit raised from 256 to 512 (hard limit 512)"),
            std::string::npos)
      << gnmrd.log();
  const size_t idle = OpenFds(gnmrd.pid());

  // One connection for all the jobs: what grows is what gnmrd holds per job.
  const auto channel = gnmrd.Channel();
  const v1::ControllerConfig cfg = FastConfig();
  size_t peak = idle;
  for (int j = 0; j < kJobs; ++j) {
    RawRank rank(channel, "job-" + std::to_string(j), 0, 1, "tok");
    grpc::Status st = rank.Register({{"a"}, {"b,c"}}, nullptr, &cfg);
    ASSERT_TRUE(st.ok()) << "job " << j << ": " << st.error_message();
    rank.Open();
    // A NaN: an admission and a global skip, so the job's event log is
    // written too.
    ASSERT_TRUE(rank.SendStats(0, {std::nan(""), 2.0}));
    v1::Decision d;
    ASSERT_TRUE(rank.WaitDecision(0, &d)) << "job " << j;
    rank.Close();
    // Sampled after every job, while the writers flush on their own clock:
    // the bound holds at any time, not once they settled.
    const size_t now = OpenFds(gnmrd.pid());
    peak = std::max(peak, now);
    if ((j + 1) % 100 == 0) {
      std::printf("%d jobs recorded: gnmrd holds %zu descriptors (peak %zu, idle %zu)\n", j + 1,
                  now, peak, idle);
    }
  }
  // The trace recorder's budget (64) and the event log's (128), whatever
  // the number of jobs, and a margin for gRPC and a snapshot being written.
  EXPECT_LE(peak, idle + 64 + 128 + 16);

  // A new connection is accepted and answered.
  GnmrdExit ctl = RunToExit({GNMRCTL_PATH, "status", "--target", gnmrd.target()}, gnmrd.dir(), -1,
                            std::chrono::seconds(20));
  EXPECT_TRUE(ctl.exited_with(0)) << ctl.status << "\n" << ctl.output;
  EXPECT_NE(ctl.output.find("jobs:"), std::string::npos) << ctl.output;

  EXPECT_EQ(gnmrd.Kill(SIGTERM), 0);
  const std::string log = gnmrd.log();
  EXPECT_EQ(log.find("Too many open files"), std::string::npos) << log.substr(0, 4000);
  int complete = 0;
  for (int j = 0; j < kJobs; ++j) {
    const std::string trace =
        ReadText(store::TraceRecorder::TracePath(traces, "job-" + std::to_string(j)));
    complete += std::count(trace.begin(), trace.end(), '\n') == 3;  // the header and 2 units
  }
  std::printf("traces with their step: %d of %d\n", complete, kJobs);
  EXPECT_EQ(complete, kJobs);
}

}  // namespace
}  // namespace gnmr::testing
