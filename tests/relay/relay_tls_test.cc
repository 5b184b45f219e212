// gnmr-relay to gnmrd over TLS and mutual TLS, as gnmrd's TCP listener
// offers them (docs/relay.md, "TLS to gnmrd"): the real relay and a real
// gnmrd core with throwaway certificates (skipped without openssl).
#include <gtest/gtest.h>

#include "relay/relay_server.h"
#include "tests/daemon/raw_rank.h"
#include "tests/daemon/test_daemon.h"
#include "tests/testing/test_certs.h"

namespace gnmr::testing {
namespace {

class RelayTlsTest : public DaemonTest {
 protected:
  void SetUp() override {
    if (!HaveOpenssl()) GTEST_SKIP() << "no openssl command to make certificates";
    char tmpl[] = "/tmp/gnmr-relay-tls-XXXXXX";
    dir_ = ::mkdtemp(tmpl);
    ASSERT_EQ(std::system(("mkdir -p '" + dir_ + "/other'").c_str()), 0);
    ASSERT_TRUE(MakeTestCertificates(dir_));
    ASSERT_TRUE(MakeTestCertificates(dir_ + "/other"));  // a CA that signed nothing of gnmrd's
  }
  void TearDown() override {
    ranks_.clear();
    if (relay_) relay_->Shutdown();
    DaemonTest::TearDown();
    if (!dir_.empty()) (void)std::system(("rm -rf '" + dir_ + "'").c_str());
  }
  std::string Path(const std::string& name) const { return dir_ + "/" + name; }

  // gnmrd on TCP only, speaking TLS (mutual with `mtls`), with the
  // production access rules: job "j" needs its token over TCP unless the
  // peer shows a client certificate.
  void StartTlsGnmrd(bool mtls) {
    insecure_tcp_ = false;
    DaemonOptions opts;
    opts.listen = {"127.0.0.1:0"};
    const TestServerTls tls(dir_, mtls);
    opts.tls = {tls.cert, tls.key, tls.client_ca};
    opts.registry.job_tokens = {{"j", "secret"}};
    StartDaemon(opts);
  }
  StatusOr<std::unique_ptr<relay::RelayServer>> StartRelay(const ChannelTls& tls) {
    relay::RelayOptions options;
    options.listen = "unix:" + Path("relay.sock");
    options.upstream = daemon_->bound()[0];
    options.tls = tls;
    return relay::RelayServer::Start(options);
  }
  // The relay of the test, with `tls`; it must start.
  void UseRelay(const ChannelTls& tls) {
    auto relay = StartRelay(tls);
    ASSERT_TRUE(relay.ok()) << relay.status().ToString();
    relay_ = std::move(relay).value();
  }
  std::shared_ptr<grpc::Channel> Relay() {
    return grpc::CreateChannel("unix:" + Path("relay.sock"), grpc::InsecureChannelCredentials());
  }
  // Rank 0 of `job` (world 1) through the relay: registered, attached, one
  // decision. Empty if so, else what failed.
  std::string RankGetsADecision(const std::string& job, const std::string& token) {
    ranks_.push_back(std::make_unique<RawRank>(Relay(), job, 0, 1, token));
    RawRank* r = ranks_.back().get();
    const v1::ControllerConfig config = FastConfig();
    const grpc::Status registered = r->Register({{"a"}, {"b"}}, nullptr, &config);
    if (!registered.ok()) return "Register: " + registered.error_message();
    r->Open();
    if (!r->WaitMessages(1)) return "no GenerationStart";
    v1::Decision d;
    if (!r->SendStats(0, {4.0, 1.0}) || !r->WaitDecision(0, &d)) return "no decision";
    return "";
  }

  std::string dir_;
  std::unique_ptr<relay::RelayServer> relay_;
  std::vector<std::unique_ptr<RawRank>> ranks_;
};

TEST_F(RelayTlsTest, TheRelayReachesATlsGnmrdAndItsRanksShowTheirTokens) {
  StartTlsGnmrd(/*mtls=*/false);
  ChannelTls tls;
  tls.ca_file = Path("ca.pem");
  UseRelay(tls);
  EXPECT_TRUE(relay_->CheckUpstream(std::chrono::seconds(5)).ok());
  // Server-only TLS says nothing of the peer: each rank's token counts.
  EXPECT_EQ(RankGetsADecision("j", "secret"), "");
  EXPECT_NE(RankGetsADecision("j", "wrong"), "");
  EXPECT_EQ(relay_->node_streams_opened(), 1u);
}

TEST_F(RelayTlsTest, WithMutualTlsTheRelaysCertificateAuthenticatesIt) {
  StartTlsGnmrd(/*mtls=*/true);
  ChannelTls tls;
  tls.ca_file = Path("ca.pem");
  // Without a client certificate gnmrd's listener refuses the connection.
  auto plain = StartRelay(tls);
  ASSERT_TRUE(plain.ok()) << plain.status().ToString();
  EXPECT_FALSE((*plain)->CheckUpstream(std::chrono::seconds(5)).ok());
  plain.value().reset();  // its socket free again
  tls.cert_file = Path("client.pem");
  tls.key_file = Path("client.key");
  UseRelay(tls);
  EXPECT_TRUE(relay_->CheckUpstream(std::chrono::seconds(5)).ok());
  // The transport vouches for the ranks: a new job needs no token.
  EXPECT_EQ(RankGetsADecision("m", ""), "");
}

TEST_F(RelayTlsTest, AWrongCaFailsLoudly) {
  StartTlsGnmrd(/*mtls=*/false);
  ChannelTls tls;
  tls.ca_file = Path("other/ca.pem");
  UseRelay(tls);
  // gnmr-relay logs this at start; the ranks get the same reason.
  const Status reached = relay_->CheckUpstream(std::chrono::seconds(5));
  EXPECT_EQ(reached.code(), StatusCode::kUnavailable);
  EXPECT_NE(reached.message().find("certificate verify failed"), std::string::npos)
      << reached.ToString();
  const std::string failed = RankGetsADecision("j", "secret");
  EXPECT_NE(failed.find("certificate verify failed"), std::string::npos) << failed;
}

TEST_F(RelayTlsTest, TlsOptionsAreCheckedAtStart) {
  StartTlsGnmrd(/*mtls=*/false);
  struct Case {
    ChannelTls tls;
    std::string upstream, expected;
  };
  const std::vector<Case> cases = {
      {{"", Path("client.pem"), Path("client.key"), ""}, "", "need --tls-ca"},
      {{Path("ca.pem"), Path("client.pem"), "", ""}, "", "--tls-cert and --tls-key go together"},
      {{Path("nothing.pem"), "", "", ""}, "", "--tls-ca " + Path("nothing.pem") + ": cannot read"},
      {{Path("ca.pem"), "", "", ""}, "unix:" + Path("g.sock"), "gnmrd's Unix socket"},
  };
  for (const Case& c : cases) {
    relay::RelayOptions options;
    options.listen = "unix:" + Path("relay.sock");
    options.upstream = c.upstream.empty() ? daemon_->bound()[0] : c.upstream;
    options.tls = c.tls;
    auto relay = relay::RelayServer::Start(options);
    ASSERT_FALSE(relay.ok()) << c.expected;
    EXPECT_EQ(relay.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(relay.status().message().find(c.expected), std::string::npos)
        << relay.status().ToString();
  }
}

}  // namespace
}  // namespace gnmr::testing
