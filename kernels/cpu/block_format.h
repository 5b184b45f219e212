// The arithmetic of block-scaled formats for the CPU path
// (docs/statistics.md, "Block-scaled formats"): code and scale decoding,
// the block geometry and the scale index. Integer operations and exact
// conversions only, so a caller's FTZ/DAZ mode cannot change a value.
//
// Internal linkage throughout: block_kernels.cc is compiled once per ISA
// (item_kernels.h), and an inline function shared by those builds could
// have its AVX-512 copy picked by the linker for the baseline path.
#pragma once

#include <array>
#include <cstdint>
#include <cstring>
#include <limits>

#include "gnmr/block_tensor.h"

namespace gnmr::cpu::block {
namespace {  // NOLINT(build/namespaces): see above

enum class Codes { kE4M3, kE5M2, kE2M1 };
enum class Scales { kE8M0, kE4M3, kFp32 };

constexpr Codes CodesOf(BlockFormat f) {
  return f == BlockFormat::kMxfp8E5M2                             ? Codes::kE5M2
         : (f == BlockFormat::kMxfp4 || f == BlockFormat::kNvfp4) ? Codes::kE2M1
                                                                  : Codes::kE4M3;
}
constexpr Scales ScalesOf(BlockFormat f) {
  return f == BlockFormat::kNvfp4      ? Scales::kE4M3
         : f == BlockFormat::kFp8Block ? Scales::kFp32
                                       : Scales::kE8M0;
}

// 2^e for |e| < 1000, exactly (constexpr: no std::ldexp).
constexpr double Pow2(int e) {
  double v = 1.0;
  for (; e > 0; --e) v *= 2.0;
  for (; e < 0; ++e) v *= 0.5;
  return v;
}

// sign * (implicit + m) * 2^(e - bias - mbits) of a small binary format
// with `ebits` exponent and `mbits` mantissa bits; NaN/Inf handled by the
// callers.
constexpr double SmallFloat(uint32_t b, int ebits, int mbits, int bias) {
  const uint32_t m = b & ((1u << mbits) - 1u);
  const int e = static_cast<int>((b >> mbits) & ((1u << ebits) - 1u));
  const bool neg = ((b >> (ebits + mbits)) & 1u) != 0;
  const double mag = e == 0 ? static_cast<double>(m) * Pow2(1 - bias - mbits)
                            : static_cast<double>((1u << mbits) + m) * Pow2(e - bias - mbits);
  return neg ? -mag : mag;
}

constexpr double kNan = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

constexpr double E4M3Value(uint32_t b) {  // e4m3fn: S.1111.111 is NaN, no Inf
  return (b & 0x7fu) == 0x7fu ? kNan : SmallFloat(b, 4, 3, 7);
}
constexpr double E5M2Value(uint32_t b) {
  if ((b & 0x7cu) == 0x7cu) {
    return (b & 3u) != 0 ? kNan : ((b & 0x80u) != 0 ? -kInf : kInf);
  }
  return SmallFloat(b, 5, 2, 15);
}
constexpr double E2M1Value(uint32_t n) { return SmallFloat(n & 0xfu, 2, 1, 1); }

template <Codes C>
constexpr std::array<double, 256> MakeCodeTable() {
  std::array<double, 256> t{};
  for (uint32_t b = 0; b < 256; ++b) {
    t[b] = C == Codes::kE4M3 ? E4M3Value(b) : C == Codes::kE5M2 ? E5M2Value(b) : E2M1Value(b);
  }
  return t;
}

// Magnitude mask and the largest finite magnitude code of each element
// format (docs/statistics.md, `saturated`).
template <Codes C>
constexpr uint32_t kMagMask = C == Codes::kE2M1 ? 0x7u : 0x7fu;
template <Codes C>
constexpr uint32_t kMaxCode = C == Codes::kE4M3   ? 0x7eu
                              : C == Codes::kE5M2 ? 0x7bu
                                                  : 0x7u;

// Code i of a tensor's data: a byte, or a nibble (element 2k low).
template <Codes C>
inline uint32_t CodeAt(const unsigned char* data, uint64_t i) {
  if constexpr (C == Codes::kE2M1) {
    return (data[i >> 1] >> ((i & 1u) * 4u)) & 0xfu;
  } else {
    return data[i];
  }
}

// fp32 -> double without arithmetic on a subnormal (DAZ-proof).
inline double Fp32Exact(uint32_t b) {
  if ((b & 0x7f800000u) != 0) {
    float f;
    std::memcpy(&f, &b, sizeof f);
    return static_cast<double>(f);
  }
  const double m = static_cast<double>(static_cast<int32_t>(b & 0x7fffffu)) * 0x1p-149;
  return (b >> 31) != 0 ? -m : m;
}

// The raw bits of scale entry `idx` (a byte, or an fp32 pattern).
template <Scales S>
inline uint32_t ScaleBits(const void* scales, uint64_t idx) {
  if constexpr (S == Scales::kFp32) {
    uint32_t b;
    std::memcpy(&b, static_cast<const unsigned char*>(scales) + idx * 4, sizeof b);
    return b;
  } else {
    return static_cast<const unsigned char*>(scales)[idx];
  }
}

template <Scales S>
inline double ScaleValue(uint32_t bits) {
  if constexpr (S == Scales::kE8M0) {
    if (bits == 0xffu) return kNan;
    const uint64_t d = static_cast<uint64_t>(bits - 127 + 1023) << 52;
    double v;
    std::memcpy(&v, &d, sizeof v);
    return v;
  } else if constexpr (S == Scales::kE4M3) {
    static constexpr std::array<double, 256> kTable = MakeCodeTable<Codes::kE4M3>();
    return kTable[bits & 0xffu];
  } else {
    return Fp32Exact(bits);
  }
}

// Whether a block's scale is at an end of its range or NaN, and its binary
// exponent floor(log2 |s|) when finite and non-zero (`has_log2`).
struct ScaleClass {
  bool clamp = false;
  bool has_log2 = false;
  int32_t log2 = 0;
};

inline int TopBit(uint32_t v) { return 31 - __builtin_clz(v); }

template <Scales S>
inline ScaleClass ClassifyScale(uint32_t bits) {
  ScaleClass k;
  if constexpr (S == Scales::kE8M0) {
    k.clamp = bits == 0x00u || bits == 0xfeu || bits == 0xffu;
    k.has_log2 = bits != 0xffu;
    k.log2 = static_cast<int32_t>(bits) - 127;
  } else if constexpr (S == Scales::kE4M3) {
    const uint32_t mag = bits & 0x7fu;
    k.clamp = mag <= 0x08u || mag >= 0x7eu;
    k.has_log2 = mag != 0 && mag != 0x7fu;
    k.log2 = mag >= 0x08u ? static_cast<int32_t>(mag >> 3) - 7 : TopBit(mag | 1u) - 9;
  } else {
    const uint32_t mag = bits & 0x7fffffffu;
    const uint32_t field = mag >> 23;
    k.clamp = field == 0 || field == 0xffu;
    k.has_log2 = mag != 0 && field != 0xffu;
    k.log2 = field != 0 ? static_cast<int32_t>(field) - 127 : TopBit(mag | 1u) - 149;
  }
  return k;
}

// The block grid of a tensor and the position of each block's scale.
struct Geometry {
  uint64_t rows = 0, cols = 0;
  uint32_t block_rows = 1, block_cols = 1;
  uint64_t grid_rows = 0, grid_cols = 0;
  ScaleLayout scale_layout = ScaleLayout::kCompact;
  bool columnwise = false;
  uint64_t scale_cols = 0;  // compact: the row stride; swizzled: Cpad

