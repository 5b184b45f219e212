// The checkpoint calls of the gRPC transport: Admin ExportState and
// ImportState on a channel of their own (state_transfer.cc).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "gnmr/client.h"
#include "gnmr/status.h"

namespace gnmr {

StatusOr<std::string> ExportStateRpc(const ClientOptions& o, std::chrono::milliseconds timeout);
StatusOr<uint64_t> ImportStateRpc(const ClientOptions& o, const std::string& state,
                                  std::chrono::milliseconds timeout);

}  // namespace gnmr
