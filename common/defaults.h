// Defaults shared by gnmrd, gnmrctl and the client library, so the tools
// find the daemon without flags on a standard install.
#pragma once

namespace gnmr {

// Where gnmrd listens and gnmrctl / clients connect by default. Override
// with --listen / --target or the GNMR_TARGET environment variable.
inline constexpr const char* kDefaultTarget = "unix:/run/gnmr/gnmrd.sock";
inline constexpr const char* kTargetEnv = "GNMR_TARGET";
inline constexpr const char* kAdminTokenEnv = "GNMR_ADMIN_TOKEN";
// gRPC metadata keys.
inline constexpr const char* kTokenMetadata = "x-gnmr-token";
inline constexpr const char* kAdminTokenMetadata = "x-gnmr-admin-token";

}  // namespace gnmr
