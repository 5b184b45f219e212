// Admin.ListUnits at scale: the daemon filters by name pattern and state,
// orders by id or by GNMR, and pages by offset, limit and answer bytes
// (daemon/job/unit_query.h), over real gRPC.
#include <string>
#include <vector>

#include "tests/daemon/test_daemon.h"

namespace gnmr::testing {
namespace {

class ListUnitsTest : public DaemonTest {
 protected:
  // One rank, `layers` x `experts` units "L<l>.e<e>", `steps` steps decided
  // with unit `spiked`'s norm jumping at the last step (so it is admitted).
  void StartJob(int layers, int experts, int steps, int spiked, DaemonOptions opts = {}) {
    StartDaemon(opts);
    rank_ = std::make_unique<RawRank>(Tcp(), "moe", 0, 1);
    std::vector<RawRank::Unit> units;
    for (int l = 0; l < layers; ++l) {
      for (int e = 0; e < experts; ++e) {
        units.push_back({"L" + std::to_string(l) + ".e" + std::to_string(e)});
      }
    }
    const v1::ControllerConfig cfg = FastConfig(/*max_o=*/2, /*warmup=*/3, /*lag=*/0);
    ASSERT_TRUE(rank_->Register(units, nullptr, &cfg).ok());
    rank_->Open();
    for (int step = 0; step < steps; ++step) {
      std::vector<double> sumsq(units.size());
      for (size_t u = 0; u < units.size(); ++u) sumsq[u] = 1.0 + 0.01 * static_cast<double>(u);
      if (step == steps - 1) sumsq[static_cast<size_t>(spiked)] *= 1e4;
      ASSERT_TRUE(rank_->SendStats(step, sumsq));
    }
    v1::Decision d;
    ASSERT_TRUE(rank_->WaitDecision(steps - 1, &d));
  }

  grpc::Status List(const v1::ListUnitsRequest& req, v1::ListUnitsResponse* resp) {
    grpc::ClientContext ctx;
    return v1::Admin::NewStub(Tcp())->ListUnits(&ctx, req, resp);
  }
  static v1::ListUnitsRequest Request() {
    v1::ListUnitsRequest req;
    req.set_job_id("moe");
    return req;
  }
  static std::vector<std::string> Names(const v1::ListUnitsResponse& r) {
    std::vector<std::string> out;
    for (const v1::UnitInfo& u : r.units()) out.push_back(u.name());
    return out;
  }
  // Every page of `req`, concatenated; fails the test on a page that does
  // not move forward.
  std::vector<std::string> AllPages(v1::ListUnitsRequest req, int* pages) {
    std::vector<std::string> out;
    *pages = 0;
    for (;;) {
      v1::ListUnitsResponse resp;
      EXPECT_TRUE(List(req, &resp).ok());
      ++*pages;
      for (const std::string& n : Names(resp)) out.push_back(n);
      if (resp.next_offset() == 0) break;
      EXPECT_EQ(resp.next_offset(), req.offset() + static_cast<uint32_t>(resp.units_size()));
      if (resp.next_offset() <= req.offset()) break;
      req.set_offset(resp.next_offset());
    }
    return out;
  }

