// Transport: where a client's reports go and its decisions come from. The
// training-thread side (client.cc, client_plan.cc) only ever talks to the
// Outbox and the SharedState; a transport drains the one and fills the
// other on a thread of its own, so the two transports below keep every rule
// of docs/safety.md by construction and the training thread never waits on
// either one more than on the other.
//
// - gRPC (grpc_transport.cc): a Session stream to gnmrd (IoLoop), and the
//   Admin calls for checkpoints.
// - local (client/local/, library gnmr_client_local): the controller runs
//   in this process (target "local", docs/local_mode.md). gnmr_client never
//   links the controller: the local library registers its factory here.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "client/src/gpu_path.h"
#include "client/src/outbox.h"
#include "client/src/shared_state.h"
#include "gnmr/client.h"
#include "gnmr/status.h"
#include "gnmr/v1/gnmr.pb.h"

namespace gnmr {

// What Client::Start hands its transport; the pointers outlive it.
struct TransportWiring {
  v1::RegisterRequest request;  // this rank: job, units (id order), config
  Outbox* outbox = nullptr;
  SharedState* shared = nullptr;
  GpuPath* gpu = nullptr;  // null without device units
};

class Transport {
 public:
  virtual ~Transport() = default;

  // AddUnit asks first: whether this transport can serve such a unit.
  virtual Status CheckUnit(const std::string& name, uint32_t shard_index,
                           uint32_t shard_count) const = 0;
  // Starts the background thread (once).
  virtual Status Start(TransportWiring wiring) = 0;
  // Stops it promptly; PlanFor then fails open. Idempotent.
  virtual void Stop() = 0;
  // Client::ExportState / ImportState (docs/checkpoint.md).
  virtual StatusOr<std::string> ExportState(std::chrono::milliseconds timeout) = 0;
  virtual StatusOr<uint64_t> ImportState(const std::string& state,
                                         std::chrono::milliseconds timeout) = 0;
};

// The transport to gnmrd at options.target.
std::unique_ptr<Transport> NewGrpcTransport(const ClientOptions& options);

// The in-process target.
inline constexpr char kLocalTarget[] = "local";
inline bool IsLocalTarget(const std::string& target) { return target == kLocalTarget; }

// Set by gnmr_client_local (EnableLocalTarget, <gnmr/client_local.h>); null
// until then. Thread-safe. With GNMR_SHARED the registry lives in
// libgnmr_client.so and libgnmr_client_local.so plugs in from outside: this
// and the few internals a transport calls (Outbox, SharedState, GpuPath,
// DecisionValidator, DecisionCache, ProblemLog) are exported; nothing else
// of client/src/ is.
using LocalTransportFactory = StatusOr<std::unique_ptr<Transport>> (*)(const ClientOptions&);
GNMR_EXPORT void SetLocalTransportFactory(LocalTransportFactory factory);
LocalTransportFactory GetLocalTransportFactory();

}  // namespace gnmr
