// Checkpoints through the client library (docs/checkpoint.md): the state
// exported from one daemon and imported into a fresh one under the same job
// id is the same state, and the import starts a generation the ranks
// follow; bad bytes, an absent daemon and missing rights are clear errors,
// never exceptions; the C API does the same with caller-freed buffers.
#include <unistd.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "daemon/server/daemon.h"
#include "gnmr/client.h"
#include "gnmr/gnmr_c.h"
#include "gnmr/v1/controller.pb.h"
#include "tests/client/one_unit_client.h"
#include "tests/testing/eventually.h"

namespace gnmr {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
using testing::Eventually;

ControllerConfig Fast() {
  ControllerConfig c;
  c.warmup = 5;
  c.ema_decay = 0.9;
  c.lock_steps = 5;
  c.max_o = 2;
  c.lag = 1;
  return c;
}

class ClientCheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override { path_ = "/tmp/gnmr_ckpt_test_" + std::to_string(getpid()) + ".sock"; }
  void TearDown() override {
    client_.reset();
    StopDaemon();
  }

  void StartDaemon(const std::vector<std::string>& listen, AdminContext admin = {}) {
    DaemonOptions d;
    d.listen = listen;
    auto s = Daemon::Start(d, nullptr, std::move(admin));
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    daemon_ = std::move(s).value();
  }
  void StopDaemon() {
    if (daemon_) daemon_->Shutdown(milliseconds(200));
    daemon_.reset();
  }

  ClientOptions Options(const std::string& target) const {
    ClientOptions o;
    o.target = target;
    o.job_id = "ckpt";
    o.decision_wait = milliseconds(3000);
    o.config = Fast();
    return o;
  }

  // A one-unit client, started and connected.
  void Connect(ClientOptions o) {
    client_ = testing::StartOneUnitClient(std::move(o), &grad_);
    ASSERT_NE(client_, nullptr);
    ASSERT_TRUE(client_->WaitConnected(milliseconds(10000)).ok());
  }

  // Steps [from, to) with a spike at `spike`; returns once the daemon has
  // decided the last step.
  void Train(int64_t from, int64_t to, int64_t spike) {
    for (int64_t step = from; step < to; ++step) {
      const float f = step == spike ? 30.0f : 1.0f;
      for (size_t i = 0; i < grad_.size(); ++i) {
        grad_[i] = f * 0.01f * static_cast<float>((i * 7 + step * 13) % 19 + 1);
      }
      ASSERT_TRUE(client_->Observe(step).ok());
      Plan plan = client_->PlanFor(step);
      ASSERT_TRUE(client_->Ack(plan).ok());
    }
    ASSERT_TRUE(client_->Flush(milliseconds(5000)));
    ASSERT_TRUE(Eventually([&] { return client_->Counters().last_decided_step >= to - 1; }));
  }

  std::string path_;
  std::vector<float> grad_ = std::vector<float>(512);
  std::unique_ptr<Daemon> daemon_;
  std::unique_ptr<Client> client_;
};

TEST_F(ClientCheckpointTest, StateMovesToAFreshDaemonUnderTheSameJobId) {
  const std::string target = "unix:" + path_;
  StartDaemon({target});
  Connect(Options(target));
  Train(0, 30, /*spike=*/26);
  StatusOr<std::string> saved = client_->ExportState(milliseconds(5000));
  ASSERT_TRUE(saved.ok()) << saved.status().ToString();
  v1::ControllerState before;
  ASSERT_TRUE(before.ParseFromString(*saved));
  EXPECT_EQ(before.last_step(), 29);
  ASSERT_EQ(before.units_size(), 1);
  EXPECT_GT(before.recovery_size(), 0) << "the spike at 26 is still in recovery (lock 5)";

  // The daemon dies with its state; a new one knows nothing of the job.
  client_.reset();
  StopDaemon();
  StartDaemon({target});
  Connect(Options(target));
  const uint64_t registered = client_->Counters().generation;
  StatusOr<uint64_t> generation = client_->ImportState(*saved, milliseconds(5000));
  ASSERT_TRUE(generation.ok()) << generation.status().ToString();
  EXPECT_GT(*generation, registered);
  ASSERT_TRUE(Eventually([&] { return client_->Counters().generation >= *generation; }));

  StatusOr<std::string> again = client_->ExportState(milliseconds(5000));
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  v1::ControllerState after;
  ASSERT_TRUE(after.ParseFromString(*again));
  EXPECT_EQ(after.SerializeAsString(), before.SerializeAsString());
}

