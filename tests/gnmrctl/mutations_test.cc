// gnmrctl's mutations against a live in-process daemon: config get/set,
// release, export/import round trips, and the admin-token rules.
#include <google/protobuf/util/json_util.h>

#include "controller/publish/wire_names.h"
#include "tests/gnmrctl/ctl_harness.h"

namespace gnmr::testing {
namespace {

std::string StateOf(const std::vector<v1::UnitInfo>& units, const std::string& name) {
  for (const v1::UnitInfo& u : units) {
    if (u.name() == name) return UnitStateName(u.state());
  }
  return "<missing>";
}

class CtlMutationTest : public CtlTest {
 protected:
  std::vector<v1::UnitInfo> UnitsVia(const std::string& job) {
    grpc::ClientContext ctx;
    v1::ListUnitsRequest req;
    req.set_job_id(job);
    v1::ListUnitsResponse resp;
    EXPECT_TRUE(Admin()->ListUnits(&ctx, req, &resp).ok());
    return {resp.units().begin(), resp.units().end()};
  }
};

TEST_F(CtlMutationTest, ConfigGetPrintsYamlThatSetReadsBack) {
  Start();
  DriveSpike();
  CtlResult r = Run({"config", "get", "--job", "j", "--target", unix_});
  ASSERT_EQ(r.code, 0) << Show(r);
  EXPECT_EQ(r.out.rfind("# job j, config version 1\n", 0), 0u) << r.out;
  EXPECT_NE(r.out.find("\nmax_o: 1\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\nema_decay: 0.9\n"), std::string::npos) << r.out;

  r = Run({"config", "get", "--job", "j", "--json", "--target", tcp_});
  ASSERT_EQ(r.code, 0) << Show(r);
  v1::GetConfigResponse got;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(r.out, &got).ok()) << r.out;
  EXPECT_EQ(got.config().max_o(), 1);
  EXPECT_EQ(got.config_version(), 1u);

  // A file, then --set overrides on top of it; keys in neither keep their
  // values.
  const std::string file = Write("cfg.yaml", "lock_steps: 7\nmax_o: 2\n");
  r = RunTcp({"config", "set", "--job", "j", "--file", file, "--set", "max_o=3", "--set",
              "actions=[{pattern: \"layers.0.*\", action: clip}]"});
  ASSERT_EQ(r.code, 0) << Show(r);
  EXPECT_EQ(r.out, "job j: config version 2 (was 1)\n");
  const v1::GetConfigResponse now = ConfigVia("j");
  EXPECT_EQ(now.config_version(), 2u);
  EXPECT_EQ(now.config().max_o(), 3);
  EXPECT_EQ(now.config().lock_steps(), 7);
  EXPECT_EQ(now.config().warmup(), 5);
  EXPECT_DOUBLE_EQ(now.config().ema_decay(), 0.9);
  ASSERT_EQ(now.config().actions_size(), 1);
  EXPECT_EQ(now.config().actions(0).action(), v1::ACTION_CLIP);

  // The output of `config get` is a valid --file.
  r = Run({"config", "get", "--job", "j", "--target", unix_});
  ASSERT_EQ(r.code, 0) << Show(r);
  const std::string saved = Write("saved.yaml", r.out);
  r = RunTcp({"config", "set", "--job", "j", "--set", "max_o=4"});
  ASSERT_EQ(r.code, 0) << Show(r);
  r = RunTcp({"config", "set", "--job", "j", "--file", saved, "--json"});
  ASSERT_EQ(r.code, 0) << Show(r);
  EXPECT_EQ(r.out, "{\"config_version\":\"4\"}\n");
  EXPECT_EQ(ConfigVia("j").config().max_o(), 3);

