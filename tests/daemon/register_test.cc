// Register and ImportState over real gRPC: a rank that comes back with
// another model under the same job id is refused with the difference named
// (FAILED_PRECONDITION), a restart with the same model is accepted, and a
// refused Register or ImportState changes nothing: the job keeps deciding.
#include "controller/state_codec.h"
#include "tests/daemon/test_daemon.h"

namespace gnmr::testing {
namespace {

std::vector<RawRank::Unit> Model() {
  return {{"fc1", 0, 1, 4096}, {"fc2", 0, 1, 512}, {"bar", 0, 1, 64}};
}

TEST_F(DaemonTest, ARankRegisteringAnotherUnitSetIsRefusedWithTheDifference) {
  StartDaemon();
  RawRank a(Tcp(), "x", 0, 1);
  ASSERT_TRUE(a.Register(Model(), nullptr, nullptr, 0xA).ok());
  a.Open();
  ASSERT_TRUE(a.SendStats(0, {1.0, 1.0, 1.0}));
  v1::Decision d;
  ASSERT_TRUE(a.WaitDecision(0, &d));

  const std::string before =
      "job 'x' rank 0 registered 3 units before; this registration differs: ";
  const std::string advice = ". A different model needs a new job id";
  struct Case {
    const char* what;
    std::vector<RawRank::Unit> units;
    uint64_t instance;
    std::string diff;
  };
  const std::vector<Case> cases = {
      {"numel, new and missing units (same instance)",
       {{"fc1", 0, 1, 1024}, {"fc2", 0, 1, 512}, {"foo", 0, 1, 64}},
       0xA,
       "unit 'fc1' numel 1024 vs 4096 before; unit 'foo' is new; unit 'bar' is missing"},
      {"a restarted trainer with another model (new instance)",
       {{"fc1", 0, 1, 4096}, {"fc2", 0, 1, 512}},
       0xB,
       "unit 'bar' is missing"},
      {"sharding",
       {{"fc1", 1, 2, 2048}, {"fc2", 0, 1, 512}, {"bar", 0, 1, 64}},
       0xB,
       "unit 'fc1' shard 1/2 vs 0/1 before"},
  };
  for (const Case& c : cases) {
    RawRank other(Tcp(), "x", 0, 1);
    v1::RegisterResponse resp;
    grpc::Status s = other.Register(c.units, &resp, nullptr, c.instance);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << c.what;
    EXPECT_EQ(s.error_message(), before + c.diff + advice) << c.what;
  }
  // Nothing changed: the first session still decides, in generation 1.
  ASSERT_TRUE(a.SendStats(1, {1.0, 1.0, 1.0}));
  ASSERT_TRUE(a.WaitDecision(1, &d));
  EXPECT_EQ(d.generation(), 1u);
  // A restarted trainer with the same model (in any order) is welcome.
  RawRank b(Tcp(), "x", 0, 1);
  v1::RegisterResponse resp;
  ASSERT_TRUE(b.Register({Model()[2], Model()[0], Model()[1]}, &resp, nullptr, 0xB).ok());
  EXPECT_EQ(resp.generation(), 2u);
  EXPECT_EQ(b.unit_ids(), (std::vector<uint32_t>{2, 0, 1}));
}

// A replica of a shard must have the shard's numel (the daemon averages
// replicas and sums shards); a different one is another model.
TEST_F(DaemonTest, AShardRegisteredWithAnotherNumelIsRefused) {
  StartDaemon();
  RawRank r0(Tcp(), "x", 0, 2), r1(Tcp(), "x", 1, 2);
  ASSERT_TRUE(r0.Register({{"w", 0, 2, 100}}).ok());
  grpc::Status s = r1.Register({{"w", 0, 2, 200}});
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(s.error_message(),
            "unit 0 ('w') shard 0/2 has numel 200 but was registered with 100; a different "
            "model needs a new job id");
  EXPECT_TRUE(r1.Register({{"w", 1, 2, 200}}).ok());  // the other shard may differ
  EXPECT_TRUE(r1.Register({{"w", 1, 2, 0}}).ok());    // 0: not stated
}

// The job's unit layout and its controller must never disagree (a report
// names units by id): a refused registration adds nothing to either.
TEST_F(DaemonTest, ARefusedRegistrationChangesNothing) {
  DaemonOptions opts;
  opts.registry.job.max_units = 3;
  StartDaemon(opts);
  RawRank r0(Tcp(), "x", 0, 2), r1(Tcp(), "x", 1, 2);
  ASSERT_TRUE(r0.Register({{"a"}, {"b"}}).ok());
  EXPECT_EQ(r1.Register({{"c"}, {"d"}}).error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  ASSERT_TRUE(r1.Register({{"c"}}).ok());
  EXPECT_EQ(r1.unit_ids(), std::vector<uint32_t>{2});
  r0.Open();
  r1.Open();
  ASSERT_TRUE(r0.SendStats(0, {1.0, 1.0}));
  ASSERT_TRUE(r1.SendStats(0, {1.0}));
  v1::Decision d;
  ASSERT_TRUE(r1.WaitDecision(0, &d));
  EXPECT_EQ(listener_.decision_failures.load(), 0u);
}

// Regression: an import that failed half-way (more units than the job may
// have) used to leave the layout with the units added before the failure
// while the controller was not replaced; a rank registering such a unit
// then made every later step fail to decide, silently. Now the import
// changes nothing, and the unit is created in both.
TEST_F(DaemonTest, AFailedImportChangesNothingAndTheJobKeepsDeciding) {
  DaemonOptions opts;
  opts.registry.job.max_units = 4;
  StartDaemon(opts);
  RawRank r0(Tcp(), "x", 0, 2), r1(Tcp(), "x", 1, 2);
  ASSERT_TRUE(r0.Register({{"a"}, {"b"}}).ok());
  r0.Open();
  v1::ControllerState state;
  ASSERT_TRUE(ExportState("x", &state).ok());
  for (const char* name : {"p", "q", "r"}) {  // 5 units: one too many
    v1::UnitHistory* u = state.add_units();
    u->set_name(name);
    u->set_last_step(-1);
  }
  grpc::Status s = ImportState("x", state);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << s.error_message();
  EXPECT_EQ(s.error_message(),
            "imported state cannot be added to job 'x': job would have more than 4 units");
  v1::ControllerState after;
  ASSERT_TRUE(ExportState("x", &after).ok());
  EXPECT_EQ(after.units_size(), 2);
  EXPECT_TRUE(listener_.EventsOf("x", "generation").empty());

  ASSERT_TRUE(r1.Register({{"p"}}).ok());
  EXPECT_EQ(r1.unit_ids(), std::vector<uint32_t>{2});
  r1.Open();
  for (int64_t step = 0; step < 3; ++step) {
    ASSERT_TRUE(r0.SendStats(step, {1.0, 1.0}));
    ASSERT_TRUE(r1.SendStats(step, {1.0}));
    v1::Decision d;
    ASSERT_TRUE(r0.WaitDecision(step, &d)) << "step " << step << " was not decided";
  }
  EXPECT_EQ(listener_.decision_failures.load(), 0u);
}

}  // namespace
}  // namespace gnmr::testing
