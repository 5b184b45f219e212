// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), the checksum of
// the snapshot file frame (snapshot_format.h).
//
// A plain table-driven software implementation: snapshots are written by a
// background thread, so a few hundred MB/s is ample and no CPU feature
// detection is needed. Check value: Crc32c("123456789") == 0xE3069283.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace gnmr {
namespace store {

// Continues a CRC: Crc32cExtend(Crc32c(a), b) == Crc32c(a + b).
uint32_t Crc32cExtend(uint32_t crc, const void* data, size_t size);

inline uint32_t Crc32c(std::string_view bytes) {
  return Crc32cExtend(0, bytes.data(), bytes.size());
}

}  // namespace store
}  // namespace gnmr
