// What a client sends cannot forge or flood gnmrd's log: client strings are
// escaped (newline, ESC, NUL become \xNN), and a rejected Register retried
// in a loop logs one line per job and cause per interval, with a count.
#include <chrono>
#include <sstream>

#include "tests/daemon/log_capture.h"
#include "tests/daemon/test_daemon.h"

namespace gnmr::testing {
namespace {

// Lines of `log` that start with `prefix` (a forged "[critical]" would).
int LinesStartingWith(const std::string& log, const std::string& prefix) {
  std::istringstream in(log);
  int n = 0;
  for (std::string line; std::getline(in, line);) n += line.rfind(prefix, 0) == 0;
  return n;
}

int LinesContaining(const std::string& log, const std::string& needle) {
  std::istringstream in(log);
  int n = 0;
  for (std::string line; std::getline(in, line);) n += line.find(needle) != std::string::npos;
  return n;
}

class LogSafetyTest : public DaemonTest {
 protected:
  void SetUp() override { StartDaemon(); }
  v1::RegisterRequest Request(const std::string& job, const std::string& unit) {
    v1::RegisterRequest req;
    req.set_job_id(job);
    req.set_rank(0);
    req.set_world_size(1);
    req.set_client_version("raw-test");
    v1::UnitSpec* u = req.add_units();
    u->set_name(unit);
    u->set_numel(10);
    u->set_dtype(v1::DTYPE_FP32);
    u->set_shard_count(1);
    return req;
  }
  LogCapture log_;
};

TEST_F(LogSafetyTest, ClientStringsAreEscapedInTheLog) {
  RawRank rank(Unix(), "j", 0, 1, "tok");
  // Accepted: the client version is logged with the registration.
  v1::RegisterRequest ok = Request("j", "x");
  ok.set_client_version("1.0\n[critical] forged by client\x1b[2J");
  ASSERT_TRUE(rank.RegisterRaw(ok).ok());
  // Rejected: a job id and a unit name with control bytes, echoed in the
  // status message that the warning line carries.
  EXPECT_EQ(rank.RegisterRaw(Request("bad\n[critical] forged job", "x")).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(rank.RegisterRaw(Request("j2", "u\n[critical] forged unit")).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(rank.RegisterRaw(Request("j3", std::string("nul\0\x1b]0;title\x07", 14))).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);

  const std::string log = log_.text();
  EXPECT_EQ(LinesStartingWith(log, "[critical]"), 0) << log;
  EXPECT_EQ(log.find('\x1b'), std::string::npos) << log;
  EXPECT_EQ(log.find('\0'), std::string::npos);
  EXPECT_EQ(
      LinesContaining(log, "(client 1.0\\x0a[critical] forged by client\\x1b[2J, generation 1)"), 1)
      << log;
  EXPECT_EQ(LinesContaining(log, "job=bad\\x0a[critical] forged job"), 1) << log;
  // A unit name is escaped once: in the status message (common/unit_name.h);
  // the line keeps the message's backslashes (EscapeMessageForLog).
  EXPECT_EQ(LinesContaining(log, "u\\x0a[critical] forged unit"), 1) << log;
  EXPECT_EQ(LinesContaining(log, "nul\\x00\\x1b]0;title\\x07"), 1) << log;
  EXPECT_EQ(LinesContaining(log, "\\\\x"), 0) << log;  // nothing escaped twice
}

TEST_F(LogSafetyTest, RejectedRegisterRetriedInALoopLogsOneLinePerJobAndCause) {
  RawRank rank(Unix(), "j", 0, 1, "tok");
  ASSERT_TRUE(rank.RegisterRaw(Request("j", "x")).ok());
  RawRank intruder(Unix(), "j", 0, 1, "wrong");
  const auto start = std::chrono::steady_clock::now();
  constexpr int kTries = 300;
  for (int i = 0; i < kTries; ++i) {
    ASSERT_EQ(intruder.RegisterRaw(Request("j", "x")).error_code(),
              grpc::StatusCode::UNAUTHENTICATED);
  }
  // Another cause of the same job has its own line.
  EXPECT_EQ(intruder.RegisterRaw(Request("j", "")).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  const auto elapsed = std::chrono::steady_clock::now() - start;
  const std::string log = log_.text();
  // One line per 10 s interval at most (the loop normally takes well under
  // one interval; a loaded machine may need more).
  const int allowed = 1 + static_cast<int>(elapsed / std::chrono::seconds(10));
  const int lines = LinesContaining(log, "UNAUTHENTICATED");
  EXPECT_GE(lines, 1) << log;
  EXPECT_LE(lines, allowed) << log;
  EXPECT_EQ(LinesContaining(log, "unit name is empty"), 1) << log;
}

}  // namespace
}  // namespace gnmr::testing