  // Scale entry of block (bi, bj) of the grid.
  uint64_t ScaleIndex(uint64_t bi, uint64_t bj) const {
    if (scale_layout == ScaleLayout::kCompact) return bi * scale_cols + bj;
    if (scale_layout == ScaleLayout::kCompactTransposed) return bj * scale_cols + bi;
    const uint64_t r = columnwise ? bj : bi;  // K-major: [rows or cols, blocks along K]
    const uint64_t c = columnwise ? bi : bj;
    return ((r >> 7) * (scale_cols >> 2) + (c >> 2)) * 512 + (r & 31u) * 16 + ((r >> 5) & 3u) * 4 +
           (c & 3u);
  }
};

// The geometry of a tensor whose format and layout are valid.
inline Geometry GeometryOf(const BlockTensorRef& t) {
  Geometry g;
  const uint32_t b = BlockFormatBlockSize(t.format);
  g.rows = t.rows;
  g.cols = t.cols;
  g.block_rows = t.layout == BlockLayout::kRowwise ? 1 : b;
  g.block_cols = t.layout == BlockLayout::kColumnwise ? 1 : b;
  g.grid_rows = (t.rows + g.block_rows - 1) / g.block_rows;
  g.grid_cols = (t.cols + g.block_cols - 1) / g.block_cols;
  g.scale_layout = t.scale_layout;
  g.columnwise = t.layout == BlockLayout::kColumnwise;
  g.scale_cols = t.scale_cols;
  return g;
}

}  // namespace
}  // namespace gnmr::cpu::block
