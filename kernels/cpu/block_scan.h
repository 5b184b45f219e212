// The code scans of the block-scaled statistics (block_kernels.cc): what
// one pass over a block's codes collects, and Q, the sum of their squares
// (docs/statistics.md, "Canonical order"). Included by block_kernels.cc
// alone, inside its per-ISA namespace: internal linkage throughout, like
// block_format.h.
#pragma once

#include <cstdint>

#include "kernels/cpu/block_format.h"

#ifndef GNMR_CPU_ISA
#error "block_scan.h is part of block_kernels.cc"
#endif

namespace gnmr::cpu::GNMR_CPU_ISA {
namespace {  // NOLINT(build/namespaces): see above

using block::Codes;

// Q's unit: e4m3 squares are integers of 2^-18, E2M1 squares of 2^-2;
// e5m2 squares are summed as doubles (from a table).
template <Codes C>
constexpr double kUnit = C == Codes::kE4M3   ? 0x1p-18
                         : C == Codes::kE2M1 ? 0x1p-2
                                             : 1.0;

template <Codes C>
struct SquareTables {
  double squares[128] = {};
};

template <Codes C>
constexpr SquareTables<C> MakeSquareTables() {
  SquareTables<C> t{};
  for (uint32_t a = 0; a <= block::kMaxCode<C>; ++a) {
    const double v = C == Codes::kE5M2 ? block::E5M2Value(a) : 0.0;
    t.squares[a] = v * v;
  }
  return t;
}

// What one scan of a block's codes collects.
struct BlockScan {
  uint64_t units = 0;    // Q in units (e4m3, E2M1)
  double squares = 0.0;  // Q in storage order (e5m2)
  uint64_t zeros = 0, saturated = 0, nan_codes = 0, inf_codes = 0;
  uint32_t max_finite = 0;  // largest finite magnitude
  uint32_t any_code = 0;    // OR of the magnitudes
  bool any_source = false;  // a source element != 0 and not NaN
};

// The square of an E2M1 magnitude in Q's unit (2^-2): twice its value is
// 0, 1, 2, 3, 4, 6, 8, 12 (a byte table in a constant).
constexpr uint32_t E2M1SquareUnits(uint32_t mag) {
  const uint32_t root = (0x0c08060403020100ull >> (8 * (mag & 7u))) & 0xffu;
  return root * root;
}

// Folds one span's figures into the block's.
inline void Fold(BlockScan* s, uint64_t units, uint32_t zeros, uint32_t saturated,
                 uint32_t nan_codes, uint32_t inf_codes, uint32_t max_finite, uint32_t any_code) {
  s->units += units;
  s->zeros += zeros;
  s->saturated += saturated;
  s->nan_codes += nan_codes;
  s->inf_codes += inf_codes;
  s->max_finite = max_finite > s->max_finite ? max_finite : s->max_finite;
  s->any_code |= any_code;
}

// E2M1: the squares of both codes of a byte, in units.
struct PairTable {
  uint32_t units[256] = {};
};
constexpr PairTable MakePairTable() {
  PairTable t{};
  for (uint32_t b = 0; b < 256; ++b) {
    t.units[b] = E2M1SquareUnits(b & 7u) + E2M1SquareUnits((b >> 4) & 7u);
  }
  return t;
}

// Codes [i0, i1) of one row of a block. Written as plain byte loops with no
// conditional inside (the largest finite magnitude is recomputed apart in
// the rare span that holds a NaN/Inf code), so that they vectorize.
template <Codes C>
inline void ScanSpan(const unsigned char* data, uint64_t i0, uint64_t i1, BlockScan* s) {
  uint64_t units = 0;
  uint32_t zeros = 0, saturated = 0, nan_codes = 0, inf_codes = 0;
  uint8_t max_mag = 0, any_code = 0;
  if constexpr (C == Codes::kE2M1) {
    static constexpr PairTable kPairUnits = MakePairTable();
    if (i0 % 2 == 0 && i1 % 2 == 0) {  // whole bytes: two codes each
      for (uint64_t j = i0 / 2; j < i1 / 2; ++j) {
        const uint8_t lo = data[j] & 7u, hi = (data[j] >> 4) & 7u;
        zeros += (lo == 0) + (hi == 0);
        saturated += (lo == 7) + (hi == 7);
        any_code |= lo | hi;
        const uint8_t m = lo > hi ? lo : hi;
        max_mag = m > max_mag ? m : max_mag;
        units += kPairUnits.units[data[j]];
      }
    } else {
      for (uint64_t i = i0; i < i1; ++i) {
        const uint8_t mag = block::CodeAt<C>(data, i) & 7u;
        zeros += mag == 0;
        saturated += mag == 7;
        any_code |= mag;
        max_mag = mag > max_mag ? mag : max_mag;
        units += E2M1SquareUnits(mag);
      }
    }
    return Fold(s, units, zeros, saturated, 0, 0, max_mag, any_code);
  } else {
    // e4m3 squares: base^2 << t units (base <= 15, t = 2 (E - 1) <= 28), in
    // two 32-bit halves (t < 16, t >= 16) that cannot overflow for spans of
    // <= 128 codes: narrow lanes, so GCC vectorizes the loop as one.
    uint32_t lo = 0, hi = 0;
    for (uint64_t i = i0; i < i1; ++i) {
      const uint8_t mag = data[i] & 0x7fu;
      zeros += mag == 0;
      saturated += mag == block::kMaxCode<C>;
      any_code |= mag;
      max_mag = mag > max_mag ? mag : max_mag;
      if constexpr (C == Codes::kE4M3) {
        nan_codes += mag == 0x7fu;
        const uint32_t field = mag >> 3;
        const uint32_t base = field != 0 ? 8u + (mag & 7u) : (mag & 7u);
        const uint32_t t = field != 0 ? 2 * (field - 1) : 0;
        const uint32_t sq = mag == 0x7fu ? 0 : base * base;  // 0x7f: NaN, counted apart
        lo += t < 16 ? sq << t : 0;
        hi += t >= 16 ? sq << (t - 16) : 0;
      } else {
        nan_codes += mag > 0x7cu;
        inf_codes += mag == 0x7cu;
      }
    }
    uint32_t max_finite = max_mag;
    if (max_mag > block::kMaxCode<C>) {  // a NaN/Inf code: the largest finite one apart
      max_finite = 0;
      for (uint64_t i = i0; i < i1; ++i) {
        const uint32_t mag = data[i] & 0x7fu;
        if (mag <= block::kMaxCode<C> && mag > max_finite) max_finite = mag;
      }
    }
    if constexpr (C == Codes::kE4M3) {
      units = lo + (static_cast<uint64_t>(hi) << 16);
    } else {
      static constexpr SquareTables<C> kTables = MakeSquareTables<C>();
      double squares = s->squares;  // storage order: these sums round
      for (uint64_t i = i0; i < i1; ++i) {
        const uint32_t mag = data[i] & 0x7fu;
        squares = squares + (mag <= block::kMaxCode<C> ? kTables.squares[mag] : 0.0);
      }
      s->squares = squares;
    }
    return Fold(s, units, zeros, saturated, nan_codes, inf_codes, max_finite, any_code);
  }
}

// One whole block of B codes at p, for the rowwise path: ScanSpan with
// constant bounds, so that its loops have a constant trip count once
// inlined and GCC vectorizes them fully.
template <Codes C, uint32_t B>
inline void ScanWholeBlock(const unsigned char* p, BlockScan* s) {
  ScanSpan<C>(p, 0, B, s);
}

}  // namespace
}  // namespace gnmr::cpu::GNMR_CPU_ISA
