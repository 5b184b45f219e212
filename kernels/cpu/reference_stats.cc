#include "kernels/cpu/reference_stats.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

namespace gnmr::cpu {
namespace {

// The fp8 scale in force (TensorRef::scale_inv_ptr first). The reference
// models finite scales only; the NaN rule of step 5a for a non-finite
// scale read through the pointer is tested against the fast path directly.
float ScaleInv(const TensorRef& t) {
  return t.scale_inv_ptr != nullptr ? *t.scale_inv_ptr : t.scale_inv;
}

constexpr uint64_t kItem = 4096;
constexpr int kLaneCount = 256;

double Fp16Value(uint16_t h) {
  const int e = (h >> 10) & 0x1f;
  const int m = h & 0x3ff;
  const double sign = (h & 0x8000) ? -1.0 : 1.0;
  if (e == 0x1f) {
    return m == 0 ? sign * std::numeric_limits<double>::infinity()
                  : std::numeric_limits<double>::quiet_NaN();
  }
  if (e == 0) return sign * std::ldexp(static_cast<double>(m), -24);
  return sign * std::ldexp(static_cast<double>(1024 + m), e - 25);
}

// Stored fp8 value, unscaled, by the textbook formula.
double Fp8Value(uint8_t b, bool e4m3) {
  const int mant_bits = e4m3 ? 3 : 2;
  const int bias = e4m3 ? 7 : 15;
  const int e = (b & 0x7f) >> mant_bits;
  const int m = b & ((1 << mant_bits) - 1);
  const double sign = (b & 0x80) ? -1.0 : 1.0;
  if (e4m3 && (b & 0x7f) == 0x7f) return std::numeric_limits<double>::quiet_NaN();
  if (!e4m3 && e == 31) {
    return m == 0 ? sign * std::numeric_limits<double>::infinity()
                  : std::numeric_limits<double>::quiet_NaN();
  }
  if (e == 0) return sign * std::ldexp(static_cast<double>(m), 1 - bias - mant_bits);
  return sign * std::ldexp(static_cast<double>((1 << mant_bits) + m), e - bias - mant_bits);
}

bool IsFp8(DType d) { return d == DType::kFp8E4M3 || d == DType::kFp8E5M2; }

// Element i before the fp8 scale (the value itself for other dtypes).
double UnscaledValue(const TensorRef& t, uint64_t i) {
  if (!IsFp8(t.dtype)) return ElementValue(t, i);
  const uint8_t b = static_cast<const unsigned char*>(t.data)[i];
  return Fp8Value(b, t.dtype == DType::kFp8E4M3);
}

// T(lo, c) of stats_order.h step 5, recursively.
double ItemTreeSum(const std::vector<double>& p, size_t lo, size_t c) {
  if (c == 1) return p[lo];
  size_t h = 1;
  while (h * 2 < c) h *= 2;
  return ItemTreeSum(p, lo, h) + ItemTreeSum(p, lo + h, c - h);
}

double CanonicalTensorSum(const TensorRef& t) {
  const uint64_t items = (t.numel + kItem - 1) / kItem;
  if (items == 0) return 0.0;
  std::vector<double> partials;
  partials.reserve(items);
  for (uint64_t k = 0; k < items; ++k) {
    double lanes[kLaneCount];
    for (int j = 0; j < kLaneCount; ++j) {
      lanes[j] = 0.0;
      for (int r = 0; r < 16; ++r) {
        const uint64_t i = k * kItem + static_cast<uint64_t>(r) * kLaneCount + j;
        double x = i < t.numel ? UnscaledValue(t, i) : 0.0;
        if (!std::isfinite(x)) x = 0.0;
        lanes[j] = lanes[j] + x * x;
      }
    }
    for (int s = 128; s >= 1; s /= 2) {
      for (int j = 0; j < s; ++j) lanes[j] = lanes[j] + lanes[j + s];
    }
    partials.push_back(lanes[0]);
  }
  const double sum = ItemTreeSum(partials, 0, partials.size());
  if (!IsFp8(t.dtype)) return sum;
  const double scale = std::fabs(static_cast<double>(ScaleInv(t)));  // step 5a
  return sum * (scale * scale);
}

}  // namespace

double ElementValue(const TensorRef& t, uint64_t i) {
  const unsigned char* base = static_cast<const unsigned char*>(t.data);
  switch (t.dtype) {
    case DType::kFp32: {
      float f;
      std::memcpy(&f, base + 4 * i, 4);
      return static_cast<double>(f);
    }
    case DType::kBf16: {
      uint16_t b;
      std::memcpy(&b, base + 2 * i, 2);
      const uint32_t bits = static_cast<uint32_t>(b) << 16;
      float f;
      std::memcpy(&f, &bits, 4);
      return static_cast<double>(f);
    }
    case DType::kFp16: {
      uint16_t h;
      std::memcpy(&h, base + 2 * i, 2);
      return Fp16Value(h);
    }
    case DType::kFp8E4M3:
    case DType::kFp8E5M2:
      return UnscaledValue(t, i) * static_cast<double>(ScaleInv(t));
    default:
      return std::numeric_limits<double>::quiet_NaN();
  }
}

double SaturationValue(const TensorRef& t) {
  const float m = t.saturation_magnitude;
  if (m == 0.0f) return std::numeric_limits<double>::infinity();
  if (!std::isinf(m)) return static_cast<double>(m);
  switch (t.dtype) {
    case DType::kFp32:
      return static_cast<double>(std::numeric_limits<float>::max());
    case DType::kBf16:
      return std::ldexp(255.0, 120);  // 0x7f7f: 1.1111111b * 2^127
    case DType::kFp16:
      return 65504.0;
    case DType::kFp8E4M3:
      return 448.0;
    case DType::kFp8E5M2:
      return 57344.0;
  }
  return std::numeric_limits<double>::infinity();
}

UnitStats CanonicalStatsNaive(const TensorRef* tensors, size_t count) {
  UnitStats u;
  const ReferenceStats ref = ComputeReferenceStats(tensors, count);
  for (size_t i = 0; i < count; ++i) u.sumsq = u.sumsq + CanonicalTensorSum(tensors[i]);
  if (ref.nans > 0) {
    u.sumsq = std::numeric_limits<double>::quiet_NaN();
  } else if (ref.infs > 0) {
    u.sumsq = std::numeric_limits<double>::infinity();
  }
  u.amax = ref.amax;
  u.nonfinite = ref.nans + ref.infs;
  u.zeros = ref.zeros;
  u.saturated = ref.saturated;
  u.numel = ref.numel;
  return u;
}

ReferenceStats ComputeReferenceStats(const TensorRef* tensors, size_t count) {
  ReferenceStats r;
  for (size_t k = 0; k < count; ++k) {
    const TensorRef& t = tensors[k];
    const double saturation = SaturationValue(t);
    for (uint64_t i = 0; i < t.numel; ++i) {
      const double x = ElementValue(t, i);
      if (std::isnan(x)) {
        ++r.nans;
      } else if (std::isinf(x)) {
        ++r.infs;
      } else {
        const long double lx = x;
        r.sumsq_finite += lx * lx;
        r.amax = std::fmax(r.amax, std::fabs(x));
        if (UnscaledValue(t, i) == 0.0) ++r.zeros;  // stored zeros (fp8 too)
        if (std::fabs(UnscaledValue(t, i)) >= saturation) ++r.saturated;
      }
    }
    r.numel += t.numel;
  }
  return r;
}

}  // namespace gnmr::cpu
