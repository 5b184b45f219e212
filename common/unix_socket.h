// A Unix socket path before and after a server tries to listen on it,
// shared by gnmrd (daemon/server/listeners.h) and gnmr-relay: two servers
// never take each other's socket, and a socket that cannot be made fails
// with a sentence naming the path and the reason (gRPC's BuildAndStart only
// says "no server").
#pragma once

#include <optional>
#include <string>

#include "gnmr/status.h"

namespace gnmr {

// Before listening on `path` (without "unix:"): an existing file there is
// removed only when it is a stale socket (nothing accepts on it). A live
// socket belongs to a running server and is FailedPrecondition ("another
// process is listening on it"), as is a file that is not a socket.
Status PrepareUnixSocket(const std::string& path);

// After the server failed to listen on `address` ("unix:/path"): why, as
// FailedPrecondition (path too long, no directory, not writable, ...);
// nullopt if a socket can be made there.
std::optional<Status> DiagnoseUnixListen(const std::string& address);

}  // namespace gnmr
