// Every bad request gets a precise gRPC status and changes nothing.
#include <algorithm>
#include <cmath>
#include <functional>

#include "tests/daemon/test_daemon.h"

namespace gnmr::testing {
namespace {

v1::ClientMessage StatsMsg(int64_t step, std::vector<uint32_t> ids, std::vector<double> sumsq) {
  v1::ClientMessage m;
  m.mutable_stats()->set_step(step);
  for (uint32_t id : ids) m.mutable_stats()->add_unit_id(id);
  for (double v : sumsq) m.mutable_stats()->add_sumsq(v);
  return m;
}

// The sparse form (docs/statistics.md): every column of unit_id's length.
v1::ClientMessage SparseMsg(int64_t step, std::vector<uint32_t> ids) {
  v1::ClientMessage m = StatsMsg(step, ids, std::vector<double>(ids.size(), 1.0));
  v1::StepStats* s = m.mutable_stats();
  s->set_sparse(true);
  for (size_t i = 0; i < ids.size(); ++i) {
    s->add_amax(1.0);
    s->add_nonfinite(0);
    s->add_zeros(0);
  }
  return m;
}

class BadRequestTest : public DaemonTest {
 protected:
  void SetUp() override {
    DaemonOptions opts;
    opts.max_message_bytes = 64 * 1024;
    opts.registry.job_tokens["locked"] = "right";
    StartDaemon(opts);
  }
  // A registered, open rank 0 of a 2-rank job "j" with units x, y.
  std::unique_ptr<RawRank> OpenRank() {
    auto r = std::make_unique<RawRank>(Tcp(), "j", 0, 2, "tok");
    EXPECT_TRUE(r->Register({{"x"}, {"y"}}).ok());
    r->Open();
    return r;
  }
  // The job's last step as seen by the admin API.
  int64_t LastStep(const std::string& job) {
    auto admin = v1::Admin::NewStub(Tcp());
    grpc::ClientContext ctx;
    v1::ListJobsResponse resp;
    EXPECT_TRUE(admin->ListJobs(&ctx, {}, &resp).ok());
    for (const auto& j : resp.jobs()) {
      if (j.job_id() == job) return j.ranks_size() ? j.ranks(0).last_step() : -2;
    }
    return -3;
  }
};

TEST_F(BadRequestTest, RegisterIsValidated) {
  RawRank ok(Tcp(), "j", 0, 2, "tok");
  ASSERT_TRUE(ok.Register({{"x"}}).ok());
  struct Case {
    const char* what;
    grpc::StatusCode code;
    std::function<void(v1::RegisterRequest&)> mutate;
    std::string token = "tok";
  };
  std::vector<Case> cases = {
      {"rank >= world", grpc::StatusCode::INVALID_ARGUMENT, [](auto& r) { r.set_rank(2); }},
      {"world 0", grpc::StatusCode::INVALID_ARGUMENT, [](auto& r) { r.set_world_size(0); }},
      {"bad job id", grpc::StatusCode::INVALID_ARGUMENT, [](auto& r) { r.set_job_id("a/../b"); }},
      {"empty job id", grpc::StatusCode::INVALID_ARGUMENT, [](auto& r) { r.set_job_id(""); }},
      {"empty unit", grpc::StatusCode::INVALID_ARGUMENT,
       [](auto& r) { r.mutable_units(0)->set_name(""); }},
      {"unit name with newline", grpc::StatusCode::INVALID_ARGUMENT,
       [](auto& r) { r.mutable_units(0)->set_name("a\nb"); }},
      {"bad dtype", grpc::StatusCode::INVALID_ARGUMENT,
       [](auto& r) { r.mutable_units(0)->set_dtype(static_cast<v1::DType>(99)); }},
      {"shard out of range", grpc::StatusCode::INVALID_ARGUMENT,
       [](auto& r) { r.mutable_units(0)->set_shard_index(3); }},
      {"shard count changed", grpc::StatusCode::FAILED_PRECONDITION,
       [](auto& r) { r.mutable_units(0)->set_shard_count(4); }},
      {"world size changed", grpc::StatusCode::FAILED_PRECONDITION,
       [](auto& r) { r.set_world_size(3); }},
      {"duplicate unit", grpc::StatusCode::INVALID_ARGUMENT,
       [](auto& r) { *r.add_units() = r.units(0); }},
      {"bad config", grpc::StatusCode::INVALID_ARGUMENT,
       [](auto& r) {
         r.set_job_id("fresh");
         *r.mutable_config() = FastConfig();
         r.mutable_config()->set_max_o(-1);
       }},
      {"wrong token", grpc::StatusCode::UNAUTHENTICATED, [](auto&) {}, "nope"},
      {"missing token", grpc::StatusCode::UNAUTHENTICATED, [](auto&) {}, ""},
      {"configured job, wrong token", grpc::StatusCode::UNAUTHENTICATED,
       [](auto& r) { r.set_job_id("locked"); }},
      {"oversized", grpc::StatusCode::RESOURCE_EXHAUSTED,
       [](auto& r) {
         for (int i = 0; i < 20000; ++i) r.add_units()->set_name("unit-" + std::to_string(i));
       }},
  };
  for (const Case& c : cases) {
    v1::RegisterRequest req;
    req.set_job_id("j");
    req.set_rank(1);
    req.set_world_size(2);
    v1::UnitSpec* u = req.add_units();
    u->set_name("x");
    u->set_dtype(v1::DTYPE_BF16);
    u->set_shard_count(1);
    c.mutate(req);
    RawRank r(Tcp(), "j", 1, 2, c.token);
    grpc::Status s = r.RegisterRaw(req);
    EXPECT_EQ(s.error_code(), c.code) << c.what << ": " << s.error_message();
    EXPECT_FALSE(s.error_message().empty()) << c.what;
  }
  // Nothing changed: the job still has one unit and rank 1 is not registered.
  auto admin = v1::Admin::NewStub(Tcp());
  grpc::ClientContext ctx;
  v1::ListJobsResponse jobs;
  ASSERT_TRUE(admin->ListJobs(&ctx, {}, &jobs).ok());
  ASSERT_EQ(jobs.jobs_size(), 1);
  EXPECT_EQ(jobs.jobs(0).units(), 1u);
  EXPECT_EQ(jobs.jobs(0).ranks_size(), 1);
}

TEST_F(BadRequestTest, StreamMessagesAreValidated) {
  struct Case {
    const char* what;
    grpc::StatusCode code;
    v1::ClientMessage msg;
    std::string message;  // the status message, when checked
  };
  auto ids = [](RawRank& r) { return r.unit_ids(); };
  {
    auto probe = OpenRank();
    ASSERT_TRUE(probe->SendStats(5, {1.0, 1.0}));
    v1::Decision d;  // processed (a cancel could otherwise overtake it)
    ASSERT_TRUE(probe->WaitDecision(5, &d));
    probe->Close();
  }
  const int64_t before = LastStep("j");
  EXPECT_EQ(before, 5);
  std::vector<Case> cases;
  {
    RawRank tmp(Tcp(), "j", 0, 2, "tok");
    ASSERT_TRUE(tmp.Register({{"x"}, {"y"}}).ok());
    std::vector<uint32_t> u = ids(tmp);
    cases.push_back({"columns of different lengths", grpc::StatusCode::INVALID_ARGUMENT,
                     StatsMsg(6, {u[0], u[1]}, {1.0}), ""});
    cases.push_back({"unit twice", grpc::StatusCode::INVALID_ARGUMENT,
                     StatsMsg(6, {u[0], u[0]}, {1.0, 1.0}), ""});
    cases.push_back({"unknown unit", grpc::StatusCode::NOT_FOUND, StatsMsg(6, {77}, {1.0}), ""});
    cases.push_back(
        {"negative sumsq", grpc::StatusCode::INVALID_ARGUMENT, StatsMsg(6, {u[0]}, {-2.0}), ""});
    const std::string hi = std::to_string(std::max(u[0], u[1]));
    const std::string lo = std::to_string(std::min(u[0], u[1]));
    cases.push_back({"sparse: ids not increasing", grpc::StatusCode::INVALID_ARGUMENT,
                     SparseMsg(6, {std::max(u[0], u[1]), std::min(u[0], u[1])}),
                     "sparse report: unit_id[1] = " + lo + " is below unit_id[0] = " + hi +
                         " (ids must strictly increase)"});
    cases.push_back(
        {"sparse: id twice", grpc::StatusCode::INVALID_ARGUMENT, SparseMsg(6, {u[0], u[0]}),
         "sparse report: unit_id[1] = " + std::to_string(u[0]) +
             " repeats unit_id[0] = " + std::to_string(u[0]) + " (ids must strictly increase)"});
    cases.push_back({"sparse: id out of range", grpc::StatusCode::INVALID_ARGUMENT,
                     SparseMsg(6, {77}),
                     "sparse report: unit_id[0] = 77 is out of range (the job has 2 units)"});
    cases.push_back({"sparse: a column short", grpc::StatusCode::INVALID_ARGUMENT,
                     SparseMsg(6, {u[0]}),
                     "sparse report: every column must have unit_id's length 1: sumsq 1, amax 1, "
                     "nonfinite 1, zeros 0"});
    cases.back().msg.mutable_stats()->clear_zeros();
    cases.push_back({"second hello", grpc::StatusCode::FAILED_PRECONDITION, {}, ""});
    cases.back().msg.mutable_hello()->set_job_id("j");
    cases.push_back({"empty message", grpc::StatusCode::INVALID_ARGUMENT, {}, ""});
  }
  for (Case& c : cases) {
    auto r = OpenRank();
    // Re-registration reset the rank's step history; step 6 is valid.
    ASSERT_TRUE(r->Send(c.msg)) << c.what;
    grpc::Status s = r->WaitEnd();
    EXPECT_EQ(s.error_code(), c.code) << c.what << ": " << s.error_message();
    if (!c.message.empty()) {
      EXPECT_EQ(s.error_message(), c.message) << c.what;
    }
  }
  // A valid sparse report (also one listing nothing) is decided.
  for (const bool empty : {true, false}) {
    auto r = OpenRank();
    std::vector<uint32_t> listed;
    if (!empty) listed.push_back(std::min(ids(*r)[0], ids(*r)[1]));
    const int64_t step = empty ? 7 : 8;
    ASSERT_TRUE(r->Send(SparseMsg(step, listed)));
    v1::Decision d;
    EXPECT_TRUE(r->WaitDecision(step, &d)) << "listing " << listed.size();
    r->Close();
  }
  // Steps going backwards / repeating on one stream.
  for (int64_t bad_step : {3, 4}) {
    auto r = OpenRank();
    ASSERT_TRUE(r->SendStats(4, {1.0, 1.0}));
    ASSERT_TRUE(r->SendStats(bad_step, {1.0, 1.0}));
    EXPECT_EQ(r->WaitEnd().error_code(), grpc::StatusCode::INVALID_ARGUMENT) << bad_step;
  }
  // NaN and Inf are signals, not errors.
  auto r = OpenRank();
  ASSERT_TRUE(r->SendStats(10, {std::nan(""), HUGE_VAL}));
  r->Close();
}

TEST_F(BadRequestTest, SessionNeedsHelloTokenAndKnownJob) {
  auto registered = OpenRank();
  {
    RawRank r(Tcp(), "nosuchjob", 0, 1, "tok");
    r.Open(12345);
    EXPECT_EQ(r.WaitEnd().error_code(), grpc::StatusCode::NOT_FOUND);
  }
  {
    RawRank r(Tcp(), "j", 0, 2, "wrong");
    r.Open(registered->session_id());
    EXPECT_EQ(r.WaitEnd().error_code(), grpc::StatusCode::UNAUTHENTICATED);
  }
  {
    RawRank r(Tcp(), "j", 1, 2, "tok");  // rank 1 never registered
    r.Open(99);
    EXPECT_EQ(r.WaitEnd().error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  }
  {
    // Stats before the hello.
    auto stub = v1::Gnmr::NewStub(Tcp());
    grpc::ClientContext ctx;
    auto stream = stub->Session(&ctx);
    stream->Write(StatsMsg(0, {0}, {1.0}));
    v1::ServerMessage m;
    while (stream->Read(&m)) {
    }
    EXPECT_EQ(stream->Finish().error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  }
}

TEST_F(BadRequestTest, AdminMutationsNeedTheAdminToken) {
  auto r = OpenRank();
  auto admin = v1::Admin::NewStub(Tcp());
  v1::SetConfigRequest req;
  req.set_job_id("j");
  *req.mutable_config() = FastConfig(3);
  {
    grpc::ClientContext ctx;
    v1::SetConfigResponse resp;
    EXPECT_EQ(admin->SetConfig(&ctx, req, &resp).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  }
  {
    grpc::ClientContext ctx;
    ctx.AddMetadata("x-gnmr-admin-token", admin_token_);
    v1::SetConfigResponse resp;
    req.mutable_config()->set_lock_steps(0);
    EXPECT_EQ(admin->SetConfig(&ctx, req, &resp).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  }
  {
    grpc::ClientContext ctx;
    ctx.AddMetadata("x-gnmr-admin-token", admin_token_);
    v1::SetConfigResponse resp;
    req.mutable_config()->set_lock_steps(7);
    ASSERT_TRUE(admin->SetConfig(&ctx, req, &resp).ok());
    EXPECT_EQ(resp.config_version(), 2u);
  }
  {
    grpc::ClientContext ctx;
    ctx.AddMetadata("x-gnmr-admin-token", admin_token_);
    v1::ReleaseUnitRequest rel;
    rel.set_job_id("j");
    rel.set_unit("x");
    v1::ReleaseUnitResponse resp;
    EXPECT_EQ(admin->ReleaseUnit(&ctx, rel, &resp).error_code(), grpc::StatusCode::NOT_FOUND);
  }
  {
    grpc::ClientContext ctx;
    v1::GetConfigRequest get;
    get.set_job_id("nope");
    v1::GetConfigResponse resp;
    EXPECT_EQ(admin->GetConfig(&ctx, get, &resp).error_code(), grpc::StatusCode::NOT_FOUND);
  }
}

// A job id that names no job, however long or strange, is NOT_FOUND, with
// the id escaped and cut in the message. 8 KiB of it echoed raw overflowed
// gRPC's status trailer: the client saw RESOURCE_EXHAUSTED.
TEST_F(BadRequestTest, AnUnknownJobIdOfAnySizeIsNotFoundWithAShortMessage) {
  auto admin = v1::Admin::NewStub(Tcp());
  const std::string id = "bad\n\x1b[2J" + std::string(8 * 1024, 'x');
  const auto check = [](const grpc::Status& s, const char* rpc) {
    EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND) << rpc << ": " << s.error_message();
    EXPECT_LT(s.error_message().size(), 400u) << rpc;
    EXPECT_NE(s.error_message().find("unknown job 'bad\\x0a\\x1b[2Jxxx"), std::string::npos)
        << rpc << ": " << s.error_message();
  };
  {
    grpc::ClientContext ctx;
    v1::GetConfigRequest req;
    req.set_job_id(id);
    v1::GetConfigResponse resp;
    check(admin->GetConfig(&ctx, req, &resp), "GetConfig");
  }
  {
    grpc::ClientContext ctx;
    v1::ExportStateRequest req;
    req.set_job_id(id);
    v1::ExportStateResponse resp;
    check(admin->ExportState(&ctx, req, &resp), "ExportState");
  }
  {
    grpc::ClientContext ctx;
    v1::ListUnitsRequest req;
    req.set_job_id(id);
    v1::ListUnitsResponse resp;
    check(admin->ListUnits(&ctx, req, &resp), "ListUnits");
  }
  {
    grpc::ClientContext ctx;
    ctx.AddMetadata("x-gnmr-admin-token", admin_token_);
    v1::DeleteJobRequest req;
    req.set_job_id(id);
    v1::DeleteJobResponse resp;
    check(admin->DeleteJob(&ctx, req, &resp), "DeleteJob");
  }
}

}  // namespace
}  // namespace gnmr::testing
