// /metrics cannot be held shut by idle connections: connections that send
// nothing (or half a request) hold an HTTP thread only until the request
// timeout, and there are enough threads that a few of them do not delay a
// scrape at all.
#include <chrono>
#include <vector>

#include <gtest/gtest.h>

#include "daemon/metrics/daemon_metrics.h"
#include "tests/metrics/metrics_scrape.h"

namespace gnmr {
namespace metrics {
namespace {

using testing_util::HttpGet;

class MetricsHttpTest : public ::testing::Test {
 protected:
  void SetUp() override {
    MetricsOptions options;
    options.listen = "127.0.0.1:0";
    StatusOr<std::unique_ptr<DaemonMetrics>> m = DaemonMetrics::Start(options);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    metrics_ = std::move(m).value();
  }
  void TearDown() override {
    for (int fd : idle_) ::close(fd);
  }
  // A connection that sends `partial` (maybe nothing) and then waits.
  void OpenIdle(const std::string& partial = "") {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(metrics_->port()));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    if (!partial.empty()) {
      ASSERT_GT(::send(fd, partial.data(), partial.size(), 0), 0);
    }
    idle_.push_back(fd);
  }

  std::unique_ptr<DaemonMetrics> metrics_;
  std::vector<int> idle_;
};

TEST_F(MetricsHttpTest, IdleConnectionsDoNotBlockAScrape) {
  for (int i = 0; i < 4; ++i) OpenIdle();
  for (int i = 0; i < 2; ++i) OpenIdle("GET /metrics HTTP/1.1\r\nHost: x\r\n");  // no end
  // Served at once by a free thread; the limit only bounds a failure (with
  // two threads and civetweb's 30 s request timeout this took 60 s).
  const testing_util::HttpResponse r = HttpGet(metrics_->port(), "/metrics", 20);
  EXPECT_EQ(r.status, 200);
  EXPECT_NE(r.body.find("gnmr_build_info"), std::string::npos);
}

TEST_F(MetricsHttpTest, MoreIdleConnectionsThanThreadsOnlyDelayAScrape) {
  for (int i = 0; i < 12; ++i) OpenIdle();  // more than the 8 threads
  // The request timeout (5 s) frees the threads they hold.
  const testing_util::HttpResponse r = HttpGet(metrics_->port(), "/metrics", 40);
  EXPECT_EQ(r.status, 200);
  EXPECT_NE(r.body.find("gnmr_build_info"), std::string::npos);
}

}  // namespace
}  // namespace metrics
}  // namespace gnmr
