// What the relay forwards must fit gnmrd's message bound, with real
// processes (gnmrd, gnmr-relay; raw ranks): a rank message that cannot fit
// once framed as a lane (its token included) ends that rank alone, and the
// relay's writer never batches lanes past the bound. Either used to end
// the whole node stream, every lane on it, other jobs' ranks included.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "tests/relay/relay_process.h"
#include "tests/testing/sanitizer.h"

namespace gnmr::testing {
namespace {

using std::chrono::milliseconds;

constexpr int kMaxMessageBytes = 1 << 20;

// `m` padded with an unknown field to exactly `bytes` bytes (gnmrd skips
// the field; the relay never reads it).
v1::ClientMessage Padded(v1::ClientMessage m, size_t bytes) {
  const size_t bare = m.ByteSizeLong();
  const size_t overhead = 2 + 3;  // field 1000's tag, a length below 2^21
  std::string pad(bytes - bare - overhead, 'x');
  m.GetReflection()->MutableUnknownFields(&m)->AddLengthDelimited(1000, pad);
  EXPECT_EQ(m.ByteSizeLong(), bytes);
  return m;
}

class RelayBoundsTest : public RelayProcessTest {
 protected:
  void SetUp() override {
    ASSERT_TRUE(StartGnmrd("max_message_bytes: " + std::to_string(kMaxMessageBytes) + "\n"));
  }
  void StartRelay(std::vector<std::string> extra = {}) {
    extra.insert(extra.end(), {"--max-message-bytes", std::to_string(kMaxMessageBytes)});
    RelayProcessTest::StartRelay(extra);
  }
};

TEST_F(RelayBoundsTest, AMessageThatCannotFitWithItsTokenEndsItsRankAlone) {
  StartRelay();
  RawRank* b = Attach("j", 0, 1);
  ASSERT_TRUE(b->SendStats(0, {4.0, 1.0}));
  v1::Decision d;
  ASSERT_TRUE(b->WaitDecision(0, &d));
  // Rank A of another job: a 4 KiB token and a first message 1025 bytes
  // under the bound. Alone it fits; with the token and the lane's framing
  // it does not.
  const std::string token(4096, 't');
  for (int attempt = 0; attempt < 3; ++attempt) {
    RawRank a(Relay(), "k", 0, 1, token);
    a.Open(0, /*hello=*/false);
    v1::ClientMessage hello;
    hello.mutable_hello()->set_job_id("k");
    ASSERT_TRUE(a.Send(Padded(hello, kMaxMessageBytes - 1025)));
    const grpc::Status ended = a.WaitEnd();
    EXPECT_EQ(ended.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << ended.error_message();
    EXPECT_NE(ended.error_message().find("a message of 1047551 bytes with its token of 4096 "
                                         "bytes takes 1051660 bytes as a lane of the node "
                                         "stream, over gnmrd's max_message_bytes (1048576)"),
              std::string::npos)
        << ended.error_message();
    // (1051660 bytes is what gnmrd's gRPC used to refuse, ending the node
    // stream: "Received message larger than max (1051660 vs. 1048576)".)
    // B, on the same relay, goes on.
    const int64_t step = 1 + attempt;
    ASSERT_TRUE(b->SendStats(step, {4.0, 1.0}));
    EXPECT_TRUE(b->WaitDecision(step, &d)) << "step " << step << "\n" << relay_.log();
  }
}

TEST_F(RelayBoundsTest, TheRelayNeverBatchesLanesPastGnmrdsBound) {
  // Four ranks whose reports are each 0.6 of the bound, sent at once: each
  // fits, but what queues while the relay writes one goes up together, and
  // two in one write do not fit.
  StartRelay();
  std::vector<RawRank*> ranks;
  for (uint32_t r = 0; r < 4; ++r) ranks.push_back(Attach("j", r, 4));
  constexpr size_t kReportBytes = kMaxMessageBytes * 6 / 10;
  for (int64_t step = 0; step < 20; ++step) {
    std::vector<std::thread> senders;
    for (RawRank* r : ranks) {
      senders.emplace_back([r, step] {
        v1::ClientMessage m;
        *m.mutable_stats() = r->Stats(step, {4.0, 1.0});
        EXPECT_TRUE(r->Send(Padded(m, kReportBytes))) << "step " << step;
      });
    }
    for (std::thread& t : senders) t.join();
    for (RawRank* r : ranks) {
      v1::Decision d;
      ASSERT_TRUE(r->WaitDecision(step, &d)) << "step " << step << "\n" << relay_.log();
    }
  }
}

// Whether `pid` is stopped (state T in /proc/<pid>/stat) within 5 s.
bool WaitStopped(pid_t pid) {
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (std::chrono::steady_clock::now() < give_up) {
    std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
    std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
    const size_t paren = text.rfind(')');
    if (paren != std::string::npos && paren + 2 < text.size() && text[paren + 2] == 'T') {
      return true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return false;
}

TEST_F(RelayBoundsTest, EmptyMessagesCountAgainstWhatMayWaitForGnmrd) {
  // gnmrd stops reading (SIGSTOP); a rank sends empty messages. Each costs
  // the relay ~110 bytes while it waits, though it has no bytes of its own:
  // the bound used to count bytes only (4M empty messages: 17 -> 394 MB).
  constexpr int64_t kPendingBound = 8 << 20;
  StartRelay({"--max-pending-bytes", std::to_string(kPendingBound)});
  RawRank* r = Attach("j", 0, 1);
  const uint64_t before = ProcStatusKib(relay_.pid(), "VmHWM:");
  ASSERT_EQ(::kill(gnmrd_.pid(), SIGSTOP), 0);
  struct Resume {  // gnmrd runs again whatever happens below
    pid_t pid;
    ~Resume() { ::kill(pid, SIGCONT); }
  } resume{gnmrd_.pid()};
  // kill() returns before a busy process has stopped: a loaded run once
  // let gnmrd read the first empty messages (and end the lane for them).
  ASSERT_TRUE(WaitStopped(gnmrd_.pid()));
  constexpr int kMessages = 400000;
  int sent = 0;
  while (sent < kMessages && r->Send(v1::ClientMessage())) ++sent;
  const grpc::Status ended = r->WaitEnd();
  const uint64_t after = ProcStatusKib(relay_.pid(), "VmHWM:");
  std::printf("relay VmHWM %llu -> %llu KiB (+%llu KiB) after %d empty messages taken\n",
              static_cast<unsigned long long>(before), static_cast<unsigned long long>(after),
              static_cast<unsigned long long>(after - before), sent);
  EXPECT_LT(sent, kMessages);
  EXPECT_EQ(ended.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << ended.error_message();
  EXPECT_NE(ended.error_message().find("gnmrd is not reading"), std::string::npos)
      << ended.error_message();
  // What waited (at most the bound, each message at its cost) and gRPC's
  // buffers towards the stopped gnmrd (not under a sanitizer: its
  // quarantine holds the freed messages).
  if (!kUnderSanitizer) {
    EXPECT_LE(after - before, static_cast<uint64_t>(kPendingBound >> 10) + (16u << 10));
  }
}

}  // namespace
}  // namespace gnmr::testing
