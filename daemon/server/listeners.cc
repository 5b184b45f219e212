#include "daemon/server/listeners.h"

#include <netdb.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

namespace gnmr {
namespace {

Status Failed(const std::string& message) {
  return Status(StatusCode::kFailedPrecondition, message);
}

// ------------------------------------------------------------------ TLS

using Bio = std::unique_ptr<BIO, decltype(&BIO_free)>;
using Cert = std::unique_ptr<X509, decltype(&X509_free)>;
using Key = std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)>;

Bio OpenPem(const std::string& path) { return Bio(BIO_new_file(path.c_str(), "r"), &BIO_free); }

StatusOr<Cert> ReadCert(const std::string& key, const std::string& path) {
  Bio bio = OpenPem(path);
  if (!bio) return Failed(key + " " + path + ": cannot read: " + std::strerror(errno));
  Cert cert(PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr), &X509_free);
  if (!cert) {
    return Failed(key + " " + path +
                  ": no PEM certificate in it (expected -----BEGIN CERTIFICATE-----)");
  }
  return cert;
}

Status CheckTlsFilesLocked(const TlsOptions& tls) {
  StatusOr<Cert> cert = ReadCert("tls.cert", tls.cert_file);
  if (!cert.ok()) return cert.status();
  Bio bio = OpenPem(tls.key_file);
  if (!bio) return Failed("tls.key " + tls.key_file + ": cannot read: " + std::strerror(errno));
  Key key(PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr), &EVP_PKEY_free);
  if (!key) {
    return Failed("tls.key " + tls.key_file +
                  ": no unencrypted PEM private key in it (expected -----BEGIN PRIVATE KEY-----)");
  }
  if (X509_check_private_key(cert->get(), key.get()) != 1) {
    return Failed("tls.key " + tls.key_file + " does not belong to the certificate in tls.cert " +
                  tls.cert_file);
  }
  if (!tls.client_ca_file.empty()) {
    StatusOr<Cert> ca = ReadCert("tls.client_ca", tls.client_ca_file);
    if (!ca.ok()) return ca.status();
  }
  return Status::Ok();
}

// ----------------------------------------------------------- addresses

bool IsUnix(const std::string& address) { return address.rfind("unix:", 0) == 0; }

std::string Errno(int err) { return std::strerror(err); }

// Connects to the socket at `path` without blocking: 0 if something
// listens there (a full backlog, EAGAIN, counts too), else errno.
std::optional<Status> DiagnoseTcp(const std::string& address) {
  const std::string where = "cannot listen on " + address + ": ";
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos) return Failed(where + "expected host:port");
  std::string host = address.substr(0, colon);
  const std::string port = address.substr(colon + 1);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  const int gai =
      ::getaddrinfo(host.empty() ? nullptr : host.c_str(), port.c_str(), &hints, &found);
  if (gai != 0) {
    return Failed(where + "cannot resolve '" + host + "': " + ::gai_strerror(gai));
  }
  int err = 0;
  for (addrinfo* a = found; a != nullptr && err == 0; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    const int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));  // as gRPC does
    if (::bind(fd, a->ai_addr, a->ai_addrlen) != 0) err = errno;
    ::close(fd);
  }
  ::freeaddrinfo(found);
  switch (err) {
    case 0:
      return std::nullopt;
    case EADDRINUSE:
      return Failed(where + "the port is in use by another process");
    case EACCES:
      return Failed(where + Errno(err) + " (ports below 1024 need root or CAP_NET_BIND_SERVICE)");
    case EADDRNOTAVAIL:
      return Failed(where + "'" + host + "' is not an address of this machine");
    default:
      return Failed(where + Errno(err));
  }
}

}  // namespace

Status CheckTlsFiles(const TlsOptions& tls) {
  if (tls.cert_file.empty()) return Status::Ok();
  Status s = CheckTlsFilesLocked(tls);
  ERR_clear_error();  // OpenSSL's thread-local error queue: leave it empty
  return s;
}

std::optional<Status> DiagnoseListenFailure(const std::string& address) {
  return IsUnix(address) ? DiagnoseUnixListen(address) : DiagnoseTcp(address);
}

std::string PrivateSocketPath(const std::string& path) {
  const size_t slash = path.rfind('/');
  const std::string name = "." + path.substr(slash + 1) + ".grpc";
  const std::string out = path.substr(0, slash + 1) + name;
  return out.size() < sizeof(sockaddr_un{}.sun_path) ? out : "";
}

Status PublishSocket(const std::string& private_path, const std::string& path) {
  if (::link(private_path.c_str(), path.c_str()) != 0) {
    return Failed("cannot listen on unix:" + path + ": cannot create it: " + Errno(errno) +
                  (errno == EEXIST ? " (another process created it while gnmrd started)" : ""));
  }
  return Status::Ok();
}

std::optional<SocketIdentity> IdentifySocket(const std::string& path) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0 || !S_ISSOCK(st.st_mode)) return std::nullopt;
  return SocketIdentity{st.st_dev, st.st_ino};
}

void RemoveOwnSocket(const std::string& path, const SocketIdentity& mine) {
  std::optional<SocketIdentity> now = IdentifySocket(path);
  if (now && now->dev == mine.dev && now->ino == mine.ino) ::unlink(path.c_str());
}

}  // namespace gnmr
