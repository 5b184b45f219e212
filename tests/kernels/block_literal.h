// The statistics of block-scaled tensors as a straightforward loop over
// docs/statistics.md, "Block-scaled formats", for the CUDA path's tests
// (shares no code with kernels/cuda): element by element in storage order,
// values decoded with std::ldexp, scales indexed with the header's formulas,
// a literal 256-lane array per item, the lane tree and stats_order.h's
// ItemTree. Slow on purpose.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "gnmr/block_tensor.h"
#include "kernels/stats_order.h"

namespace gnmr::testing::literal {

inline double E4M3(uint32_t c) {
  const double sign = c & 0x80 ? -1.0 : 1.0;
  const uint32_t e = (c >> 3) & 0xf, m = c & 7;
  if ((c & 0x7f) == 0x7f) return std::numeric_limits<double>::quiet_NaN();
  return sign * (e == 0 ? std::ldexp(m, -9) : std::ldexp(8 + m, static_cast<int>(e) - 10));
}
inline double E5M2(uint32_t c) {
  const double sign = c & 0x80 ? -1.0 : 1.0;
  const uint32_t e = (c >> 2) & 0x1f, m = c & 3;
  if (e == 31) return m == 0 ? sign * INFINITY : std::numeric_limits<double>::quiet_NaN();
  return sign * (e == 0 ? std::ldexp(m, -16) : std::ldexp(4 + m, static_cast<int>(e) - 17));
}
inline double E2M1(uint32_t c) {
  const double mags[] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
  return (c & 8 ? -1.0 : 1.0) * mags[c & 7];
}

struct Tensor {
  const BlockTensorRef& t;
  uint64_t B() const {
    return t.format == BlockFormat::kNvfp4 ? 16 : t.format == BlockFormat::kFp8Block ? 128 : 32;
  }
  uint64_t br() const { return t.layout == BlockLayout::kRowwise ? 1 : B(); }
  uint64_t bc() const { return t.layout == BlockLayout::kColumnwise ? 1 : B(); }
  uint64_t gr() const { return (t.rows + br() - 1) / br(); }
  uint64_t gc() const { return (t.cols + bc() - 1) / bc(); }
  bool e2m1() const { return t.format == BlockFormat::kMxfp4 || t.format == BlockFormat::kNvfp4; }

