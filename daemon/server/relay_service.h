// RelayService: the GnmrRelay service of gnmrd (proto/gnmr/v1/relay.proto):
// gnmr-relay's NodeSession streams, each carrying the Sessions of one
// node's ranks (node_session.h, docs/relay.md). Lanes are authenticated
// like a rank's own Session: the job token of each lane, required over TCP
// without mutual TLS.
#pragma once

#include <grpcpp/grpcpp.h>

#include "daemon/server/decision_queue.h"
#include "daemon/server/job_registry.h"
#include "daemon/server/live_sessions.h"
#include "daemon/server/round_cache.h"
#include "daemon/server/server_stats.h"
#include "gnmr/v1/relay.grpc.pb.h"

namespace gnmr {

class RelayService final : public v1::GnmrRelay::CallbackService {
 public:
  RelayService(JobRegistry* registry, ServerStats* stats, LiveSessions* live, bool insecure_tcp,
               DecisionQueue::Limits queue_limits);

 private:
  JobRegistry* const registry_;
  ServerStats* const stats_;
  LiveSessions* const live_;
  const bool insecure_tcp_;
  const DecisionQueue::Limits queue_limits_;
  // Shared by the node streams (round_cache.h).
  const std::shared_ptr<RoundCache> rounds_ = std::make_shared<RoundCache>();
};

}  // namespace gnmr
