#include "daemon/server/peer_access.h"

namespace gnmr {

Transport TransportOf(const grpc::CallbackServerContext* ctx) {
  if (ctx->peer().rfind("unix:", 0) == 0) return Transport::kUnixSocket;
  // With client certificates required and verified (the only TLS mode
  // gnmrd runs with a client CA), the peer has an authenticated identity.
  const std::shared_ptr<const grpc::AuthContext> auth = ctx->auth_context();
  if (auth != nullptr && auth->IsPeerAuthenticated()) return Transport::kMutualTls;
  return Transport::kNetwork;
}

bool TransportTrusted(const grpc::CallbackServerContext* ctx, bool insecure_tcp) {
  return insecure_tcp || TransportOf(ctx) != Transport::kNetwork;
}

}  // namespace gnmr
