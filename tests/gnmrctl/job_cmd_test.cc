// `gnmrctl job delete` against a live in-process daemon: the job and its
// streams go, confirmation is required (--yes when stdin is not a
// terminal), the admin token rules of every mutation apply, and the help
// texts document it.
#include "tests/gnmrctl/ctl_harness.h"

namespace gnmr::testing {
namespace {

class CtlJobTest : public CtlTest {
 protected:
  std::vector<std::string> JobIds() { return ListJobIds(Channel()); }
};

TEST_F(CtlJobTest, DeleteEndsTheStreamsAndForgetsTheJob) {
  Start();
  DriveSpike();
  ASSERT_EQ(JobIds(), std::vector<std::string>{"j"});
  CtlResult r = RunTcp({"job", "delete", "--job", "j", "--yes"});
  ASSERT_EQ(r.code, 0) << Show(r);
  EXPECT_EQ(r.out,
            "job j: deleted (1 stream(s) closed; snapshots, event log and metrics removed)\n");
  EXPECT_TRUE(JobIds().empty());
  const grpc::Status ended = rank_->WaitEnd();
  EXPECT_EQ(ended.error_code(), grpc::StatusCode::ABORTED);
  EXPECT_NE(ended.error_message().find("job 'j' was deleted by an operator"), std::string::npos)
      << ended.error_message();
  ASSERT_EQ(listener_.Removed(), std::vector<std::string>{"j"});

  r = RunTcp({"job", "delete", "--job", "j", "--yes", "--json"});
  EXPECT_EQ(r.code, 1) << Show(r);
  EXPECT_EQ(r.err, "gnmrctl: NOT_FOUND: unknown job 'j'\n");
}

TEST_F(CtlJobTest, DeleteNeedsConfirmationAndTheAdminToken) {
  Start();
  DriveSpike();
  // stdin is /dev/null here, not a terminal: --yes is the only way.
  CtlResult r = RunTcp({"job", "delete", "--job", "j"});
  EXPECT_EQ(r.code, 2) << Show(r);
  EXPECT_EQ(r.err,
            "gnmrctl: job delete: deleting a job cannot be undone: confirm with --yes (see "
            "gnmrctl job delete --help)\n");
  r = Run({"job", "delete", "--job", "j", "--yes", "--target", tcp_});
  EXPECT_EQ(r.code, 1) << Show(r);
  EXPECT_EQ(r.err, "gnmrctl: UNAUTHENTICATED: wrong or missing admin token\n");
  r = Run({"job", "delete", "--job", "j", "--yes", "--target", unix_, "--admin-token", "wrong"});
  EXPECT_EQ(r.code, 1) << Show(r);
  EXPECT_EQ(r.err, "gnmrctl: UNAUTHENTICATED: wrong or missing admin token\n");
  r = RunTcp({"job", "delete", "--yes"});
  EXPECT_EQ(r.code, 2) << Show(r);
  EXPECT_EQ(JobIds(), std::vector<std::string>{"j"});  // nothing deleted
  EXPECT_TRUE(listener_.Removed().empty());
}

TEST_F(CtlJobTest, WithoutAnAdminTokenOnlyTheUnixSocketDeletes) {
  admin_token_ = "";
  Start();
  DriveSpike();
  CtlResult r = Run({"job", "delete", "--job", "j", "--yes", "--target", tcp_});
  EXPECT_EQ(r.code, 1) << Show(r);
  EXPECT_EQ(r.err.rfind("gnmrctl: PERMISSION_DENIED: admin mutations over TCP need", 0), 0u)
      << r.err;
  r = Run({"job", "delete", "--job", "j", "--yes", "--target", unix_, "--json"});
  ASSERT_EQ(r.code, 0) << Show(r);
  EXPECT_EQ(r.out, "{\"streams_closed\":1}\n");
  EXPECT_TRUE(JobIds().empty());
}

TEST_F(CtlJobTest, HelpDocumentsJobDelete) {
  CtlResult r = Run({"--help"});
  ASSERT_EQ(r.code, 0) << Show(r);
  EXPECT_NE(r.out.find("  job          job lifecycle: `job delete` forgets a job"),
            std::string::npos)
      << r.out;
  r = Run({"job", "--help"});
  ASSERT_EQ(r.code, 0) << Show(r);
  EXPECT_NE(r.out.find("usage: gnmrctl job delete --job J [--yes]"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("job_idle_expiry"), std::string::npos) << r.out;
  r = Run({"job", "delete", "--help"});
  ASSERT_EQ(r.code, 0) << Show(r);
  EXPECT_NE(r.out.find("--yes"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("gnmrctl export --job J"), std::string::npos) << r.out;
  r = Run({"job", "purge"});
  EXPECT_EQ(r.code, 2) << Show(r);
  EXPECT_EQ(r.err,
            "gnmrctl: job: unknown subcommand 'purge': expected delete (see gnmrctl job "
            "--help)\n");
}

}  // namespace
}  // namespace gnmr::testing
