#include "kernels/cpu/block_reference.h"

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <vector>

#include "kernels/cpu/reference_stats.h"

namespace gnmr::cpu {
namespace {

constexpr double kNan = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr uint64_t kItem = 4096;
constexpr int kLaneCount = 256;

// A normal or subnormal minifloat with `mbits` mantissa bits and `bias`;
// the caller has handled the special patterns.
double Minifloat(uint8_t code, int ebits, int mbits, int bias) {
  const double sign = ((code >> (ebits + mbits)) & 1) ? -1.0 : 1.0;
  const int e = (code >> mbits) & ((1 << ebits) - 1);
  const int m = code & ((1 << mbits) - 1);
  if (e == 0) return sign * std::ldexp(static_cast<double>(m), 1 - bias - mbits);
  return sign * std::ldexp(static_cast<double>((1 << mbits) + m), e - bias - mbits);
}

bool IsE2M1(BlockFormat f) { return f == BlockFormat::kMxfp4 || f == BlockFormat::kNvfp4; }

bool IsMx(BlockFormat f) {
  return f == BlockFormat::kMxfp8E4M3 || f == BlockFormat::kMxfp8E5M2 || f == BlockFormat::kMxfp4;
}

uint64_t BlockSize(BlockFormat f) {
  if (IsMx(f)) return 32;
  return f == BlockFormat::kNvfp4 ? 16 : 128;
}

double CodeValue(BlockFormat f, uint8_t code) {
  if (IsE2M1(f)) return E2M1Value(code);
  return f == BlockFormat::kMxfp8E5M2 ? E5M2Value(code) : E4M3Value(code);
}

// Codes at the format's largest magnitude, either sign.
bool IsSaturatedCode(BlockFormat f, uint8_t code) {
  if (IsE2M1(f)) return (code & 0x7) == 0x7;
  if (f == BlockFormat::kMxfp8E5M2) return (code & 0x7f) == 0x7b;
  return (code & 0x7f) == 0x7e;
}

bool IsZeroCode(BlockFormat f, uint8_t code) { return (code & (IsE2M1(f) ? 0x7 : 0x7f)) == 0; }

// The raw stored scale, for the range-end checks that look at the code.
bool IsClampedScale(const BlockTensorRef& t, uint64_t index) {
  const unsigned char* s = static_cast<const unsigned char*>(t.scales);
  if (IsMx(t.format)) return s[index] == 0x00 || s[index] == 0xfe || s[index] == 0xff;
  if (t.format == BlockFormat::kNvfp4) {
    const double v = std::fabs(E4M3Value(s[index]));
    return std::isnan(v) || v <= std::ldexp(1.0, -6) || v == 448.0;
  }
  float f;
  std::memcpy(&f, s + 4 * index, 4);
  const int cls = std::fpclassify(f);
  return cls == FP_ZERO || cls == FP_SUBNORMAL || cls == FP_INFINITE || cls == FP_NAN;
}

// T(lo, c) of stats_order.h step 5, recursively.
double ItemTree(const std::vector<double>& p, size_t lo, size_t c) {
  if (c == 1) return p[lo];
  size_t h = 1;
  while (h * 2 < c) h *= 2;
  return ItemTree(p, lo, h) + ItemTree(p, lo + h, c - h);
}

// Steps 2-5 of stats_order.h over term(i), i in [0, n) in storage order:
// the order of the source sums.
double CanonicalSum(uint64_t n, const std::function<double(uint64_t)>& term) {
  std::vector<double> partials;
  for (uint64_t k = 0; k * kItem < n; ++k) {
    double lanes[kLaneCount];
    for (int j = 0; j < kLaneCount; ++j) {
      lanes[j] = 0.0;
      for (int step = 0; step < 16; ++step) {
        const uint64_t i = k * kItem + static_cast<uint64_t>(step) * kLaneCount + j;
        lanes[j] = lanes[j] + (i < n ? term(i) : 0.0);
      }
    }
    for (int s = 128; s >= 1; s /= 2) {
      for (int j = 0; j < s; ++j) lanes[j] = lanes[j] + lanes[j + s];
    }
    partials.push_back(lanes[0]);
  }
  return partials.empty() ? 0.0 : ItemTree(partials, 0, partials.size());
}

// The tensor's sumsq before NVFP4's global scale (docs, canonical order
// steps 2-4): per block in grid order, Q = the squares of its finite codes
// added in storage order, P = Q * (s * s) (+0.0 for a scale that is not
// finite), and the item tree over the partials.
double BlockOrderSum(const BlockTensorRef& t) {
  const uint64_t br = BlockRowsOf(t), bc = BlockColsOf(t);
  const uint64_t grid_rows = (t.rows + br - 1) / br, grid_cols = (t.cols + bc - 1) / bc;
  std::vector<double> partials;
  for (uint64_t bi = 0; bi < grid_rows; ++bi) {
    for (uint64_t bj = 0; bj < grid_cols; ++bj) {
      double q = 0.0;
      for (uint64_t r = bi * br; r < (bi + 1) * br && r < t.rows; ++r) {
        for (uint64_t c = bj * bc; c < (bj + 1) * bc && c < t.cols; ++c) {
          const double v = CodeValue(t.format, BlockElementCode(t, r, c));
          if (std::isfinite(v)) q = q + v * v;
        }
      }
      const double s = std::fabs(BlockScaleValue(t, bi, bj));
      partials.push_back(std::isfinite(s) ? q * (s * s) : 0.0);
    }
  }
  return partials.empty() ? 0.0 : ItemTree(partials, 0, partials.size());
}

// One tensor's contribution; the unit combines them in tensor order.
struct TensorSums {
  double sumsq = 0.0;
  double error_sumsq = 0.0;
  double source_sumsq = 0.0;
  double amax = 0.0;
  bool any_nan = false;
  bool any_inf = false;
};

TensorSums ElementStats(const BlockTensorRef& t, BlockStats* u) {
  TensorSums s;
  const uint64_t n = t.rows * t.cols;
  const double g = t.format == BlockFormat::kNvfp4 ? static_cast<double>(t.global_scale) : 1.0;
  auto value = [&](uint64_t i) { return BlockElementValue(t, i / t.cols, i % t.cols); };
  for (uint64_t i = 0; i < n; ++i) {
    const uint64_t r = i / t.cols, c = i % t.cols;
    const uint8_t code = BlockElementCode(t, r, c);
    const double x_hat = value(i);
    if (std::isnan(x_hat)) s.any_nan = true;
    if (std::isinf(x_hat)) s.any_inf = true;
    if (!std::isfinite(x_hat)) ++u->nonfinite;
    if (std::isfinite(x_hat)) s.amax = std::fmax(s.amax, std::fabs(x_hat));
    if (IsZeroCode(t.format, code)) ++u->zero_codes;
    if (IsSaturatedCode(t.format, code)) ++u->saturated;
    const double x = BlockSourceValue(t, r, c);
    if (t.source != nullptr && std::isfinite(x) && x != 0.0 && x_hat * g == 0.0) ++u->underflow;
  }
  s.sumsq = BlockOrderSum(t);
  if (t.format == BlockFormat::kNvfp4) {  // docs step 5
    s.sumsq = s.sumsq * (g * g);
    s.amax = s.amax * std::fabs(g);
  }
  if (t.source == nullptr) return s;
  // Step 6: both sums follow the element order and skip the elements where
  // x or y is not finite.
  auto pair = [&](uint64_t i, double* x, double* y) {
    *x = BlockSourceValue(t, i / t.cols, i % t.cols);
    *y = value(i) * g;
    return std::isfinite(*x) && std::isfinite(*y);
  };
  s.error_sumsq = CanonicalSum(n, [&](uint64_t i) {
    double x, y;
    if (!pair(i, &x, &y)) return 0.0;
    const double d = x - y;
    return d * d;
  });
  s.source_sumsq = CanonicalSum(n, [&](uint64_t i) {
    double x, y;
    return pair(i, &x, &y) ? x * x : 0.0;
  });
  return s;
}

void BlockCounts(const BlockTensorRef& t, BlockStats* u) {
  const uint64_t br = BlockRowsOf(t), bc = BlockColsOf(t);
  const uint64_t grid_rows = (t.rows + br - 1) / br, grid_cols = (t.cols + bc - 1) / bc;
  for (uint64_t bi = 0; bi < grid_rows; ++bi) {
    for (uint64_t bj = 0; bj < grid_cols; ++bj) {
      ++u->blocks;
      bool saturated = false, all_zero = true, source_nonzero = false;
      for (uint64_t r = bi * br; r < (bi + 1) * br && r < t.rows; ++r) {
        for (uint64_t c = bj * bc; c < (bj + 1) * bc && c < t.cols; ++c) {
          const uint8_t code = BlockElementCode(t, r, c);
          saturated = saturated || IsSaturatedCode(t.format, code);
          all_zero = all_zero && IsZeroCode(t.format, code);
          const double x = BlockSourceValue(t, r, c);
          // A NaN source element is no evidence of a value that was lost.
          source_nonzero = source_nonzero || (x != 0.0 && !std::isnan(x));
        }
      }
      if (saturated) ++u->saturated_blocks;
      if (all_zero && (t.source == nullptr || source_nonzero)) ++u->dead_blocks;
      if (IsClampedScale(t, BlockScaleIndex(t, bi, bj))) ++u->scale_clamps;
      const double s = BlockScaleValue(t, bi, bj);
      if (std::isfinite(s) && s != 0.0) {
        int e;
        std::frexp(std::fabs(s), &e);  // |s| = f * 2^e, f in [0.5, 1)
        const int32_t log2 = e - 1;
        if (u->scaled_blocks == 0 || log2 < u->scale_log2_min) u->scale_log2_min = log2;
        if (u->scaled_blocks == 0 || log2 > u->scale_log2_max) u->scale_log2_max = log2;
        u->scale_log2_sum += log2;
        ++u->scaled_blocks;
      }
    }
  }
}

}  // namespace

double E4M3Value(uint8_t code) {
  if ((code & 0x7f) == 0x7f) return kNan;
  return Minifloat(code, 4, 3, 7);
}

double E5M2Value(uint8_t code) {
  if ((code & 0x7c) == 0x7c) return (code & 0x3) != 0 ? kNan : ((code & 0x80) ? -kInf : kInf);
  return Minifloat(code, 5, 2, 15);
}

double E2M1Value(uint8_t code) { return Minifloat(code & 0xf, 2, 1, 1); }

double E8M0Value(uint8_t code) { return code == 0xff ? kNan : std::ldexp(1.0, code - 127); }

uint64_t BlockRowsOf(const BlockTensorRef& t) {
  return t.layout == BlockLayout::kRowwise ? 1 : BlockSize(t.format);
}

uint64_t BlockColsOf(const BlockTensorRef& t) {
  return t.layout == BlockLayout::kColumnwise ? 1 : BlockSize(t.format);
}

uint64_t SwizzledScaleIndex(uint64_t r, uint64_t c, uint64_t cpad) {
  return ((r / 128) * (cpad / 4) + c / 4) * 512 + (r % 32) * 16 + ((r / 32) % 4) * 4 + c % 4;
}

uint8_t BlockElementCode(const BlockTensorRef& t, uint64_t r, uint64_t c) {
  const unsigned char* d = static_cast<const unsigned char*>(t.data);
  const uint64_t i = r * t.cols + c;
  if (!IsE2M1(t.format)) return d[i];
  return i % 2 == 0 ? (d[i / 2] & 0xf) : (d[i / 2] >> 4);
}

uint64_t BlockScaleIndex(const BlockTensorRef& t, uint64_t block_r, uint64_t block_c) {
  if (t.scale_layout == ScaleLayout::kCompact) return block_r * t.scale_cols + block_c;
  // Transposed: the scale tensor is [blocks across, blocks down], row-major.
  if (t.scale_layout == ScaleLayout::kCompactTransposed) return block_c * t.scale_cols + block_r;
  // The K-major grid: one row per row (rowwise) or per column (columnwise).
  if (t.layout == BlockLayout::kRowwise) return SwizzledScaleIndex(block_r, block_c, t.scale_cols);
  return SwizzledScaleIndex(block_c, block_r, t.scale_cols);
}

double BlockScaleValue(const BlockTensorRef& t, uint64_t block_r, uint64_t block_c) {
  const uint64_t index = BlockScaleIndex(t, block_r, block_c);
  const unsigned char* s = static_cast<const unsigned char*>(t.scales);
  if (IsMx(t.format)) return E8M0Value(s[index]);
  if (t.format == BlockFormat::kNvfp4) return E4M3Value(s[index]);
  float f;
  std::memcpy(&f, s + 4 * index, 4);
  return static_cast<double>(f);
}

double BlockElementValue(const BlockTensorRef& t, uint64_t r, uint64_t c) {
  const double code = CodeValue(t.format, BlockElementCode(t, r, c));
  return code * BlockScaleValue(t, r / BlockRowsOf(t), c / BlockColsOf(t));
}

double BlockSourceValue(const BlockTensorRef& t, uint64_t r, uint64_t c) {
  if (t.source == nullptr) return 0.0;
  TensorRef plain;
  plain.data = t.source;
  plain.numel = t.rows * t.cols;
  plain.dtype = t.source_dtype;
  return ElementValue(plain, r * t.cols + c);
}

BlockStats BlockStatsNaive(const BlockTensorRef* tensors, size_t count) {
  BlockStats u;
  bool any_nan = false, any_inf = false;
  for (size_t k = 0; k < count; ++k) {
    const BlockTensorRef& t = tensors[k];
    const TensorSums s = ElementStats(t, &u);
    BlockCounts(t, &u);
    u.numel += t.rows * t.cols;
    u.sumsq = u.sumsq + s.sumsq;  // step 6
    u.amax = std::fmax(u.amax, s.amax);
    any_nan = any_nan || s.any_nan;
    any_inf = any_inf || s.any_inf;
    if (t.source != nullptr) {
      u.has_source = true;
      u.error_sumsq = u.error_sumsq + s.error_sumsq;
      u.source_sumsq = u.source_sumsq + s.source_sumsq;
    }
  }
  if (any_nan) {
    u.sumsq = kNan;
  } else if (any_inf) {
    u.sumsq = kInf;
  }
  return u;
}

}  // namespace gnmr::cpu
