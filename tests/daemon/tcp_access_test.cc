// Who may do what over plain TCP (peer_access.h; deploy/README.md,
// "Security model"): a job
// needs a token (configured, or bound over the Unix socket), Admin reads
// need the read or admin token, mutations the admin token; the Unix socket
// keeps its file permissions as access control; insecure_tcp opts back in
// to trusting TCP peers. And a request that does not parse (a string field
// that is not UTF-8) is INVALID_ARGUMENT naming the field.
#include <grpcpp/generic/generic_stub.h>

#include "tests/daemon/test_daemon.h"

namespace gnmr::testing {
namespace {

class TcpAccessTest : public DaemonTest {
 protected:
  void Start(bool insecure_tcp = false, std::string admin_token = "admin-secret",
             std::string read_token = "read-secret") {
    insecure_tcp_ = insecure_tcp;
    admin_token_ = std::move(admin_token);
    read_token_ = std::move(read_token);
    DaemonOptions opts;
    opts.registry.job_tokens["configured"] = "conf-token";
    StartDaemon(opts);
  }
  grpc::StatusCode Register(std::shared_ptr<grpc::Channel> ch, const std::string& job,
                            const std::string& token) {
    return RawRank(ch, job, 0, 1, token).Register({{"x"}}).error_code();
  }
  grpc::StatusCode ListJobs(std::shared_ptr<grpc::Channel> ch, const std::string& token) {
    grpc::ClientContext ctx;
    if (!token.empty()) ctx.AddMetadata("x-gnmr-admin-token", token);
    v1::ListJobsResponse resp;
    return v1::Admin::NewStub(ch)->ListJobs(&ctx, {}, &resp).error_code();
  }
  grpc::StatusCode Release(std::shared_ptr<grpc::Channel> ch, const std::string& token) {
    grpc::ClientContext ctx;
    if (!token.empty()) ctx.AddMetadata("x-gnmr-admin-token", token);
    v1::ReleaseUnitRequest req;
    req.set_job_id("configured");
    req.set_unit("x");
    v1::ReleaseUnitResponse resp;
    return v1::Admin::NewStub(ch)->ReleaseUnit(&ctx, req, &resp).error_code();
  }
};

TEST_F(TcpAccessTest, JobsOverTcpNeedTheirToken) {
  Start();
  using C = grpc::StatusCode;
  EXPECT_EQ(Register(Tcp(), "configured", ""), C::UNAUTHENTICATED);
  EXPECT_EQ(Register(Tcp(), "configured", "wrong"), C::UNAUTHENTICATED);
  EXPECT_EQ(Register(Tcp(), "configured", "conf-token"), C::OK);
  // No first-use binding over TCP: a job nobody configured or created.
  RawRank squatter(Tcp(), "fresh", 0, 1, "mine-now");
  grpc::Status st = squatter.Register({{"x"}});
  EXPECT_EQ(st.error_code(), C::PERMISSION_DENIED);
  EXPECT_NE(st.error_message().find("first-use registration only over the Unix socket"),
            std::string::npos)
      << st.error_message();
  // Bound over the socket (file permissions), then usable over TCP with
  // that token only.
  EXPECT_EQ(Register(Unix(), "local", "bound-token"), C::OK);
  EXPECT_EQ(Register(Tcp(), "local", "bound-token"), C::OK);
  EXPECT_EQ(Register(Tcp(), "local", "other"), C::UNAUTHENTICATED);
  EXPECT_EQ(Register(Unix(), "open", ""), C::OK);              // empty token: fine on the socket...
  EXPECT_EQ(Register(Tcp(), "open", ""), C::UNAUTHENTICATED);  // ...never over TCP
  // A Session without a token over TCP ends at once.
  RawRank no_token(Tcp(), "open", 0, 1, "");
  no_token.Open(/*session_override=*/1);
  EXPECT_EQ(no_token.WaitEnd().error_code(), C::UNAUTHENTICATED);
}

TEST_F(TcpAccessTest, AdminReadsOverTcpNeedTheReadOrAdminToken) {
  Start();
  using C = grpc::StatusCode;
  EXPECT_EQ(ListJobs(Tcp(), ""), C::UNAUTHENTICATED);
  EXPECT_EQ(ListJobs(Tcp(), "nope"), C::UNAUTHENTICATED);
  EXPECT_EQ(ListJobs(Tcp(), "read-secret"), C::OK);
  EXPECT_EQ(ListJobs(Tcp(), "admin-secret"), C::OK);
  EXPECT_EQ(ListJobs(Unix(), ""), C::OK);  // the socket's permissions decide
  // Every read, not only ListJobs.
  grpc::ClientContext ctx;
  v1::GetStatusResponse status;
  EXPECT_EQ(v1::Admin::NewStub(Tcp())->GetStatus(&ctx, {}, &status).error_code(),
            C::UNAUTHENTICATED);
  // The read token does not allow mutations.
  ASSERT_EQ(Register(Tcp(), "configured", "conf-token"), C::OK);
  EXPECT_EQ(Release(Tcp(), "read-secret"), C::UNAUTHENTICATED);
  EXPECT_NE(Release(Tcp(), "admin-secret"), C::UNAUTHENTICATED);
}

TEST_F(TcpAccessTest, WithoutAnyTokenConfiguredReadsOverTcpAreRefused) {
  Start(/*insecure_tcp=*/false, "", "");
  EXPECT_EQ(ListJobs(Tcp(), ""), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(ListJobs(Tcp(), "guess"), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(ListJobs(Unix(), ""), grpc::StatusCode::OK);
}

TEST_F(TcpAccessTest, InsecureTcpTrustsTcpPeersLikeTheSocket) {
  Start(/*insecure_tcp=*/true);
  EXPECT_EQ(Register(Tcp(), "fresh", ""), grpc::StatusCode::OK);
  EXPECT_EQ(ListJobs(Tcp(), ""), grpc::StatusCode::OK);
  // Mutations still need the admin token.
  EXPECT_EQ(Release(Tcp(), ""), grpc::StatusCode::UNAUTHENTICATED);
}

TEST_F(TcpAccessTest, InvalidUtf8IsInvalidArgumentNamingTheField) {
  Start(/*insecure_tcp=*/true);
  v1::RegisterRequest req;
  req.set_job_id("j");
  req.set_rank(0);
  req.set_world_size(1);
  req.set_client_version("caf\xe9");  // Latin-1, not UTF-8
  v1::UnitSpec* u = req.add_units();
  u->set_name("x");
  u->set_dtype(v1::DTYPE_FP32);
  u->set_shard_count(1);
  RawRank rank(Tcp(), "j", 0, 1, "");
  grpc::Status st = rank.RegisterRaw(req);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(st.error_message(),
            "request does not parse: field gnmr.v1.RegisterRequest.client_version is not valid "
            "UTF-8 (proto3 string fields must be UTF-8)");

  grpc::ClientContext ctx;
  v1::ListUnitsRequest units;
  units.set_job_id("j\xff");
  v1::ListUnitsResponse resp;
  st = v1::Admin::NewStub(Tcp())->ListUnits(&ctx, units, &resp);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(st.error_message().find("gnmr.v1.ListUnitsRequest.job_id is not valid UTF-8"),
            std::string::npos)
      << st.error_message();
  // Bytes that are no message at all.
  req.set_client_version("ok");
  std::string garbage = req.SerializeAsString();
  garbage.resize(garbage.size() - 3);  // cut inside the last field
  grpc::ByteBuffer in, out;
  grpc::Slice slice(garbage);
  in = grpc::ByteBuffer(&slice, 1);
  grpc::GenericStub generic(Tcp());
  grpc::ClientContext gctx;
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  generic.UnaryCall(&gctx, "/gnmr.v1.Gnmr/Register", grpc::StubOptions(), &in, &out,
                    [&](grpc::Status s) {
                      std::lock_guard<std::mutex> lock(mu);
                      st = s;
                      done = true;
                      cv.notify_all();
                    });
  std::unique_lock<std::mutex> lock(mu);
  ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(10), [&] { return done; }));
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(st.error_message(), "request does not parse as gnmr.v1.RegisterRequest");
}

}  // namespace
}  // namespace gnmr::testing