  std::unique_ptr<RawRank> rank_;
};

TEST_F(ListUnitsTest, PatternAndStateFilterOnTheDaemon) {
  StartJob(/*layers=*/4, /*experts=*/10, /*steps=*/8, /*spiked=*/27);  // "L2.e7"
  v1::ListUnitsRequest req = Request();
  req.set_pattern("L2.*");
  v1::ListUnitsResponse resp;
  ASSERT_TRUE(List(req, &resp).ok());
  EXPECT_EQ(resp.matched(), 10u);
  EXPECT_EQ(resp.next_offset(), 0u);
  ASSERT_EQ(resp.units_size(), 10);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(resp.units(i).name(), "L2.e" + std::to_string(i));

  req = Request();
  req.set_pattern("L[13].e[0-1]");
  ASSERT_TRUE(List(req, &resp).ok());
  EXPECT_EQ(Names(resp), (std::vector<std::string>{"L1.e0", "L1.e1", "L3.e0", "L3.e1"}));

  req = Request();
  req.set_state(v1::UNIT_STATE_RECOVERY);
  ASSERT_TRUE(List(req, &resp).ok());
  EXPECT_EQ(resp.matched(), 1u);
  EXPECT_EQ(Names(resp), std::vector<std::string>{"L2.e7"});
  EXPECT_EQ(resp.units(0).state(), v1::UNIT_STATE_RECOVERY);
  EXPECT_GT(resp.units(0).until(), resp.units(0).since());

  req.set_state(v1::UNIT_STATE_ACTIVE);
  req.set_pattern("L2.*");
  ASSERT_TRUE(List(req, &resp).ok());
  EXPECT_EQ(resp.matched(), 9u);  // L2's other nine

  req = Request();
  req.set_pattern("nothing*");
  ASSERT_TRUE(List(req, &resp).ok());
  EXPECT_EQ(resp.matched(), 0u);
  EXPECT_EQ(resp.units_size(), 0);
}

TEST_F(ListUnitsTest, PagesConcatenateToTheWholeListInIdAndInGnmrOrder) {
  StartJob(4, 10, 8, 5);
  v1::ListUnitsResponse whole;
  ASSERT_TRUE(List(Request(), &whole).ok());
  ASSERT_EQ(whole.units_size(), 40);
  EXPECT_EQ(whole.matched(), 40u);
  EXPECT_EQ(whole.next_offset(), 0u);

  v1::ListUnitsRequest req = Request();
  req.set_limit(7);
  int pages = 0;
  EXPECT_EQ(AllPages(req, &pages), Names(whole));
  EXPECT_EQ(pages, 6);  // 7 x 5 + 5

  // Top 12 by GNMR, in pages of 5: the same 12, highest first.
  req = Request();
  req.set_top(12);
  v1::ListUnitsResponse top;
  ASSERT_TRUE(List(req, &top).ok());
  ASSERT_EQ(top.units_size(), 12);
  EXPECT_EQ(top.units(0).name(), "L0.e5");  // the spiked unit
  for (int i = 1; i < top.units_size(); ++i) {
    EXPECT_GE(top.units(i - 1).gnmr(), top.units(i).gnmr());
  }
  req.set_limit(5);
  EXPECT_EQ(AllPages(req, &pages), Names(top));
  EXPECT_EQ(pages, 3);

  // An offset past the end is an empty last page.
  req = Request();
  req.set_offset(41);
  req.set_limit(3);
  v1::ListUnitsResponse past;
  ASSERT_TRUE(List(req, &past).ok());
  EXPECT_EQ(past.units_size(), 0);
  EXPECT_EQ(past.next_offset(), 0u);
  EXPECT_EQ(past.matched(), 40u);
}

TEST_F(ListUnitsTest, APageEndsBeforeTheAnswerPassesMaxMessageBytes) {
  // 600 units of ~40 encoded bytes do not fit one 16 KiB answer.
  DaemonOptions opts;
  opts.max_message_bytes = 16 << 10;
  StartJob(20, 30, 5, 0, opts);
  v1::ListUnitsResponse first;
  ASSERT_TRUE(List(Request(), &first).ok());
  EXPECT_EQ(first.matched(), 600u);
  EXPECT_GT(first.units_size(), 0);
  EXPECT_LT(first.units_size(), 600);
  EXPECT_EQ(first.next_offset(), static_cast<uint32_t>(first.units_size()));
  EXPECT_LE(first.ByteSizeLong(), 16u << 10);
  int pages = 0;
  const std::vector<std::string> all = AllPages(Request(), &pages);
  ASSERT_EQ(all.size(), 600u);
  EXPECT_EQ(all.front(), "L0.e0");
  EXPECT_EQ(all.back(), "L19.e29");
  EXPECT_GE(pages, 2);
}

TEST_F(ListUnitsTest, BadPatternOrStateIsInvalidArgumentNamingTheField) {
  StartJob(1, 3, 4, 0);
  v1::ListUnitsResponse resp;
  v1::ListUnitsRequest req = Request();
  req.set_pattern("L0 e1");
  grpc::Status s = List(req, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("pattern has a byte outside printable ASCII"), std::string::npos)
      << s.error_message();
  req.set_pattern(std::string(kMaxUnitPatternBytes + 1, '*'));
  s = List(req, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("pattern is longer than 1024 bytes"), std::string::npos);
  req = Request();
  req.set_state(static_cast<v1::UnitState>(42));
  s = List(req, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("state 42 is not a unit state"), std::string::npos);
  req = Request();
  req.set_job_id("absent");
  EXPECT_EQ(List(req, &resp).error_code(), grpc::StatusCode::NOT_FOUND);
}

}  // namespace
}  // namespace gnmr::testing