  uint32_t Code(uint64_t i) const {
    const auto* d = static_cast<const unsigned char*>(t.data);
    return e2m1() ? (d[i / 2] >> (4 * (i % 2))) & 0xf : d[i];
  }
  double Value(uint32_t code) const {
    if (e2m1()) return E2M1(code);
    return t.format == BlockFormat::kMxfp8E5M2 ? E5M2(code) : E4M3(code);
  }
  uint64_t ScaleIndex(uint64_t bi, uint64_t bj) const {
    if (t.scale_layout == ScaleLayout::kCompact) return bi * t.scale_cols + bj;
    const bool col = t.layout == BlockLayout::kColumnwise;
    const uint64_t r = col ? bj : bi, c = col ? bi : bj, cpad = t.scale_cols;
    return ((r / 128) * (cpad / 4) + c / 4) * 512 + (r % 32) * 16 + ((r / 32) % 4) * 4 + c % 4;
  }
  uint32_t ScaleBits(uint64_t bi, uint64_t bj) const {
    const auto* s = static_cast<const unsigned char*>(t.scales);
    const uint64_t k = ScaleIndex(bi, bj);
    if (t.format != BlockFormat::kFp8Block) return s[k];
    uint32_t b;
    std::memcpy(&b, s + 4 * k, 4);
    return b;
  }
  double Scale(uint32_t bits) const {
    if (t.format == BlockFormat::kFp8Block) {
      float f;
      std::memcpy(&f, &bits, 4);
      return f;
    }
    if (t.format == BlockFormat::kNvfp4) return E4M3(bits);
    return bits == 0xff ? std::numeric_limits<double>::quiet_NaN()
                        : std::ldexp(1.0, static_cast<int>(bits) - 127);
  }
  double Source(uint64_t i) const {
    const auto* s = static_cast<const unsigned char*>(t.source);
    if (t.source_dtype == DType::kFp32) {
      float f;
      std::memcpy(&f, s + 4 * i, 4);
      return f;
    }
    uint16_t h;
    std::memcpy(&h, s + 2 * i, 2);
    if (t.source_dtype == DType::kBf16) {
      const uint32_t b = static_cast<uint32_t>(h) << 16;
      float f;
      std::memcpy(&f, &b, 4);
      return f;
    }
    const int e = (h >> 10) & 0x1f, m = h & 0x3ff;
    const double sign = h & 0x8000 ? -1.0 : 1.0;
    if (e == 31) return m == 0 ? sign * INFINITY : std::numeric_limits<double>::quiet_NaN();
    return sign * (e == 0 ? std::ldexp(m, -24) : std::ldexp(1024 + m, e - 25));
  }
  // scale_clamps and floor(log2 s), from the definitions.
  bool Clamped(uint32_t bits) const {
    const double s = Scale(bits);
    if (t.format == BlockFormat::kFp8Block) {
      return s == 0 || std::fabs(s) < std::ldexp(1.0, -126) || !std::isfinite(s);
    }
    if (t.format == BlockFormat::kNvfp4) {
      return std::isnan(s) || std::fabs(s) <= std::ldexp(1.0, -6) || std::fabs(s) == 448;
    }
    return bits == 0x00 || bits == 0xfe || bits == 0xff;
  }
};

// The lane tree of one item (stats_order.h step 4).
inline double LaneTree(std::vector<double> lane) {
  for (uint32_t s = 128; s >= 1; s /= 2) {
    for (uint32_t j = 0; j < s; ++j) lane[j] = lane[j] + lane[j + s];
  }
  return lane[0];
}

inline BlockStats Compute(const BlockTensorRef* tensors, size_t count) {
  BlockStats out;
  uint64_t nans = 0;
  bool any_log2 = false;
  for (size_t k = 0; k < count; ++k) {
    const Tensor T{tensors[k]};
    const BlockTensorRef& t = tensors[k];
    const uint64_t n = t.rows * t.cols;
    if (n == 0) continue;  // an empty tensor adds nothing, has_source included
    const bool src = t.source != nullptr;
    const double g = t.global_scale;
    const uint32_t sat = T.e2m1() ? 7 : t.format == BlockFormat::kMxfp8E5M2 ? 0x7b : 0x7e;
    const uint32_t mask = T.e2m1() ? 7 : 0x7f;
    stats_order::ItemTree tsq, terr, tsrc;
    std::vector<double> sq(256), er(256), so(256);
    std::vector<uint8_t> flag(T.gr() * T.gc());  // 1 sat, 2 nonzero code, 4 source nonzero
    double amax = 0;
    for (uint64_t i = 0; i < n; ++i) {
      const uint64_t r = i / t.cols, c = i % t.cols, bi = r / T.br(), bj = c / T.bc();
      const uint32_t code = T.Code(i);
      const double xh = T.Value(code) * T.Scale(T.ScaleBits(bi, bj));
      const uint32_t lane = i % 4096 % 256;
      if (std::isfinite(xh)) {
        sq[lane] += xh * xh;
        amax = std::max(amax, std::fabs(xh));
      } else {
        ++out.nonfinite;
        nans += std::isnan(xh);
      }
      const uint32_t mag = code & mask;
      out.zero_codes += mag == 0;
      out.saturated += mag == sat;
      uint8_t& f = flag[bi * T.gc() + bj];
      f |= (mag == sat ? 1 : 0) | (mag != 0 ? 2 : 0);
      if (src) {
        const double x = T.Source(i), y = xh * g;
        if (std::isfinite(x) && std::isfinite(y)) {
          const double d = x - y;
          er[lane] += d * d;
          so[lane] += x * x;
          out.underflow += x != 0 && y == 0;
        }
        f |= x != 0 && !std::isnan(x) ? 4 : 0;
      }
      if (i % 4096 == 4095 || i == n - 1) {
        tsq.Push(LaneTree(sq));
        terr.Push(LaneTree(er));
        tsrc.Push(LaneTree(so));
        std::fill(sq.begin(), sq.end(), 0.0);
        std::fill(er.begin(), er.end(), 0.0);
        std::fill(so.begin(), so.end(), 0.0);
      }
    }
    out.sumsq = out.sumsq + tsq.Finish() * (std::fabs(g) * std::fabs(g));
    out.amax = std::max(out.amax, amax * std::fabs(g));
    if (src) {
      out.has_source = true;
      out.error_sumsq = out.error_sumsq + terr.Finish();
      out.source_sumsq = out.source_sumsq + tsrc.Finish();
    }
    out.numel += n;
    for (uint64_t bi = 0; bi < T.gr(); ++bi) {
      for (uint64_t bj = 0; bj < T.gc(); ++bj) {
        const uint8_t f = flag[bi * T.gc() + bj];
        const uint32_t bits = T.ScaleBits(bi, bj);
        const double s = T.Scale(bits);
        ++out.blocks;
        out.saturated_blocks += (f & 1) != 0;
        out.dead_blocks += (f & 2) == 0 && (!src || (f & 4) != 0);
        out.scale_clamps += T.Clamped(bits);
        if (std::isfinite(s) && s != 0) {
          const int32_t l = static_cast<int32_t>(std::floor(std::log2(std::fabs(s))));
          out.scale_log2_min = any_log2 ? std::min(out.scale_log2_min, l) : l;
          out.scale_log2_max = any_log2 ? std::max(out.scale_log2_max, l) : l;
          out.scale_log2_sum += l;
          ++out.scaled_blocks;
          any_log2 = true;
        }
      }
    }
  }
  if (nans > 0) {
    out.sumsq = std::numeric_limits<double>::quiet_NaN();
  } else if (out.nonfinite > 0) {
    out.sumsq = INFINITY;
  }
  return out;
}

}  // namespace gnmr::testing::literal
