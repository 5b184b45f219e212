// Throwaway certificates for TLS tests, made by the openssl command: a CA,
// a server certificate for localhost and 127.0.0.1 and a client
// certificate, signed by it. Tests skip where openssl is missing.
#pragma once

#include <cstdlib>
#include <fstream>
#include <string>

namespace gnmr::testing {

inline bool HaveOpenssl() { return std::system("command -v openssl >/dev/null 2>&1") == 0; }

// Writes ca.pem/ca.key, server.pem/server.key and client.pem/client.key in
// `dir` (which exists); false if openssl failed.
inline bool MakeTestCertificates(const std::string& dir) {
  const std::string d = "cd '" + dir + "' && ";
  const std::string ec = " -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";
  const std::string quiet = " >/dev/null 2>&1";
  std::ofstream(dir + "/ext") << "subjectAltName=DNS:localhost,IP:127.0.0.1\n";
  if (std::system((d + "openssl req -x509" + ec +
                   " -keyout ca.key -out ca.pem -days 2 -subj /CN=gnmr-test-ca" + quiet)
                      .c_str()) != 0) {
    return false;
  }
  for (const std::string who : {"server", "client"}) {
    if (std::system((d + "openssl req" + ec + " -keyout " + who + ".key -out " + who +
                     ".csr -subj /CN=" + (who == "server" ? "localhost" : "gnmr-client") + quiet +
                     " && openssl x509 -req -in " + who +
                     ".csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 -out " + who +
                     ".pem -extfile ext" + quiet)
                        .c_str()) != 0) {
      return false;
    }
  }
  return true;
}

// What a daemon's TCP listener is given for the certificates in `dir`:
// TLS, and mutual TLS (clients signed by the same CA) with `mtls`.
struct TestServerTls {
  TestServerTls(const std::string& dir, bool mtls)
      : cert(dir + "/server.pem"),
        key(dir + "/server.key"),
        client_ca(mtls ? dir + "/ca.pem" : "") {}
  std::string cert, key, client_ca;
};

}  // namespace gnmr::testing
