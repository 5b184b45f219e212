// TLS on a channel to gnmrd, as gnmrctl and gnmr-relay configure it
// (--tls-ca, --tls-cert, --tls-key, --tls-server-name): one reading of the
// files and one set of rules for the options, so that both programs say
// the same about the same mistake.
//
// gnmrd's TCP listener speaks TLS when it has tls.cert and tls.key, and
// mutual TLS when it also has tls.client_ca (docs/deploy: the security
// model); its Unix socket is always plaintext.
#pragma once

#include <cerrno>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include <grpcpp/grpcpp.h>

#include "common/flag_parser.h"
#include "gnmr/status.h"

namespace gnmr {

struct ChannelTls {
  std::string ca_file;    // set: TLS, trusting this CA (PEM)
  std::string cert_file;  // with key_file: mutual TLS, this client certificate (PEM)
  std::string key_file;
  std::string server_name;  // the name gnmrd's certificate must carry (default: the host)

  bool enabled() const { return !ca_file.empty(); }
};

// Declares --tls-ca, --tls-cert, --tls-key and --tls-server-name.
inline void AddChannelTlsFlags(FlagParser* flags, ChannelTls* tls) {
  flags->AddString("tls-ca", "FILE",
                   "TLS to a host:port target, trusting this CA (PEM);\n"
                   "gnmrd's Unix socket is always plaintext",
                   &tls->ca_file);
  flags->AddString("tls-cert", "FILE", "client certificate for mutual TLS (PEM)", &tls->cert_file);
  flags->AddString("tls-key", "FILE", "client private key for mutual TLS (PEM)", &tls->key_file);
  flags->AddString("tls-server-name", "NAME",
                   "expect this name in gnmrd's certificate\n"
                   "(default: the target's host)",
                   &tls->server_name);
}

// InvalidArgument, naming the flags, when the options do not go together.
inline Status CheckChannelTls(const ChannelTls& tls) {
  if (tls.ca_file.empty() &&
      (!tls.cert_file.empty() || !tls.key_file.empty() || !tls.server_name.empty())) {
    return InvalidArgument("--tls-cert, --tls-key and --tls-server-name need --tls-ca");
  }
  if (tls.cert_file.empty() != tls.key_file.empty()) {
    return InvalidArgument("--tls-cert and --tls-key go together");
  }
  return Status::Ok();
}

// The contents of the file --FLAG names (a certificate, a key, a token);
// InvalidArgument naming both when it cannot be read.
inline StatusOr<std::string> ReadFlagFile(const std::string& flag, const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return InvalidArgument("--" + flag + " " + path + ": cannot read: " + std::strerror(errno));
  }
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// SSL credentials from the files (read now), the server name set in
// `args`; plaintext credentials when TLS is off.
inline StatusOr<std::shared_ptr<grpc::ChannelCredentials>> MakeChannelCredentials(
    const ChannelTls& tls, grpc::ChannelArguments* args) {
  GNMR_RETURN_IF_ERROR(CheckChannelTls(tls));
  if (!tls.enabled()) return grpc::InsecureChannelCredentials();
  grpc::SslCredentialsOptions ssl;
  StatusOr<std::string> ca = ReadFlagFile("tls-ca", tls.ca_file);
  if (!ca.ok()) return ca.status();
  ssl.pem_root_certs = *ca;
  if (!tls.cert_file.empty()) {
    StatusOr<std::string> cert = ReadFlagFile("tls-cert", tls.cert_file);
    if (!cert.ok()) return cert.status();
    StatusOr<std::string> key = ReadFlagFile("tls-key", tls.key_file);
    if (!key.ok()) return key.status();
    ssl.pem_cert_chain = *cert;
    ssl.pem_private_key = *key;
  }
  if (!tls.server_name.empty()) args->SetSslTargetNameOverride(tls.server_name);
  return grpc::SslCredentials(ssl);
}

}  // namespace gnmr
