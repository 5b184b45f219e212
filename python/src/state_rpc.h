// Admin ExportState / ImportState for the Python module's checkpoint hooks
// (gnmr.Client.export_state / import_state). Plain gRPC unary calls with a
// deadline, on a fresh channel: the client library's background thread is
// not involved, so a checkpoint never disturbs the report stream.
#pragma once

#include <chrono>
#include <string>

#include "common/status.h"

namespace gnmr::python {

// The job's controller state (gnmr.v1.ControllerState, serialized).
StatusOr<std::string> ExportState(const std::string& target, const std::string& job_id,
                                  std::chrono::milliseconds timeout);

// Replaces the job's controller state. Needs admin rights: allowed over a
// Unix socket when the daemon has no admin token, else `admin_token`.
StatusOr<uint64_t> ImportState(const std::string& target, const std::string& job_id,
                   const std::string& state, const std::string& admin_token,
                   std::chrono::milliseconds timeout);

}  // namespace gnmr::python
