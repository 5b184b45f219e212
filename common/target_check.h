// Why a gRPC target cannot work, said in the user's terms before gRPC says
// it in its own ("no daemon answered", a c-ares DNS error for a file path).
//
// Checks only what is local and cheap: a Unix socket path that does not
// exist (ENOENT) or is not a socket, and a target without "unix:" that names
// an existing filesystem path (gRPC would resolve it as a DNS name).
#pragma once

#include <string>

namespace gnmr {

// "" when nothing is wrong that can be seen locally, else one sentence,
// e.g. "unix:/run/x.sock: no such file (ENOENT); is gnmrd running and
// listening there?" or "'/run/x.sock' is a path: did you mean
// unix:/run/x.sock?".
std::string TargetProblem(const std::string& target);

}  // namespace gnmr
