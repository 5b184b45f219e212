#include "daemon/server/relay_service.h"

#include <cstdlib>

#include "daemon/server/node_session.h"
#include "daemon/server/peer_access.h"
#include "daemon/server/raw_unary.h"

namespace gnmr {

RelayService::RelayService(JobRegistry* registry, ServerStats* stats, LiveSessions* live,
                           bool insecure_tcp, DecisionQueue::Limits queue_limits)
    : registry_(registry),
      stats_(stats),
      live_(live),
      insecure_tcp_(insecure_tcp),
      queue_limits_(queue_limits) {
  const google::protobuf::ServiceDescriptor* service =
      v1::NodeClientMessage::descriptor()->file()->FindServiceByName("GnmrRelay");
  const int index = MethodIndex(service, "NodeSession");
  if (index < 0) std::abort();  // the .proto lost the method: a build error
  // Raw bytes, as the Session stream (session_reactor.h): the reactor
  // parses what it reads, and names what does not parse.
  MarkMethodRawCallback(
      index, new grpc::internal::CallbackBidiHandler<grpc::ByteBuffer, grpc::ByteBuffer>(
                 [this](grpc::CallbackServerContext* ctx) {
                   return new NodeSessionReactor(ctx, registry_, stats_, live_, queue_limits_,
                                                 TransportTrusted(ctx, insecure_tcp_), rounds_);
                 }));
}

}  // namespace gnmr
