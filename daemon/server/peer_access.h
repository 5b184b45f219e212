// Who may do what, by the transport a call came over (deploy/README.md,
// "Security model"):
//
// - Unix socket: its file permissions (owner, group, unix_socket_mode) are
//   the access control; a peer that can connect is trusted like the
//   daemon's own user: first-use job registration, Admin reads, and
//   mutations when no admin token is configured.
// - TCP with mutual TLS (tls.client_ca): the verified client certificate
//   authenticates the peer; trusted as above, except that mutations over
//   TCP always need the admin token.
// - Plain TCP, or TLS without client certificates: anyone who can reach the
//   port. Unless `insecure_tcp` opts in (a trusted network), such a peer
//   needs a token for everything: a configured job token (job_tokens) or a
//   token its job was bound to to register and stream, never first-use
//   binding; the read or admin token for Admin reads; the admin token for
//   mutations.
#pragma once

#include <grpcpp/grpcpp.h>

namespace gnmr {

enum class Transport { kUnixSocket, kMutualTls, kNetwork };

Transport TransportOf(const grpc::CallbackServerContext* ctx);

// True when the transport itself vouches for the peer: the Unix socket,
// mutual TLS, or any TCP peer when `insecure_tcp` is set.
bool TransportTrusted(const grpc::CallbackServerContext* ctx, bool insecure_tcp);

}  // namespace gnmr
