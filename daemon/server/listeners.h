// What gnmrd checks around its listeners, so that a listener that cannot
// work fails with a sentence naming the address and the reason (gRPC's
// BuildAndStart only returns "no server"), and so that two daemons never
// take each other's Unix socket:
//
// - CheckTlsFiles: the certificate, the key and the client CA parse as PEM
//   and the key belongs to the certificate (OpenSSL), before gRPC sees them.
// - PrepareUnixSocket (common/unix_socket.h, shared with gnmr-relay): an
//   existing file at the socket path is removed only when it is a stale
//   socket (nothing accepts on it); a live one belongs to a running daemon
//   and is an error, as is a file that is not a socket.
// - DiagnoseListenFailure: after gRPC failed, why this address cannot be
//   listened on (in use, no permission, not an address of this machine,
//   unresolvable host, socket directory not writable, path too long).
// - PrivateSocketPath / PublishSocket: gRPC unlinks a Unix socket's path
//   when its server shuts down, whatever the path holds by then (a
//   successor's socket, if ours was replaced meanwhile). So gRPC binds a
//   private name next to the configured path (".<name>.grpc") and the
//   daemon publishes the socket under the configured path as a hard link to
//   the same inode; at shutdown gRPC removes only the private name.
// - SocketIdentity / RemoveOwnSocket: at shutdown a daemon removes its
//   socket only if the path still holds the socket it created (same device
//   and inode), never a successor's.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>

#include "common/unix_socket.h"
#include "gnmr/status.h"

namespace gnmr {

struct TlsOptions {
  std::string cert_file;  // PEM; empty = plaintext TCP
  std::string key_file;
  std::string client_ca_file;  // set: mutual TLS, client certificates required
};

// OK when TLS is off (no cert_file); else FailedPrecondition naming the
// file and the problem.
Status CheckTlsFiles(const TlsOptions& tls);

// After gRPC failed to listen: why `address` ("unix:/path" or "host:port")
// cannot be listened on, as FailedPrecondition; nullopt if it looks usable.
std::optional<Status> DiagnoseListenFailure(const std::string& address);

// The private name gRPC binds for the socket `path`; "" if it would not fit
// in a socket address (gRPC then binds `path` itself).
std::string PrivateSocketPath(const std::string& path);

// Makes `path` a second name of the socket at `private_path`.
// FailedPrecondition if `path` exists (taken since PrepareUnixSocket).
Status PublishSocket(const std::string& private_path, const std::string& path);

struct SocketIdentity {
  dev_t dev = 0;
  ino_t ino = 0;
};
std::optional<SocketIdentity> IdentifySocket(const std::string& path);
// Unlinks `path` if it is still the socket `mine` identifies.
void RemoveOwnSocket(const std::string& path, const SocketIdentity& mine);

}  // namespace gnmr
