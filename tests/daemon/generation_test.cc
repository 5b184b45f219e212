// Job generations over real gRPC (docs/safety.md, rule 3): the generation
// in Register responses, GenerationStart and decisions; a new incarnation of
// the job's ranks starts one and rewinds the steps (the others join it); an
// import starts one whose first decision is the imported state's last one,
// rebuilt; a stream that attaches gets the generation and its recent
// decisions; next_lag announces a lag change one decision ahead.
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

#include "tests/daemon/test_daemon.h"
#include "tests/testing/eventually.h"

namespace gnmr::testing {
namespace {

const std::vector<RawRank::Unit> kUnits = {{"x"}, {"m"}};

v1::ControllerConfig LongLocks() {
  v1::ControllerConfig cfg = FastConfig();
  cfg.set_lock_steps(30);
  return cfg;
}

// Both ranks report steps [from, to); `spike_at` spikes unit "m".
void RunSteps(std::vector<RawRank*> ranks, int64_t from, int64_t to, int64_t spike_at = -1) {
  for (int64_t s = from; s < to; ++s) {
    for (RawRank* r : ranks) ASSERT_TRUE(r->SendStats(s, {1.0, s == spike_at ? 100.0 : 1.0}));
  }
}

// Registers each rank with instance `instance + rank` and opens its stream.
void Attach(std::vector<RawRank*> ranks, const v1::ControllerConfig& cfg, uint64_t instance) {
  for (uint32_t r = 0; r < ranks.size(); ++r) {
    ASSERT_TRUE(ranks[r]->Register(kUnits, nullptr, &cfg, instance + r).ok());
    ranks[r]->Open();
  }
}

// Waits until the job has no attached stream (the server noticed a close).
bool NoneConnected(std::shared_ptr<grpc::Channel> channel, const std::string& job) {
  auto admin = v1::Admin::NewStub(channel);
  bool rpc_failed = false;
  const bool none = Eventually([&] {
    grpc::ClientContext ctx;
    v1::ListJobsResponse resp;
    if (!admin->ListJobs(&ctx, {}, &resp).ok()) return rpc_failed = true;
    bool any = false;
    for (const auto& j : resp.jobs()) {
      for (const auto& r : j.ranks()) any |= j.job_id() == job && r.connected();
    }
    return !any;
  });
  return none && !rpc_failed;
}

TEST_F(DaemonTest, EveryStreamStartsWithTheGenerationAndDecisionsCarryIt) {
  StartDaemon();
  const v1::ControllerConfig cfg = FastConfig();
  RawRank a(Tcp(), "j", 0, 1);
  v1::RegisterResponse resp;
  ASSERT_TRUE(a.Register(kUnits, &resp, &cfg, 0xA).ok());
  EXPECT_EQ(resp.generation(), 1u);
  a.Open();
  ASSERT_TRUE(a.WaitMessages(1));
  const v1::ServerMessage first = a.messages()[0];
  ASSERT_TRUE(first.has_generation());
  EXPECT_EQ(first.generation().generation(), 1u);
  EXPECT_EQ(first.generation().next_lag(), 1);
  RunSteps({&a}, 0, 3);
  v1::Decision d;
  ASSERT_TRUE(a.WaitDecision(2, &d));
  EXPECT_EQ(d.generation(), 1u);
  EXPECT_EQ(d.next_lag(), 1);
  EXPECT_EQ(d.apply_step(), 3);

  // A lag change is announced by the next decision and used by the one
  // after it.
  ASSERT_TRUE(SetConfig("j", FastConfig(2, 5, /*lag=*/3)).ok());
  RunSteps({&a}, 3, 5);
  ASSERT_TRUE(a.WaitDecision(3, &d));
  EXPECT_EQ(d.apply_step(), 4);
  EXPECT_EQ(d.next_lag(), 3);
  ASSERT_TRUE(a.WaitDecision(4, &d));
  EXPECT_EQ(d.apply_step(), 7);
  EXPECT_EQ(d.next_lag(), 3);
}

// Crash-restart under the same job id: the new incarnation starts
// generation 2 and the job rewinds (the resumed steps, at or before the
// last closed one, are accepted). Its first rank registers while the old
// incarnation's rank 1 is still attached (its process not gone yet): that
// rank rejoins generation 1, and the generation starts once no rank of the
// old timeline is left (here: rank 1's new instance replaces the old
// stream). The controller keeps its history and locks, and its sequence.
TEST_F(DaemonTest, NewIncarnationStartsAGenerationTheOthersJoinAndStepsRewind) {
  StartDaemon();
  const v1::ControllerConfig cfg = LongLocks();
  RawRank a0(Tcp(), "j", 0, 2), a1(Unix(), "j", 1, 2);
  Attach({&a0, &a1}, cfg, 0xA0);
  RunSteps({&a0, &a1}, 0, 20, /*spike_at=*/12);
  v1::Decision last, spike;
  ASSERT_TRUE(a1.WaitDecision(19, &last));
  ASSERT_TRUE(a1.WaitDecision(12, &spike));
  ASSERT_EQ(spike.admitted_size(), 1);  // "m": in force [13, 43)
  EXPECT_EQ(last.generation(), 1u);

  // The trainer dies and comes back from a checkpoint of step 9.
  a0.Close();
  RawRank b0(Tcp(), "j", 0, 2), b1(Unix(), "j", 1, 2);
  v1::RegisterResponse resp;
  ASSERT_TRUE(b0.Register(kUnits, &resp, &cfg, 0xB0).ok());
  EXPECT_EQ(resp.generation(), 1u);  // rank 1 of the old timeline is still attached
  ASSERT_TRUE(b1.Register(kUnits, &resp, &cfg, 0xB1).ok());
  EXPECT_EQ(resp.generation(), 2u);
  EXPECT_EQ(resp.last_step(), -1);                                  // rewound: any step may come
  EXPECT_EQ(a1.WaitEnd().error_code(), grpc::StatusCode::ABORTED);  // replaced
  // The same instance registering again changes nothing.
  ASSERT_TRUE(b0.Register(kUnits, &resp, &cfg, 0xB0).ok());
  EXPECT_EQ(resp.generation(), 2u);
  b0.Open();
  b1.Open();

  RunSteps({&b0, &b1}, 10, 15);
  v1::Decision d;
  ASSERT_TRUE(b0.WaitDecision(10, &d));
  EXPECT_EQ(d.generation(), 2u);
  EXPECT_EQ(d.apply_step(), 11);
  EXPECT_EQ(d.sequence(), last.sequence() + 1);
  ASSERT_EQ(d.recovery_size(), 1);  // the lock from step 12, unchanged
  EXPECT_EQ(d.recovery(0).since(), 13);
  EXPECT_EQ(d.recovery(0).until(), 43);
  ASSERT_TRUE(b1.WaitDecision(14, &d));
  EXPECT_EQ(d.generation(), 2u);
  EXPECT_EQ(listener_.late.load(), 0u);
  // The new streams got generation 2 first and no decision of generation 1.
  for (RawRank* r : {&b0, &b1}) {
    const std::vector<v1::ServerMessage> msgs = r->messages();
    ASSERT_GE(msgs.size(), 2u);
    ASSERT_TRUE(msgs[0].has_generation());
    EXPECT_EQ(msgs[0].generation().generation(), 2u);
    EXPECT_EQ(msgs[0].generation().next_lag(), 1);
    for (size_t i = 1; i < msgs.size(); ++i) {
      ASSERT_TRUE(msgs[i].has_decision());
      EXPECT_EQ(msgs[i].decision().generation(), 2u);
    }
  }
  const std::vector<v1::Event> gens = listener_.EventsOf("j", "generation");
  ASSERT_EQ(gens.size(), 1u);
  EXPECT_EQ(gens[0].detail(), "generation 2: rank 1 registered as a new incarnation");
}

// A whole job's restart: its old ranks go quiet. The first rank of the
// new incarnation waits while an old one was heard from lately; the
// generation starts once every rank registered as a new instance, or once
// the old ones have been quiet for the silence (here 1.5 s: 5 deadlines).
// The daemon's clock moves only when the test says: "lately" and "quiet"
// do not depend on how fast the machine is.
TEST_F(DaemonTest, ARestartStartsTheGenerationOnceTheOldRanksAreGoneOrQuiet) {
  DaemonOptions opts;
  opts.registry.job.incarnation_silence = std::chrono::milliseconds(100);
  opts.clock = &clock_;
  StartDaemon(opts);
  const v1::ControllerConfig cfg = LongLocks();
  RawRank a0(Tcp(), "j", 0, 3), a1(Unix(), "j", 1, 3), a2(Tcp(), "j", 2, 3);
  Attach({&a0, &a1, &a2}, cfg, 0xA0);
  RunSteps({&a0, &a1, &a2}, 0, 10);
  for (RawRank* r : {&a0, &a1, &a2}) r->Close();
  ASSERT_TRUE(NoneConnected(Tcp(), "j"));
  RawRank b0(Tcp(), "j", 0, 3), b1(Unix(), "j", 1, 3), b2(Tcp(), "j", 2, 3);
  v1::RegisterResponse resp;
  ASSERT_TRUE(b0.Register(kUnits, &resp, &cfg, 0xB0).ok());
  EXPECT_EQ(resp.generation(), 1u);  // ranks 1 and 2 were heard from a moment ago
  ASSERT_TRUE(b1.Register(kUnits, &resp, &cfg, 0xB1).ok());
  EXPECT_EQ(resp.generation(), 1u);
  ASSERT_TRUE(b2.Register(kUnits, &resp, &cfg, 0xB2).ok());
  EXPECT_EQ(resp.generation(), 2u);  // every rank a new instance
  EXPECT_EQ(resp.last_step(), -1);
  // Another restart, of two ranks of three; the third old one goes quiet.
  b0.Open();
  ASSERT_TRUE(b0.WaitGeneration(2));
  RawRank c0(Tcp(), "j", 0, 3), c1(Unix(), "j", 1, 3);
  ASSERT_TRUE(c0.Register(kUnits, &resp, &cfg, 0xC0).ok());
  ASSERT_TRUE(c1.Register(kUnits, &resp, &cfg, 0xC1).ok());
  EXPECT_EQ(resp.generation(), 2u);  // rank 2 of generation 2 registered a moment ago
  c0.Open();
  clock_.Advance(std::chrono::milliseconds(1499));
  EXPECT_FALSE(c0.WaitGeneration(3, std::chrono::milliseconds(200)));  // not quiet long enough
  clock_.Advance(std::chrono::milliseconds(2));
  ASSERT_TRUE(c0.WaitGeneration(3, std::chrono::seconds(10)));  // after 1.5 s of quiet
}

// A rank in a crash loop (a new instance every few steps) while the others
// train: before, each registration started a generation, so the honest
// ranks' decisions were voided again and again (two honest ranks applied
// different plans on 88 of 150 steps). Now it rejoins their timeline: the
// honest ranks see generation 1 and a decision of every step. Once they are
// gone, the waiting incarnation starts its generation.
TEST_F(DaemonTest, ARankInACrashLoopNeverStartsAGenerationUnderTheOthers) {
  DaemonOptions opts;
  opts.registry.job.incarnation_silence = std::chrono::milliseconds(100);
  opts.clock = &clock_;  // the honest ranks stay "heard from lately" however slow the machine
  StartDaemon(opts);
  const v1::ControllerConfig cfg = LongLocks();
  RawRank h0(Tcp(), "j", 0, 3), h1(Unix(), "j", 1, 3);
  Attach({&h0, &h1}, cfg, 0xA0);
  std::vector<std::unique_ptr<RawRank>> loop;
  for (int64_t s = 0; s < 30; ++s) {
    if (s % 3 == 0) {  // rank 2 restarts: a new instance, from step 0
      if (!loop.empty()) loop.back()->Close();
      loop.push_back(std::make_unique<RawRank>(Tcp(), "j", 2, 3));
      v1::RegisterResponse resp;
      ASSERT_TRUE(loop.back()->Register(kUnits, &resp, &cfg, 0xC000 + s).ok());
      EXPECT_EQ(resp.generation(), 1u) << "step " << s;
      loop.back()->Open();
      if (s > 0) {
        ASSERT_TRUE(loop.back()->SendStats(0, {1.0, 1.0}));  // late
      }
    }
    ASSERT_TRUE(h0.SendStats(s, {1.0, 1.0}));
    ASSERT_TRUE(h1.SendStats(s, {1.0, 1.0}));
    ASSERT_TRUE(loop.back()->SendStats(s, {1.0, 1.0}));  // it catches up
    v1::Decision d0, d1;
    ASSERT_TRUE(h0.WaitDecision(s, &d0)) << "step " << s;
    ASSERT_TRUE(h1.WaitDecision(s, &d1)) << "step " << s;
    EXPECT_EQ(d0.generation(), 1u);
    EXPECT_EQ(d0.digest(), d1.digest());
  }
  for (RawRank* r : {&h0, &h1}) {
    for (const v1::ServerMessage& m : r->messages()) {
      if (m.has_generation()) {
        EXPECT_EQ(m.generation().generation(), 1u);
      }
    }
  }
  EXPECT_TRUE(listener_.EventsOf("j", "generation").empty());
  // The honest ranks finish: once they are quiet (1.5 s here), the
  // restarted rank's incarnation starts.
  h0.Close();
  h1.Close();
  clock_.Advance(std::chrono::milliseconds(1501));
  ASSERT_TRUE(loop.back()->WaitGeneration(2, std::chrono::seconds(10)));
}

// Reconnects (same instance), old clients (instance 0) and ranks that have
// no previous instance never start a generation.
TEST_F(DaemonTest, ReconnectsOldClientsAndNewRanksDoNotStartAGeneration) {
  StartDaemon();
  RawRank r0(Tcp(), "j", 0, 2), r1(Tcp(), "j", 1, 2);
  v1::RegisterResponse resp;
  ASSERT_TRUE(r0.Register(kUnits, &resp, nullptr, 0xA).ok());
  EXPECT_EQ(resp.generation(), 1u);
  ASSERT_TRUE(r1.Register(kUnits, &resp, nullptr, 0xC).ok());  // first time: joins
  EXPECT_EQ(resp.generation(), 1u);
  ASSERT_TRUE(r0.Register(kUnits, &resp, nullptr, 0xA).ok());  // reconnect
  EXPECT_EQ(resp.generation(), 1u);
  ASSERT_TRUE(r0.Register(kUnits, &resp, nullptr, 0).ok());  // an old client
  EXPECT_EQ(resp.generation(), 1u);
  ASSERT_TRUE(r0.Register(kUnits, &resp, nullptr, 0xA).ok());
  EXPECT_EQ(resp.generation(), 1u);
  // A new incarnation: rank 1 of the old one registered a moment ago, so
  // it waits for rank 1's new instance.
  ASSERT_TRUE(r0.Register(kUnits, &resp, nullptr, 0xB).ok());
  EXPECT_EQ(resp.generation(), 1u);
  ASSERT_TRUE(r1.Register(kUnits, &resp, nullptr, 0xD).ok());
  EXPECT_EQ(resp.generation(), 2u);
  EXPECT_TRUE(listener_.EventsOf("j", "generation").size() == 1u);
}

// gnmrctl import / load_state_dict: a new generation whose first decision
// is the imported state's last one, rebuilt with its original digest
// (global_skip included); the steps after the imported one are accepted
// although the job had closed them, and decide as they did the first time.
TEST_F(DaemonTest, ImportStartsAGenerationWithTheRebuiltDecision) {
  StartDaemon();
  const v1::ControllerConfig cfg = LongLocks();
  RawRank a(Tcp(), "j", 0, 1);
  ASSERT_TRUE(a.Register(kUnits, nullptr, &cfg, 0xA).ok());
  a.Open();
  RunSteps({&a}, 0, 9, /*spike_at=*/7);
  ASSERT_TRUE(a.SendStats(9, {std::nan(""), 1.0}));  // non-finite: global_skip
  v1::Decision d9;
  ASSERT_TRUE(a.WaitDecision(9, &d9));
  ASSERT_TRUE(d9.global_skip());
  ASSERT_EQ(d9.recovery_size(), 2);
  v1::ControllerState saved;
  ASSERT_TRUE(ExportState("j", &saved).ok());
  RunSteps({&a}, 10, 15);
  v1::Decision d10_first, d14;
  ASSERT_TRUE(a.WaitDecision(14, &d14));  // the job has closed steps 10-14
  ASSERT_TRUE(a.WaitDecision(10, &d10_first));

  v1::ImportStateResponse resp;
  ASSERT_TRUE(ImportState("j", saved, &resp, /*resume=*/true).ok());
  EXPECT_EQ(resp.generation(), 2u);
  ASSERT_TRUE(a.WaitGeneration(2));
  v1::Decision rebuilt;
  ASSERT_TRUE(a.WaitDecisionIn(2, 9, &rebuilt));
  EXPECT_EQ(rebuilt.sequence(), d9.sequence());
  EXPECT_EQ(rebuilt.apply_step(), d9.apply_step());
  EXPECT_TRUE(rebuilt.global_skip());
  EXPECT_EQ(rebuilt.digest(), d9.digest());
  EXPECT_EQ(rebuilt.next_lag(), 1);
  ASSERT_EQ(rebuilt.recovery_size(), d9.recovery_size());
  // GenerationStart first, then the rebuilt decision.
  const std::vector<v1::ServerMessage> msgs = a.messages();
  size_t gen_at = msgs.size(), rebuilt_at = msgs.size();
  for (size_t i = 0; i < msgs.size(); ++i) {
    if (msgs[i].has_generation() && msgs[i].generation().generation() == 2) gen_at = i;
    if (msgs[i].has_decision() && msgs[i].decision().generation() == 2) rebuilt_at = i;
  }
  EXPECT_EQ(rebuilt_at, gen_at + 1);

  // The trainer resumes after step 9 on the same stream.
  RunSteps({&a}, 10, 11);
  v1::Decision d10;
  ASSERT_TRUE(a.WaitDecisionIn(2, 10, &d10));
  EXPECT_EQ(d10.sequence(), d9.sequence() + 1);
  EXPECT_EQ(d10.digest(), d10_first.digest());  // the same plan as the first time
  EXPECT_EQ(listener_.late.load(), 0u);
  ASSERT_EQ(listener_.EventsOf("j", "generation").size(), 1u);
  EXPECT_EQ(listener_.EventsOf("j", "generation")[0].detail(),
            "generation 2: controller state imported");
}

// A resumed trainer may import its state before its ranks register. The
// killed incarnation's streams were gone at the import, so the new
// incarnation joins the import's generation and keeps its rebuilt decision.
TEST_F(DaemonTest, ImportBeforeTheNewIncarnationRegistersIsItsGeneration) {
  StartDaemon();
  RawRank a(Tcp(), "j", 0, 1);
  ASSERT_TRUE(a.Register(kUnits, nullptr, nullptr, 0xA).ok());
  a.Open();
  RunSteps({&a}, 0, 10);
  v1::Decision d9;
  ASSERT_TRUE(a.WaitDecision(9, &d9));
  v1::ControllerState saved;
  ASSERT_TRUE(ExportState("j", &saved).ok());
  a.Close();
  ASSERT_TRUE(NoneConnected(Tcp(), "j"));
  v1::ImportStateResponse imported;
  ASSERT_TRUE(ImportState("j", saved, &imported).ok());
  EXPECT_EQ(imported.generation(), 2u);
  RawRank b(Tcp(), "j", 0, 1);
  v1::RegisterResponse resp;
  ASSERT_TRUE(b.Register(kUnits, &resp, nullptr, 0xB).ok());
  EXPECT_EQ(resp.generation(), 2u);
  EXPECT_EQ(resp.last_step(), 9);
  b.Open();
  v1::Decision rebuilt;
  ASSERT_TRUE(b.WaitDecisionIn(2, 9, &rebuilt));
  EXPECT_EQ(rebuilt.digest(), d9.digest());
}

// An instance attached at an import lives on in its generation: when it
// later restarts, its successor starts another generation.
TEST_F(DaemonTest, ImportWhileAttachedThenARestartStartsAnotherGeneration) {
  StartDaemon();
  RawRank a(Tcp(), "j", 0, 1);
  ASSERT_TRUE(a.Register(kUnits, nullptr, nullptr, 0xA).ok());
  a.Open();
  RunSteps({&a}, 0, 3);
  v1::Decision d;
  ASSERT_TRUE(a.WaitDecision(2, &d));
  v1::ControllerState saved;
  ASSERT_TRUE(ExportState("j", &saved).ok());
  ASSERT_TRUE(ImportState("j", saved).ok());
  ASSERT_TRUE(a.WaitGeneration(2));
  a.Close();
  RawRank b(Tcp(), "j", 0, 1);
  v1::RegisterResponse resp;
  ASSERT_TRUE(b.Register(kUnits, &resp, nullptr, 0xB).ok());
  EXPECT_EQ(resp.generation(), 3u);
}

// Registered but not attached yet is alive too (a client opens its stream
// right after Register): an import in between moves it along.
TEST_F(DaemonTest, ARegisteredInstanceNotAttachedYetMovesToTheImportsGeneration) {
  StartDaemon();
  RawRank a(Tcp(), "j", 0, 1);
  ASSERT_TRUE(a.Register(kUnits, nullptr, nullptr, 0xA).ok());
  v1::ControllerState saved;
  ASSERT_TRUE(ExportState("j", &saved).ok());
  v1::ImportStateResponse imported;
  ASSERT_TRUE(ImportState("j", saved, &imported).ok());
  EXPECT_EQ(imported.generation(), 2u);
  RawRank b(Tcp(), "j", 0, 1);
  v1::RegisterResponse resp;
  ASSERT_TRUE(b.Register(kUnits, &resp, nullptr, 0xB).ok());
  EXPECT_EQ(resp.generation(), 3u);
}

// Every rank of a data-parallel job may load the same checkpoint: a repeat
// of the generation's import before the controller changed is the same
// generation; after a decision or a config change it replaces the state
// again.
TEST_F(DaemonTest, RepeatingAnImportBeforeAnyDecisionIsTheSameGeneration) {
  StartDaemon();
  RawRank r0(Tcp(), "j", 0, 2), r1(Tcp(), "j", 1, 2);
  ASSERT_TRUE(r0.Register(kUnits, nullptr, nullptr, 0xA0).ok());
  ASSERT_TRUE(r1.Register(kUnits, nullptr, nullptr, 0xA1).ok());
  r0.Open();
  r1.Open();
  RunSteps({&r0, &r1}, 0, 5);
  v1::Decision d;
  ASSERT_TRUE(r0.WaitDecision(4, &d));
  v1::ControllerState saved;
  ASSERT_TRUE(ExportState("j", &saved).ok());
  v1::ImportStateResponse resp;
  ASSERT_TRUE(ImportState("j", saved, &resp).ok());
  EXPECT_EQ(resp.generation(), 2u);
  ASSERT_TRUE(r0.SendStats(5, {1.0, 1.0}));  // reported, not decided yet
  ASSERT_TRUE(ImportState("j", saved, &resp).ok());
  EXPECT_EQ(resp.generation(), 2u);
  ASSERT_TRUE(r1.SendStats(5, {1.0, 1.0}));
  ASSERT_TRUE(r1.WaitDecisionIn(2, 5, &d));  // rank 0's report was kept
  EXPECT_EQ(listener_.EventsOf("j", "generation").size(), 1u);
  ASSERT_TRUE(ImportState("j", saved, &resp).ok());  // after a decision
  EXPECT_EQ(resp.generation(), 3u);
  ASSERT_TRUE(SetConfig("j", FastConfig(3)).ok());  // after a config change
  ASSERT_TRUE(ImportState("j", saved, &resp).ok());
  EXPECT_EQ(resp.generation(), 4u);
  v1::ControllerState now;
  ASSERT_TRUE(ExportState("j", &now).ok());
  EXPECT_EQ(now.config().max_o(), saved.config().max_o());  // replaced again
}

// An imported state whose sequence is at the end of its range is refused,
// and the job decides on in its generation. Found by the job_sequence fuzz
// target (fuzz/corpus/job_sequence/import_sequence_wraps.bin): the import
// was accepted and the next decision's sequence wrapped to 0, so every rank
// would have taken it for an old decision.
TEST_F(DaemonTest, ImportOfASequenceAtTheEndOfItsRangeIsRefused) {
  StartDaemon();
  RawRank a(Tcp(), "j", 0, 1);
  ASSERT_TRUE(a.Register(kUnits, nullptr, nullptr, 0xA).ok());
  a.Open();
  RunSteps({&a}, 0, 3);
  v1::Decision d2;
  ASSERT_TRUE(a.WaitDecision(2, &d2));
  v1::ControllerState state;
  ASSERT_TRUE(ExportState("j", &state).ok());
  state.set_sequence(std::numeric_limits<uint64_t>::max());
  const grpc::Status s = ImportState("j", state);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
  EXPECT_NE(s.error_message().find("sequence"), std::string::npos) << s.error_message();
  RunSteps({&a}, 3, 4);
  v1::Decision d3;
  ASSERT_TRUE(a.WaitDecisionIn(1, 3, &d3));
  EXPECT_EQ(d3.sequence(), d2.sequence() + 1);
  EXPECT_TRUE(listener_.EventsOf("j", "generation").empty());
}

// A rank that attaches late gets the generation and then the job's recent
// decisions in order (at most 64), so it finds the decision of each recent
// step.
TEST_F(DaemonTest, ALateStreamGetsTheRecentDecisionsInOrder) {
  StartDaemon();
  RawRank r0(Tcp(), "j", 0, 2), r1(Tcp(), "j", 1, 2);
  ASSERT_TRUE(r0.Register(kUnits, nullptr, nullptr, 0xA).ok());
  ASSERT_TRUE(r1.Register(kUnits, nullptr, nullptr, 0xB).ok());
  r0.Open();
  r1.Open();
  RunSteps({&r0, &r1}, 0, 80);
  v1::Decision newest;
  ASSERT_TRUE(r0.WaitDecision(79, &newest));
  r1.Close();
  RawRank late(Unix(), "j", 1, 2);
  late.Open(r1.session_id());
  ASSERT_TRUE(late.WaitMessages(65));
  const std::vector<v1::ServerMessage> msgs = late.messages();
  ASSERT_TRUE(msgs[0].has_generation());
  EXPECT_EQ(msgs[0].generation().generation(), 1u);
  for (size_t i = 1; i < 65; ++i) {
    ASSERT_TRUE(msgs[i].has_decision()) << i;
    EXPECT_EQ(msgs[i].decision().observed_step(), static_cast<int64_t>(15 + i)) << i;
    EXPECT_EQ(msgs[i].decision().sequence(), newest.sequence() - 64 + i) << i;
  }
  EXPECT_EQ(msgs[64].decision().SerializeAsString(), newest.SerializeAsString());
}

}  // namespace
}  // namespace gnmr::testing
