// gnmrctl against a TLS and a mutual-TLS daemon, with a throwaway CA made
// by the openssl command (skipped where it is missing).
#include "tests/gnmrctl/ctl_harness.h"
#include "tests/testing/test_certs.h"

namespace gnmr::testing {
namespace {

class CtlTlsTest : public CtlTest {
 protected:
  void SetUp() override {
    CtlTest::SetUp();
    if (!HaveOpenssl()) GTEST_SKIP() << "no openssl command to make certificates";
  }

  // Starts an empty daemon on TCP only, speaking TLS (mutual with `mtls`),
  // with the production access rules: only mutual TLS authenticates a peer.
  void StartTls(bool mtls) {
    ASSERT_TRUE(MakeTestCertificates(dir_));
    insecure_tcp_ = false;
    DaemonOptions opts;
    opts.listen = {"127.0.0.1:0"};
    const TestServerTls tls(dir_, mtls);
    opts.tls = {tls.cert, tls.key, tls.client_ca};
    Start(opts);
  }
};

TEST_F(CtlTlsTest, TlsNeedsTheCa) {
  StartTls(/*mtls=*/false);
  const std::string ca = Path("ca.pem");
  // Server-only TLS hides the traffic but does not say who the client is:
  // reads need a token as on plain TCP.
  CtlResult r = Run({"status", "--target", tcp_, "--tls-ca", ca});
  EXPECT_EQ(r.code, 1) << Show(r);
  EXPECT_EQ(r.err.rfind("gnmrctl: UNAUTHENTICATED: ", 0), 0u) << r.err;
  r = Run({"status", "--target", tcp_, "--tls-ca", ca, "--admin-token", admin_token_});
  ASSERT_EQ(r.code, 0) << Show(r);
  EXPECT_NE(r.out.find("version:    test-1.2"), std::string::npos) << r.out;
  r = Run({"status", "--target", "localhost:" + tcp_.substr(tcp_.rfind(':') + 1), "--tls-ca", ca,
           "--admin-token", admin_token_});
  EXPECT_EQ(r.code, 0) << Show(r);
  // Plaintext to a TLS port, or a certificate for another name: no
  // connection.
  r = Run({"status", "--target", tcp_, "--timeout", "2"});
  EXPECT_EQ(r.code, 1) << Show(r);
  EXPECT_EQ(r.err.rfind("gnmrctl: cannot reach gnmrd at " + tcp_, 0), 0u) << r.err;
  r = Run({"status", "--target", tcp_, "--tls-ca", ca, "--tls-server-name", "other.example"});
  EXPECT_EQ(r.code, 1) << Show(r);
  EXPECT_EQ(r.err.rfind("gnmrctl: cannot reach gnmrd at " + tcp_, 0), 0u) << r.err;
}

TEST_F(CtlTlsTest, MutualTlsNeedsTheClientCertificate) {
  StartTls(/*mtls=*/true);
  const std::vector<std::string> tls = {"--target", tcp_, "--tls-ca", Path("ca.pem")};
  std::vector<std::string> args = {"jobs"};
  args.insert(args.end(), tls.begin(), tls.end());
  CtlResult r = Run(args);
  EXPECT_EQ(r.code, 1) << Show(r);
  EXPECT_EQ(r.err.rfind("gnmrctl: cannot reach gnmrd at " + tcp_, 0), 0u) << r.err;
  args.insert(args.end(), {"--tls-cert", Path("client.pem"), "--tls-key", Path("client.key")});
  // The verified client certificate authenticates: no token needed to read.
  r = Run(args);
  ASSERT_EQ(r.code, 0) << Show(r);
  EXPECT_EQ(r.out, "no jobs\n");
}

}  // namespace
}  // namespace gnmr::testing
