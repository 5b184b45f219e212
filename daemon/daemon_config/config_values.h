// Parsers and checks for the values of gnmrd's config, shared by the YAML
// file and the command line so both accept exactly the same spellings.
//
// Each returns OK or InvalidArgument with the problem alone ("must be an
// integer in [1, 3600000], got 'abc'"); the caller prefixes where the value
// came from ("gnmrd.yaml:7: step_deadline_ms: ...").
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "gnmr/status.h"

namespace gnmr {
namespace daemon_config {

// A decimal integer in [lo, hi].
Status ParseUint(std::string_view text, uint64_t lo, uint64_t hi, uint64_t* out);

// Bytes: an integer with an optional suffix KiB, MiB or GiB ("64MiB").
Status ParseByteSize(std::string_view text, uint64_t lo, uint64_t hi, uint64_t* out);

// A duration: an integer with a unit, ms, s, m, h or d ("7d", "500ms"), in
// milliseconds in [0, hi_ms]; "0" (no unit needed) and "off" are 0.
Status ParseDurationMs(std::string_view text, uint64_t hi_ms, uint64_t* out_ms);

// The inverses, for --help, the docs table and the startup log: the
// shortest spelling the parser reads back to the same value ("64MiB",
// "4096", "7d", "1500ms", "0660"; a zero duration is "off").
std::string FormatByteSize(uint64_t bytes);
std::string FormatDurationMs(uint64_t ms);
std::string FormatFileMode(uint32_t mode);

// true/false, yes/no, on/off (any case).
Status ParseBool(std::string_view text, bool* out);

// Octal permission bits like chmod: "0660", "660", "0o660"; <= 0777.
Status ParseFileMode(std::string_view text, uint32_t* out);

// A gRPC listen address: "unix:/absolute/path" (also "unix:///path";
// normalized to "unix:/path"), or "host:port" with host a name, an IPv4
// address or a bracketed IPv6 address and port 0..65535.
Status ParseListenAddress(std::string_view text, std::string* normalized);

// The /metrics address: "host:port" with a numeric IPv4 host, a bracketed
// IPv6 host or "localhost"; "off" or "" disables it (normalized to "").
Status ParseMetricsAddress(std::string_view text, std::string* normalized);

// True for a metrics address only this machine can reach.
bool IsLoopbackAddress(std::string_view host_port);

// trace, debug, info, warn, error, critical, off.
Status CheckLogLevel(std::string_view level);

// A job id as the wire contract allows: 1..128 bytes of [A-Za-z0-9._:-].
Status CheckJobId(std::string_view job_id);

// A token: 1..4096 bytes of printable ASCII without spaces (gRPC metadata).
Status CheckToken(std::string_view token);

}  // namespace daemon_config
}  // namespace gnmr
