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
int ConnectUnix(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", path.c_str());
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return errno;
  const int rc = ::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr));
  const int err = rc == 0 || errno == EAGAIN || errno == EINPROGRESS ? 0 : errno;
  ::close(fd);
  return err;
}

std::string Dir(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

std::optional<Status> DiagnoseUnix(const std::string& address) {
  const std::string path = address.substr(5);
  const std::string where = "cannot listen on " + address + ": ";
  if (path.size() >= sizeof(sockaddr_un{}.sun_path)) {
    return Failed(where + "the path is " + std::to_string(path.size()) +
                  " bytes long; Unix socket paths have at most " +
                  std::to_string(sizeof(sockaddr_un{}.sun_path) - 1));
  }
  const std::string dir = Dir(path);
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0) return Failed(where + dir + ": " + Errno(errno));
  if (!S_ISDIR(st.st_mode)) return Failed(where + dir + " is not a directory");
  // Try it: the kernel says best why a socket cannot be made there.
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", path.c_str());
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Failed(where + "socket: " + Errno(errno));
  const int rc = ::bind(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr));
  const int err = rc == 0 ? 0 : errno;
  ::close(fd);
  if (rc == 0) {
    ::unlink(path.c_str());
    return std::nullopt;
  }
  if (err == EACCES || err == EPERM || err == EROFS) {
    return Failed(where + "cannot create the socket in " + dir + ": " + Errno(err) +
                  " (the directory must be writable by uid " + std::to_string(::geteuid()) + ")");
  }
  return Failed(where + Errno(err));
}

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

Status PrepareUnixSocket(const std::string& path) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) return Status::Ok();  // nothing there
  if (!S_ISSOCK(st.st_mode)) {
    return Failed("cannot listen on unix:" + path +
                  ": the path exists and is not a socket (remove it or choose another path)");
  }
  const int err = ConnectUnix(path);
  if (err == 0) {
    return Failed("cannot listen on unix:" + path +
                  ": another process is listening on it (a second gnmrd?); stop it first");
  }
  if (err != ECONNREFUSED) {
    return Failed("cannot listen on unix:" + path +
                  ": cannot tell whether the socket there is "
                  "in use: " +
                  Errno(err));
  }
  // Stale: left by a daemon that died without removing it.
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
    return Failed("cannot listen on unix:" + path +
                  ": cannot remove the stale socket: " + Errno(errno));
  }
  return Status::Ok();
}

std::optional<Status> DiagnoseListenFailure(const std::string& address) {
  return IsUnix(address) ? DiagnoseUnix(address) : DiagnoseTcp(address);
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
