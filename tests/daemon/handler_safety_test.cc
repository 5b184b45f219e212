// No exception, of any type, escapes a server handler into gRPC's threads
// (that would std::terminate gnmrd): a throwing component turns into
// INTERNAL for that call and the daemon serves on. And the RPC recorder
// (metrics) is installed through DaemonOptions, before the server starts,
// so no RPC thread ever sees it assigned.
#include <atomic>
#include <mutex>
#include <set>

#include "tests/daemon/test_daemon.h"

namespace gnmr::testing {
namespace {

// A listener whose job-start callback throws something that is not a
// std::exception (as a third-party metrics or store hook might).
class ThrowingListener : public RecordingListener {
 public:
  void OnJobStarted(const std::string& job, uint32_t, const Controller&) override {
    if (job == "throws") throw 42;
  }
};

TEST(HandlerSafety, NonStdExceptionsBecomeInternalAndTheDaemonServesOn) {
  ThrowingListener listener;
  DaemonOptions opts;
  const std::string socket = "/tmp/gnmr-handler-" + std::to_string(::getpid()) + ".sock";
  opts.listen = {"unix:" + socket};
  AdminContext admin;
  admin.events = [](const std::string& job, int64_t, uint32_t) -> std::vector<v1::Event> {
    if (job == "j") throw std::string("not a std::exception");
    return {};
  };
  auto daemon = Daemon::Start(opts, &listener, admin);
  ASSERT_TRUE(daemon.ok()) << daemon.status().ToString();
  auto channel = grpc::CreateChannel("unix:" + socket, grpc::InsecureChannelCredentials());

  RawRank thrower(channel, "throws", 0, 1, "tok");
  grpc::Status st = thrower.Register({{"x"}});
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INTERNAL);
  EXPECT_EQ(st.error_message(), "internal error: unknown exception");

  RawRank ok(channel, "j", 0, 1, "tok");
  ASSERT_TRUE(ok.Register({{"x"}}).ok());
  auto stub = v1::Admin::NewStub(channel);
  grpc::ClientContext ctx;
  v1::ListEventsRequest req;
  req.set_job_id("j");
  v1::ListEventsResponse resp;
  st = stub->ListEvents(&ctx, req, &resp);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INTERNAL);
  EXPECT_EQ(st.error_message(), "internal error: unknown exception");

  grpc::ClientContext ctx2;
  v1::GetStatusResponse status;
  EXPECT_TRUE(stub->GetStatus(&ctx2, {}, &status).ok());  // still serving
  (*daemon)->Shutdown(std::chrono::milliseconds(100));
}

TEST(HandlerSafety, RpcRecorderComesWithTheOptions) {
  std::mutex mu;
  std::multiset<std::pair<std::string, StatusCode>> seen;
  DaemonOptions opts;
  const std::string socket = "/tmp/gnmr-recorder-" + std::to_string(::getpid()) + ".sock";
  opts.listen = {"unix:" + socket};
  opts.record_rpc = [&](std::string_view method, StatusCode code) {
    std::lock_guard<std::mutex> lock(mu);
    seen.emplace(std::string(method), code);
  };
  auto daemon = Daemon::Start(opts, nullptr, AdminContext());
  ASSERT_TRUE(daemon.ok()) << daemon.status().ToString();
  auto channel = grpc::CreateChannel("unix:" + socket, grpc::InsecureChannelCredentials());
  RawRank rank(channel, "j", 0, 1, "tok");
  ASSERT_TRUE(rank.Register({{"x"}}).ok());
  EXPECT_EQ(rank.Register({{""}}).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  auto stub = v1::Admin::NewStub(channel);
  grpc::ClientContext ctx;
  v1::ListJobsResponse jobs;
  ASSERT_TRUE(stub->ListJobs(&ctx, {}, &jobs).ok());
  (*daemon)->Shutdown(std::chrono::milliseconds(100));
  std::lock_guard<std::mutex> lock(mu);
  EXPECT_EQ(seen.count({"Register", StatusCode::kOk}), 1u);
  EXPECT_EQ(seen.count({"Register", StatusCode::kInvalidArgument}), 1u);
  EXPECT_EQ(seen.count({"Admin.ListJobs", StatusCode::kOk}), 1u);
}

}  // namespace
}  // namespace gnmr::testing
