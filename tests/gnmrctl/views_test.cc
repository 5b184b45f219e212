// gnmrctl's read-only views against a live in-process daemon: status,
// jobs, units, events (tables and --json), over TCP and the Unix socket.
#include <google/protobuf/util/json_util.h>

#include "controller/publish/event_json.h"
#include "tests/gnmrctl/ctl_harness.h"
#include "tests/testing/eventually.h"

namespace gnmr::testing {
namespace {

template <typename M>
M ParseJson(const std::string& line) {
  M m;
  const auto s = google::protobuf::util::JsonStringToMessage(line, &m);
  EXPECT_TRUE(s.ok()) << s.ToString() << "\n" << line;
  return m;
}

TEST_F(CtlTest, StatusShowsTheDaemon) {
  Start();
  DriveSpike();
  CtlResult r = Run({"status", "--target", unix_});
  ASSERT_EQ(r.code, 0) << Show(r);
  EXPECT_EQ(r.err, "");
  EXPECT_EQ(LinesWith(r.out, "version:").at(0), "version:    test-1.2") << r.out;
  EXPECT_EQ(Fields(LinesWith(r.out, "jobs:").at(0)), (std::vector<std::string>{"jobs:", "1"}));
  EXPECT_EQ(Fields(LinesWith(r.out, "sessions:").at(0)),
            (std::vector<std::string>{"sessions:", "1"}));
  EXPECT_NE(LinesWith(r.out, "listen:").at(0).find("unix:" + socket_), std::string::npos);
  EXPECT_NE(r.out.find("state dir:  /var/lib/gnmr-test"), std::string::npos) << r.out;

  r = Run({"status", "--json"}, {{"GNMR_TARGET", tcp_}});  // the target from the environment
  ASSERT_EQ(r.code, 0) << Show(r);
  const auto status = ParseJson<v1::GetStatusResponse>(r.out);
  EXPECT_EQ(status.version(), "test-1.2");
  EXPECT_EQ(status.jobs(), 1u);
  EXPECT_GT(status.uptime_seconds(), 0.0);
}

TEST_F(CtlTest, JobsTableRanksAndJson) {
  Start();
  DriveSpike();
  CtlResult r = Run({"jobs", "--target", tcp_});
  ASSERT_EQ(r.code, 0) << Show(r);
  ASSERT_EQ(LinesWith(r.out, "JOB").size(), 1u) << r.out;
  EXPECT_EQ(Fields(LinesWith(r.out, "JOB")[0]),
            (std::vector<std::string>{"JOB", "WORLD", "RANKS", "UNITS", "LAST", "STEP", "RECOVERY",
                                      "ADMITTED", "DENIED", "RECOVERY%"}));
  // j: world 1, 1/1 ranks connected, 4 units, step 10, 1 of max_o 1 in
  // recovery, 1 admission, 1 denial; recovery fraction 0 (not yet in force).
  const std::vector<std::string> row = Fields(r.out.substr(r.out.find('\n') + 1));
  EXPECT_EQ(row, (std::vector<std::string>{"j", "1", "1/1", "4", "10", "1/1", "1", "1", "0.00%"}))
      << r.out;
  EXPECT_TRUE(LinesWith(r.out, "raw-test").empty());  // no ranks without --ranks

  r = Run({"jobs", "--ranks", "--target", unix_});
  ASSERT_EQ(r.code, 0) << Show(r);
  const auto ranks = LinesWith(r.out, "raw-test");
  ASSERT_EQ(ranks.size(), 1u) << r.out;
  const auto f = Fields(ranks[0]);
  // rank, connected, step, lag, seen, "ago", steps without a decision, client
  ASSERT_EQ(f.size(), 8u) << ranks[0];
  EXPECT_EQ(f[0], "0");
  EXPECT_EQ(f[1], "yes");
  EXPECT_EQ(f[2], "10");
  EXPECT_EQ(f[3], "0");
  EXPECT_EQ(f[6], "11");  // the raw rank acks nothing: no decision since it registered
  EXPECT_EQ(ranks[0].rfind("    ", 0), 0u);  // indented below its job

  r = Run({"jobs", "--json", "--target", tcp_});
  ASSERT_EQ(r.code, 0) << Show(r);
  const auto jobs = ParseJson<v1::ListJobsResponse>(r.out);
  ASSERT_EQ(jobs.jobs_size(), 1);
  EXPECT_EQ(jobs.jobs(0).job_id(), "j");
  EXPECT_EQ(jobs.jobs(0).in_recovery(), 1u);
  EXPECT_EQ(jobs.jobs(0).denials(), 1u);
  ASSERT_EQ(jobs.jobs(0).ranks_size(), 1);
  EXPECT_TRUE(jobs.jobs(0).ranks(0).connected());
  EXPECT_NE(r.out.find("\"job_id\":\"j\""), std::string::npos);  // proto field names

  r = Run({"jobs", "--job", "nope", "--target", tcp_});
  EXPECT_EQ(r.code, 1) << Show(r);
  EXPECT_EQ(r.err, "gnmrctl: NOT_FOUND: no job 'nope'\n");
}

TEST_F(CtlTest, UnitsTopAndStateFilter) {
  Start();
  DriveSpike();
  CtlResult r = Run({"units", "--job", "j", "--top", "2", "--target", tcp_});
  ASSERT_EQ(r.code, 0) << Show(r);
  std::istringstream lines(r.out);
  std::string header, first, second, extra;
  std::getline(lines, header);
  std::getline(lines, first);
  std::getline(lines, second);
  EXPECT_FALSE(std::getline(lines, extra)) << r.out;  // exactly two units
  EXPECT_EQ(Fields(header), (std::vector<std::string>{"UNIT", "STATE", "GNMR", "DELTA", "NORM",
                                                      "MU", "FWD", "F/S/U", "TRIGGER", "ACTION",
                                                      "SINCE", "UNTIL", "LAST", "STEP"}));
  // Highest GNMR first: the admitted unit (norm 20 over mu 1, Delta 20 - 1),
  // then the denied one (10); since = apply step 11, until = 11 + 5. The
  // spike entered the mean capped at tau * mu: mu = 0.9 * 1 + 0.1 * 2.5.
  // No forward statistics: FWD -. TRIGGER: why the first is in recovery,
  // what the denied one's last sample triggered.
  EXPECT_EQ(Fields(first),
            (std::vector<std::string>{"layers.1.mlp", "recovery", "20", "19", "20", "1.15", "-",
                                      "gnmr", "promote", "11", "16", "10"}));
  EXPECT_EQ(Fields(second),
            (std::vector<std::string>{"layers.1.attn", "active", "10", "9", "10", "1.15", "-",
                                      "gnmr", "promote", "-", "-", "10"}));
  // Columns are aligned: every GNMR cell ends where the header's does.
  EXPECT_EQ(header.find("GNMR") + 4, first.find(" 20 ") + 3) << r.out;

  r = Run({"units", "--job", "j", "--state", "recovery", "--target", unix_});
  ASSERT_EQ(r.code, 0) << Show(r);
  EXPECT_EQ(LinesWith(r.out, "layers.").size(), 1u) << r.out;
  EXPECT_EQ(LinesWith(r.out, "layers.1.mlp").size(), 1u) << r.out;

  r = Run({"units", "--job", "j", "--state", "active", "--top", "1", "--json", "--target", tcp_});
  ASSERT_EQ(r.code, 0) << Show(r);
  const auto units = ParseJson<v1::ListUnitsResponse>(r.out);
  ASSERT_EQ(units.units_size(), 1);
  EXPECT_EQ(units.units(0).name(), "layers.1.attn");  // top GNMR among the active ones

  r = Run({"units", "--job", "j", "--target", tcp_});
  ASSERT_EQ(r.code, 0) << Show(r);
  EXPECT_EQ(LinesWith(r.out, "layers.").size(), 4u) << r.out;
  EXPECT_LT(r.out.find("layers.0.attn"), r.out.find("layers.1.mlp"));  // id order
}

TEST_F(CtlTest, UnitsFilterByPatternAndPage) {
  Start();
  DriveSpike();
  CtlResult r = Run({"units", "--job", "j", "--pattern", "layers.1.*", "--target", tcp_});
  ASSERT_EQ(r.code, 0) << Show(r);
  EXPECT_EQ(LinesWith(r.out, "layers.").size(), 2u) << r.out;
  EXPECT_EQ(LinesWith(r.out, "layers.0.").size(), 0u) << r.out;
  EXPECT_EQ(r.err, "");  // all pages: no page line

  r = Run({"units", "--job", "j", "--pattern", "layers.*", "--limit", "3", "--target", tcp_});
  ASSERT_EQ(r.code, 0) << Show(r);
  EXPECT_EQ(LinesWith(r.out, "layers.").size(), 3u) << r.out;
  EXPECT_EQ(r.err, "units 1-3 of 4; next page: --offset 3\n");
  r = Run({"units", "--job", "j", "--limit", "3", "--offset", "3", "--target", tcp_});
  ASSERT_EQ(r.code, 0) << Show(r);
  ASSERT_EQ(LinesWith(r.out, "layers.").size(), 1u) << r.out;
  EXPECT_EQ(Fields(LinesWith(r.out, "layers.")[0])[0], "layers.1.mlp");
  EXPECT_EQ(r.err, "units 4-4 of 4; last page\n");

  r = Run({"units", "--job", "j", "--offset", "3", "--target", tcp_});
  EXPECT_EQ(r.code, 2) << Show(r);
  EXPECT_NE(r.err.find("--offset needs --limit"), std::string::npos) << r.err;
  r = Run({"units", "--job", "j", "--pattern", "a b", "--target", tcp_});
  EXPECT_NE(r.code, 0) << Show(r);
  EXPECT_NE(r.err.find("pattern has a byte outside printable ASCII"), std::string::npos) << r.err;
}

TEST_F(CtlTest, UnitsOfAJobLargerThanOneAnswerComeInPages) {
  // 400 units do not fit one 8 KiB answer: gnmrctl fetches every page.
  DaemonOptions opts;
  opts.max_message_bytes = 8 << 10;
  Start(opts);
  RawRank rank(Channel(), "big", 0, 1);
  std::vector<RawRank::Unit> units;
  for (int i = 0; i < 400; ++i) units.push_back({"u" + std::to_string(i)});
  ASSERT_TRUE(rank.Register(units).ok());
  CtlResult r = Run({"units", "--job", "big", "--json", "--target", tcp_});
  ASSERT_EQ(r.code, 0) << Show(r);
  const auto all = ParseJson<v1::ListUnitsResponse>(r.out);
  ASSERT_EQ(all.units_size(), 400);
  for (int i = 0; i < 400; ++i) EXPECT_EQ(all.units(i).name(), "u" + std::to_string(i));
  EXPECT_EQ(all.matched(), 400u);
  // One page with --limit is still cut by the answer's byte budget.
  r = Run({"units", "--job", "big", "--limit", "400", "--json", "--target", tcp_});
  ASSERT_EQ(r.code, 0) << Show(r);
  const auto page = ParseJson<v1::ListUnitsResponse>(r.out);
  EXPECT_LT(page.units_size(), 400);
  EXPECT_EQ(page.next_offset(), static_cast<uint32_t>(page.units_size()));
  EXPECT_NE(r.err.find("next page: --offset " + std::to_string(page.units_size())),
            std::string::npos)
      << r.err;
}

TEST_F(CtlTest, EventsOneLineEachAndJsonLines) {
  Start();
  DriveSpike();
  CtlResult r = Run({"events", "--job", "j", "--target", tcp_});
  ASSERT_EQ(r.code, 0) << Show(r);
  const auto admissions = LinesWith(r.out, "admission");
  ASSERT_EQ(admissions.size(), 1u) << r.out;
  auto f = Fields(admissions[0]);
  // TIME STEP KIND UNIT ACTION TRIGGER GNMR DELTA FWD-F/S/U UNTIL DETAIL
  ASSERT_EQ(f.size(), 11u) << admissions[0];
  EXPECT_EQ(f[1], "10");
  EXPECT_EQ(f[3], "layers.1.mlp");
  EXPECT_EQ(f[4], "promote");
  EXPECT_EQ(f[5], "gnmr");
  EXPECT_EQ(f[6], "20");
  EXPECT_EQ(f[8], "-");  // no forward rule fired
  EXPECT_EQ(f[9], "16");
  const auto denials = LinesWith(r.out, "denial");
  ASSERT_EQ(denials.size(), 1u) << r.out;
  EXPECT_NE(denials[0].find("layers.1.attn"), std::string::npos);
  EXPECT_NE(denials[0].find("max_o reached"), std::string::npos);

  r = Run({"events", "--job", "j", "--json", "--limit", "1", "--target", unix_});
  ASSERT_EQ(r.code, 0) << Show(r);
  ASSERT_EQ(LinesWith(r.out, "{").size(), 1u) << r.out;  // the newest one
  // The event log's line format, so the log's own parser reads it.
  const StatusOr<v1::Event> event = ParseEventJsonLine(r.out);
  ASSERT_TRUE(event.ok()) << event.status().ToString() << "\n" << r.out;
  EXPECT_EQ(event->kind(), v1::EVENT_KIND_DENIAL);
  EXPECT_EQ(event->observed_step(), 10);
  EXPECT_NE(r.out.find("\"kind\":\"denial\""), std::string::npos) << r.out;

  r = Run({"events", "--job", "j", "--since", "11", "--target", tcp_});
  ASSERT_EQ(r.code, 0) << Show(r);
  EXPECT_EQ(r.out, "no events\n");
}

// An admission a forward rule triggered shows the forward channel's
// figures F/S/U (docs/metrics.md, "Event log"); --json carries them.
TEST_F(CtlTest, EventsShowTheForwardFiguresOfAForwardTrigger) {
  Start();
  RawRank rank(Channel(), "fj", 0, 1);
  const v1::ControllerConfig cfg = FastConfig(/*max_o=*/1);
  v1::RegisterResponse resp;
  ASSERT_TRUE(rank.Register({{"blocks.0.fc1"}}, &resp, &cfg).ok());
  rank.Open();
  for (int64_t step = 0; step <= 10; ++step) {
    // A 1000-element forward tensor, one element at the maximum; at step
    // 10 it saturates 300 (S = 300) while its norm (F = 1) and gradient stay.
    v1::ClientMessage m;
    v1::StepStats* s = m.mutable_stats();
    s->set_step(step);
    s->add_unit_id(resp.unit_ids(0));
    s->add_sumsq(1.0);
    s->add_fwd_sumsq(4.0);
    s->add_fwd_amax(1.0);
    s->add_fwd_saturated(step == 10 ? 300 : 1);
    s->add_fwd_zeros(0);
    s->add_fwd_numel(1000);
    ASSERT_TRUE(rank.Send(m));
    v1::Decision d;
    ASSERT_TRUE(rank.WaitDecision(step, &d)) << "step " << step;
  }
  ASSERT_TRUE(Eventually([&] { return !listener_.EventsOf("fj", "admission").empty(); }));
  CtlResult r = Run({"events", "--job", "fj", "--target", tcp_});
  ASSERT_EQ(r.code, 0) << Show(r);
  ASSERT_EQ(LinesWith(r.out, "FWD F/S/U").size(), 1u) << r.out;
  const auto admissions = LinesWith(r.out, "admission");
  ASSERT_EQ(admissions.size(), 1u) << r.out;
  const auto f = Fields(admissions[0]);
  ASSERT_EQ(f.size(), 11u) << admissions[0];
  EXPECT_EQ(f[5], "saturation");
  EXPECT_EQ(f[8], "1/300/0");

  r = Run({"events", "--job", "fj", "--json", "--target", unix_});
  ASSERT_EQ(r.code, 0) << Show(r);
  const StatusOr<v1::Event> event = ParseEventJsonLine(LinesWith(r.out, "admission").at(0));
  ASSERT_TRUE(event.ok()) << event.status().ToString() << "\n" << r.out;
  EXPECT_NEAR(event->saturation_ratio(), 300.0, 1e-9);
  EXPECT_NEAR(event->fwd_ratio(), 1.0, 1e-9);
  EXPECT_NE(r.out.find("\"underflow_ratio\":0"), std::string::npos) << r.out;

  // `units` shows the last sample's F/S/U and why the unit is in recovery.
  r = Run({"units", "--job", "fj", "--target", tcp_});
  ASSERT_EQ(r.code, 0) << Show(r);
  const auto rows = LinesWith(r.out, "blocks.0.fc1");
  ASSERT_EQ(rows.size(), 1u) << r.out;
  const auto u = Fields(rows[0]);
  ASSERT_EQ(u.size(), 12u) << rows[0];
  EXPECT_EQ(u[1], "recovery");
  EXPECT_EQ(u[6], "1/300/0");
  EXPECT_EQ(u[7], "saturation");
}

TEST_F(CtlTest, FollowPrintsNewEventsOnceUntilInterrupted) {
  Start();
  DriveSpike();
  const std::string out = Path("follow.out"), err = Path("follow.err");
  const pid_t pid =
      Spawn({"events", "--job", "j", "--follow", "--json", "--target", tcp_}, out, err);
  auto wait_for = [&](const std::string& needle) {
    return Eventually([&] { return ReadAll(out).find(needle) != std::string::npos; });
  };
  ASSERT_TRUE(wait_for("\"denial\"")) << ReadAll(out) << ReadAll(err);
  // New events at the same step and at later steps show up, once each.
  grpc::ClientContext ctx;
  ctx.AddMetadata("x-gnmr-admin-token", admin_token_);
  v1::ReleaseUnitRequest rel;
  rel.set_job_id("j");
  rel.set_unit("layers.1.mlp");
  v1::ReleaseUnitResponse rel_resp;
  ASSERT_TRUE(Admin()->ReleaseUnit(&ctx, rel, &rel_resp).ok());
  ASSERT_TRUE(wait_for("admin_release")) << ReadAll(out);
  EXPECT_EQ(Step(rank_.get(), 11, {1.0, 1.0, 100.0, 1.0}).admitted_size(), 1);  // layers.1.attn
  ASSERT_TRUE(wait_for("\"observed_step\":11")) << ReadAll(out);
  std::this_thread::sleep_for(std::chrono::milliseconds(1200));  // one more poll
  ASSERT_EQ(::kill(pid, SIGINT), 0);
  EXPECT_EQ(Wait(pid), 0) << ReadAll(err);
  const std::string text = ReadAll(out);
  EXPECT_EQ(LinesWith(text, "\"denial\"").size(), 1u) << text;
  EXPECT_EQ(LinesWith(text, "admin_release").size(), 1u) << text;
  EXPECT_EQ(LinesWith(text, "\"admission\"").size(), 2u) << text;
  std::vector<std::string> lines = LinesWith(text, "{");
  std::sort(lines.begin(), lines.end());
  EXPECT_EQ(std::unique(lines.begin(), lines.end()), lines.end()) << text;  // no repeats
}

TEST_F(CtlTest, NonFiniteStatisticsShowAsNan) {
  Start();
  RawRank rank(Channel(), "n", 0, 1);
  const v1::ControllerConfig cfg = FastConfig();
  ASSERT_TRUE(rank.Register({{"a"}, {"b"}}, nullptr, &cfg).ok());
  rank.Open();
  for (int64_t step = 0; step <= 6; ++step) {
    Step(&rank, step, {1.0, step == 6 ? std::nan("") : 1.0});
  }
  CtlResult r = Run({"units", "--job", "n", "--target", tcp_});
  ASSERT_EQ(r.code, 0) << Show(r);
  const auto b = Fields(LinesWith(r.out, "b ").at(0));
  ASSERT_EQ(b.size(), 12u) << r.out;
  EXPECT_EQ(b[1], "recovery");
  EXPECT_EQ(b[4], "nan") << r.out;        // NORM
  EXPECT_EQ(b[7], "nonfinite") << r.out;  // TRIGGER: why it is in recovery
  EXPECT_EQ(LinesWith(r.out, "nan").size(), 1u) << r.out;
  r = Run({"events", "--job", "n", "--target", tcp_});
  ASSERT_EQ(r.code, 0) << Show(r);
  EXPECT_EQ(LinesWith(r.out, "nonfinite").size(), 1u) << r.out;
}

TEST_F(CtlTest, EveryCommandHasHelp) {
  Start();
  for (const std::string cmd : {"status", "jobs", "units", "events", "release", "config get",
                                "config set", "export", "import", "rewind"}) {
    std::vector<std::string> args = Fields(cmd);
    args.push_back("--help");
    const CtlResult r = Run(args);
    EXPECT_EQ(r.code, 0) << cmd << "\n" << Show(r);
    EXPECT_EQ(r.out.rfind("usage: gnmrctl " + cmd, 0), 0u) << r.out;
    EXPECT_NE(r.out.find("--target T"), std::string::npos) << cmd;
  }
  const CtlResult r = Run({"--help"});
  ASSERT_EQ(r.code, 0);
  for (const char* cmd : {"status", "jobs", "units", "events", "release", "config", "export",
                          "import", "rewind", "replay"}) {
    EXPECT_NE(r.out.find(std::string("  ") + cmd + " "), std::string::npos) << cmd;
  }
}

}  // namespace
}  // namespace gnmr::testing