  // --dry-run changes nothing.
  r = RunTcp({"config", "set", "--job", "j", "--set", "tau=3.5", "--dry-run"});
  ASSERT_EQ(r.code, 0) << Show(r);
  EXPECT_NE(r.out.find("\ntau: 3.5\n"), std::string::npos) << r.out;
  EXPECT_EQ(ConfigVia("j").config_version(), 4u);
}

TEST_F(CtlMutationTest, BadConfigInputIsAUsageErrorAndChangesNothing) {
  Start();
  DriveSpike();
  CtlResult r = RunTcp({"config", "set", "--job", "j", "--set", "maxo=3"});
  EXPECT_EQ(r.code, 2) << Show(r);
  EXPECT_NE(r.err.find("gnmrctl: --set maxo=3: "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("maxo"), std::string::npos);
  r = RunTcp({"config", "set", "--job", "j", "--set", "max_o=-1"});
  EXPECT_EQ(r.code, 2) << Show(r);
  const std::string bad = Write("bad.yaml", "warmup: 5\nlock_step: 3\n");
  r = RunTcp({"config", "set", "--job", "j", "--file", bad});
  EXPECT_EQ(r.code, 2) << Show(r);
  EXPECT_NE(r.err.find(bad + ":2:"), std::string::npos) << r.err;
  r = RunTcp({"config", "set", "--job", "j", "--file", Path("missing.yaml")});
  EXPECT_EQ(r.code, 2) << Show(r);
  r = RunTcp({"config", "set", "--job", "j"});
  EXPECT_EQ(r.code, 2) << Show(r);
  EXPECT_NE(r.err.find("nothing to change"), std::string::npos) << r.err;
  EXPECT_EQ(ConfigVia("j").config_version(), 1u);
  r = RunTcp({"config", "set", "--job", "nope", "--set", "max_o=2"});
  EXPECT_EQ(r.code, 1) << Show(r);
  EXPECT_EQ(r.err.rfind("gnmrctl: NOT_FOUND: ", 0), 0u) << r.err;
}

TEST_F(CtlMutationTest, ReleaseEndsARecovery) {
  Start();
  DriveSpike();
  ASSERT_EQ(StateOf(UnitsVia("j"), "layers.1.mlp"), "recovery");
  CtlResult r = RunTcp({"release", "--job", "j", "--unit", "layers.1.mlp"});
  ASSERT_EQ(r.code, 0) << Show(r);
  EXPECT_EQ(r.out, "job j: released unit layers.1.mlp\n");
  EXPECT_EQ(StateOf(UnitsVia("j"), "layers.1.mlp"), "active");
  r = RunTcp({"release", "--job", "j", "--unit", "layers.1.mlp"});
  EXPECT_EQ(r.code, 1) << Show(r);
  EXPECT_EQ(r.err, "gnmrctl: NOT_FOUND: unit 'layers.1.mlp' is not in recovery\n");
  r = RunTcp({"release", "--job", "j"});
  EXPECT_EQ(r.code, 2) << Show(r);
}

// Issue 12, item 2: the operator's way out of a job whose steps went wrong.
TEST_F(CtlMutationTest, RewindStartsTheStepsOverInANewGeneration) {
  Start();
  DriveSpike();  // steps 0..10 decided in generation 1
  CtlResult r = RunTcp({"rewind", "--job", "j"});
  ASSERT_EQ(r.code, 0) << Show(r);
  EXPECT_EQ(r.out, "job j: rewound (generation 2): reports of any step are accepted\n");
  ASSERT_TRUE(rank_->WaitGeneration(2));
  v1::Decision d;
  EXPECT_TRUE(rank_->SendStats(3, {1.0, 1.0, 1.0, 1.0}));  // earlier than step 10
  ASSERT_TRUE(rank_->WaitDecisionIn(2, 3, &d));
  EXPECT_EQ(StateOf(UnitsVia("j"), "layers.1.mlp"), "recovery");  // locks stay

  r = RunTcp({"rewind", "--job", "j", "--to", "1000", "--json"});
  ASSERT_EQ(r.code, 0) << Show(r);
  EXPECT_EQ(r.out, "{\"generation\":\"3\"}\n");
  r = RunTcp({"rewind", "--job", "j", "--to", "-4"});
  EXPECT_EQ(r.code, 2) << Show(r);
  r = Run({"rewind", "--job", "j", "--target", tcp_});
  EXPECT_EQ(r.code, 1) << Show(r);
  EXPECT_EQ(r.err, "gnmrctl: UNAUTHENTICATED: wrong or missing admin token\n");
  r = RunTcp({"rewind", "--job", "nope"});
  EXPECT_EQ(r.code, 1) << Show(r);
  EXPECT_EQ(r.err.rfind("gnmrctl: NOT_FOUND: ", 0), 0u) << r.err;
}

TEST_F(CtlMutationTest, AdminTokenFromEnvironmentOrFile) {
  Start();
  DriveSpike();
  CtlResult r = Run({"release", "--job", "j", "--unit", "layers.1.mlp", "--target", tcp_},
                    {{"GNMR_ADMIN_TOKEN", admin_token_}});
  ASSERT_EQ(r.code, 0) << Show(r);
  const std::string token = Write("token", admin_token_ + "\n");
  r = Run({"config", "set", "--job", "j", "--set", "max_o=2", "--target", tcp_,
           "--admin-token-file", token});
  ASSERT_EQ(r.code, 0) << Show(r);
  EXPECT_EQ(ConfigVia("j").config().max_o(), 2);
}

TEST_F(CtlMutationTest, MutationsWithoutTheAdminTokenAreRefused) {
  Start();
  DriveSpike();
  CtlResult r = Run({"config", "set", "--job", "j", "--set", "max_o=3", "--target", tcp_});
  EXPECT_EQ(r.code, 1) << Show(r);
  EXPECT_EQ(r.err, "gnmrctl: UNAUTHENTICATED: wrong or missing admin token\n");
  r = Run({"release", "--job", "j", "--unit", "layers.1.mlp", "--target", unix_, "--admin-token",
           "wrong"});
  EXPECT_EQ(r.code, 1) << Show(r);
  EXPECT_EQ(r.err, "gnmrctl: UNAUTHENTICATED: wrong or missing admin token\n");
  r = Run({"import", "--job", "j", "--in", Write("s.json", "{\"format_version\": 1}"), "--target",
           tcp_});
  EXPECT_EQ(r.code, 1) << Show(r);
  EXPECT_NE(r.err.find("UNAUTHENTICATED"), std::string::npos) << r.err;
  EXPECT_EQ(ConfigVia("j").config_version(), 1u);
  EXPECT_EQ(StateOf(UnitsVia("j"), "layers.1.mlp"), "recovery");
}

TEST_F(CtlMutationTest, WithoutAnAdminTokenOnlyTheUnixSocketMutates) {
  admin_token_ = "";
  Start();
  DriveSpike();
  CtlResult r = Run({"config", "set", "--job", "j", "--set", "max_o=3", "--target", tcp_});
  EXPECT_EQ(r.code, 1) << Show(r);
  EXPECT_EQ(r.err.rfind("gnmrctl: PERMISSION_DENIED: admin mutations over TCP need", 0), 0u)
      << r.err;
  r = Run({"config", "set", "--job", "j", "--set", "max_o=3", "--target", unix_});
  ASSERT_EQ(r.code, 0) << Show(r);
  EXPECT_EQ(ConfigVia("j").config().max_o(), 3);
}

TEST_F(CtlMutationTest, ExportImportRoundTripBinaryAndJson) {
  Start();
  DriveSpike();
  RawRank other(Channel(), "k", 0, 1);  // same units, no steps yet
  ASSERT_TRUE(other.Register(TestUnits()).ok());
  const v1::ControllerState original = ExportVia("j");
  ASSERT_EQ(original.recovery_size(), 1);

  for (const std::string format : {"binary", "json"}) {
    SCOPED_TRACE(format);
    const std::string file = Path("state." + format);
    CtlResult r =
        Run({"export", "--job", "j", "--out", file, "--format", format, "--target", unix_});
    ASSERT_EQ(r.code, 0) << Show(r);
    EXPECT_NE(r.err.find("job j: exported 4 units, 1 in recovery, last step 10"), std::string::npos)
        << r.err;
    const std::string bytes = ReadAll(file);
    if (format == "json") {
      EXPECT_EQ(bytes.rfind("{", 0), 0u);
      EXPECT_NE(bytes.find("\"units\""), std::string::npos);
    } else {
      v1::ControllerState parsed;
      ASSERT_TRUE(parsed.ParseFromString(bytes));
      EXPECT_EQ(parsed.SerializeAsString(), original.SerializeAsString());
    }
    r = RunTcp({"import", "--job", "k", "--in", file});
    ASSERT_EQ(r.code, 0) << Show(r);
    EXPECT_EQ(r.out.rfind("job k: imported 4 units, 1 in recovery", 0), 0u) << r.out;
    // Bit-identical: every double survived the trip.
    EXPECT_EQ(ExportVia("k").SerializeAsString(), original.SerializeAsString());
    EXPECT_EQ(StateOf(UnitsVia("k"), "layers.1.mlp"), "recovery");
    // Start "k" over for the next format.
    ASSERT_EQ(RunTcp({"release", "--job", "k", "--unit", "layers.1.mlp"}).code, 0);
  }
}

TEST_F(CtlMutationTest, ImportRejectsBadFilesAndForeignStates) {
  Start();
  DriveSpike();
  CtlResult r = RunTcp({"import", "--job", "j", "--in", Write("junk", "\x08\x01\xff\xff")});
  EXPECT_EQ(r.code, 2) << Show(r);
  EXPECT_NE(r.err.find("not a ControllerState"), std::string::npos) << r.err;
  r = RunTcp({"import", "--job", "j", "--in", Write("junk.json", "{\"units\": 3}")});
  EXPECT_EQ(r.code, 2) << Show(r);
  r = RunTcp({"import", "--job", "j", "--in", Write("empty", "")});
  EXPECT_EQ(r.code, 2) << Show(r);
  r = RunTcp({"import", "--job", "j", "--in", Path("missing")});
  EXPECT_EQ(r.code, 2) << Show(r);
  r = RunTcp({"import", "--job", "j", "--in", dir_});  // a directory, not "empty file"
  EXPECT_EQ(r.code, 2) << Show(r);
  EXPECT_EQ(r.err, "gnmrctl: " + dir_ + ": is a directory, not a state file\n") << r.err;
  // A state of other units: the daemon refuses it.
  RawRank other(Channel(), "k", 0, 1);
  ASSERT_TRUE(other.Register({{"other.unit"}}).ok());
  ASSERT_EQ(Run({"export", "--job", "k", "--out", Path("k.pb"), "--target", tcp_}).code, 0);
  r = RunTcp({"import", "--job", "j", "--in", Path("k.pb")});
  EXPECT_EQ(r.code, 1) << Show(r);
  EXPECT_EQ(r.err.rfind("gnmrctl: FAILED_PRECONDITION: ", 0), 0u) << r.err;
  EXPECT_EQ(StateOf(UnitsVia("j"), "layers.1.mlp"), "recovery");
  // An export that fails leaves no file behind.
  r = Run({"export", "--job", "nope", "--out", Path("nope.pb"), "--target", tcp_});
  EXPECT_EQ(r.code, 1) << Show(r);
  EXPECT_FALSE(std::ifstream(Path("nope.pb")).good());
  EXPECT_FALSE(std::ifstream(Path("nope.pb.tmp")).good());
}

}  // namespace
}  // namespace gnmr::testing