TEST_F(ClientCheckpointTest, BadBytesAreRefusedBeforeAnyNetwork) {
  // No daemon at all: the bytes are checked first.
  auto c = Client::Create(Options("unix:" + path_));
  ASSERT_TRUE(c.ok());
  StatusOr<uint64_t> g = (*c)->ImportState("\xff\xff not a state", milliseconds(500));
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(g.status().message().find("not a gnmr.v1.ControllerState"), std::string::npos)
      << g.status().message();
  StatusOr<std::string> e = (*c)->ExportState(milliseconds(0));
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), StatusCode::kInvalidArgument);
}

TEST_F(ClientCheckpointTest, AnAbsentDaemonIsAnErrorWithinTheTimeout) {
  auto c = Client::Create(Options("unix:" + path_));
  ASSERT_TRUE(c.ok());
  const Clock::time_point start = Clock::now();
  StatusOr<std::string> e = (*c)->ExportState(milliseconds(300));
  ASSERT_FALSE(e.ok());
  EXPECT_TRUE(e.status().code() == StatusCode::kUnavailable ||
              e.status().code() == StatusCode::kDeadlineExceeded)
      << e.status().ToString();
  EXPECT_NE(e.status().message().find("Admin.ExportState"), std::string::npos);
  // Bounded by the timeout (generous: a loaded machine), not by gRPC's
  // default reconnect behaviour.
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(30));
}

TEST_F(ClientCheckpointTest, OverTcpTheAdminTokenIsSentAndRequired) {
  AdminContext admin;
  admin.admin_token = "adm-secret";
  StartDaemon({"unix:" + path_, "127.0.0.1:0"}, admin);
  const std::string tcp = daemon_->bound()[1];
  Connect(Options("unix:" + path_));  // the job exists (created over the socket)
  Train(0, 10, /*spike=*/-1);

  auto anonymous = Client::Create(Options(tcp));
  ASSERT_TRUE(anonymous.ok());
  StatusOr<std::string> refused = (*anonymous)->ExportState(milliseconds(5000));
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kUnauthenticated) << refused.status().ToString();

  ClientOptions with_token = Options(tcp);
  with_token.admin_token = "adm-secret";
  auto admin_client = Client::Create(with_token);
  ASSERT_TRUE(admin_client.ok());
  StatusOr<std::string> state = (*admin_client)->ExportState(milliseconds(5000));
  ASSERT_TRUE(state.ok()) << state.status().ToString();
  StatusOr<uint64_t> g = (*admin_client)->ImportState(*state, milliseconds(5000));
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  StatusOr<uint64_t> no_rights = (*anonymous)->ImportState(*state, milliseconds(5000));
  ASSERT_FALSE(no_rights.ok());
  EXPECT_EQ(no_rights.status().code(), StatusCode::kUnauthenticated);
}

TEST_F(ClientCheckpointTest, CApiRoundTripWithCallerFreedBuffer) {
  const std::string target = "unix:" + path_;
  StartDaemon({target});
  Connect(Options(target));
  Train(0, 12, /*spike=*/-1);

  gnmr_options o;
  gnmr_options_init(&o);
  o.target = target.c_str();
  o.job_id = "ckpt";
  gnmr_client* c = nullptr;
  ASSERT_EQ(gnmr_client_create(&o, &c), GNMR_OK) << gnmr_last_error();
  void* state = nullptr;
  size_t len = 0;
  ASSERT_EQ(gnmr_export_state(c, 5000, &state, &len), GNMR_OK) << gnmr_last_error();
  ASSERT_NE(state, nullptr);
  v1::ControllerState parsed;
  ASSERT_TRUE(parsed.ParseFromArray(state, static_cast<int>(len)));
  EXPECT_EQ(parsed.last_step(), 11);
  uint64_t generation = 0;
  ASSERT_EQ(gnmr_import_state(c, state, len, 5000, &generation), GNMR_OK) << gnmr_last_error();
  EXPECT_GT(generation, 0u);
  gnmr_free(state);

  EXPECT_EQ(gnmr_export_state(c, 5000, nullptr, &len), GNMR_EINVALID_ARGUMENT);
  EXPECT_EQ(gnmr_import_state(c, "junk", 4, 5000, nullptr), GNMR_EINVALID_ARGUMENT);
  EXPECT_NE(std::string(gnmr_last_error()).find("ControllerState"), std::string::npos);
  gnmr_free(nullptr);
  gnmr_client_destroy(c);
}

}  // namespace
}  // namespace gnmr
