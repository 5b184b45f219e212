// The on-disk frame of a controller snapshot (snapshot.pb).
//
// The file is self-checking, so a torn, truncated or bit-flipped file is
// detected (DataLoss) instead of being parsed into a plausible but wrong
// controller. Layout, integers little-endian:
//
//   offset  size        field
//   0       8           magic "GNMRSNP1"
//   8       4           header_len: bytes of the header that follows (>= 20)
//   12      header_len  header: u32 job_id_len, u32 state_len, u32 meta_len,
//                       i64 saved_unix_ms; a later version may append
//                       fields, which older readers skip
//   ...     job_id_len  the job id (the authority for hashed directory names)
//   ...     state_len   serialized gnmr.v1.ControllerState
//   ...     meta_len    the caller's job metadata, opaque bytes
//   end-4   4           CRC-32C of every byte before it
//
// The lengths must account for the file exactly; anything else is DataLoss.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "gnmr/status.h"

namespace gnmr {
namespace store {

inline constexpr char kSnapshotMagic[8] = {'G', 'N', 'M', 'R', 'S', 'N', 'P', '1'};

struct SnapshotFrame {
  std::string job_id;
  std::string state;  // serialized gnmr.v1.ControllerState
  std::string meta;   // opaque job metadata
  int64_t saved_unix_ms = 0;
};

// InvalidArgument if a part is 4 GiB or larger.
StatusOr<std::string> EncodeSnapshotFrame(const SnapshotFrame& frame);

// The same frame, with the state written by `append_state`, which must
// append exactly `state_len` bytes (else Internal): a large state is
// serialized straight into the frame instead of being copied into it.
StatusOr<std::string> EncodeSnapshotFrame(const std::string& job_id, size_t state_len,
                                          const std::function<bool(std::string*)>& append_state,
                                          const std::string& meta, int64_t saved_unix_ms);

// DataLoss (prefixed by `what`, usually the path) unless `bytes` is a
// complete frame with a matching checksum.
StatusOr<SnapshotFrame> DecodeSnapshotFrame(std::string_view bytes, const std::string& what);

}  // namespace store
}  // namespace gnmr
