// The one rule for unit names from a peer (docs/architecture.md, "The wire
// contract"): 1..256 bytes of printable ASCII without space (0x21..0x7e).
// Register checks every name with it, and so does every imported controller
// state (a snapshot at start-up, `gnmrctl import`, a checkpoint's
// load_state_dict): no path lets a newline, an escape byte or a megabyte-long
// name into the daemon.
#pragma once

#include <cstddef>
#include <string_view>

#include "gnmr/status.h"

namespace gnmr {

constexpr size_t kMaxUnitNameBytes = 256;

// InvalidArgument naming the problem; the name is escaped in the message.
Status CheckUnitName(std::string_view name, size_t max_bytes = kMaxUnitNameBytes);

}  // namespace gnmr
