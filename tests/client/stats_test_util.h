// Helpers for the statistics tests: seeded random tensors of every dtype
// with optional special values, stored as raw bytes at any byte offset.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "gnmr/tensor.h"

namespace gnmr::testing {

// fp32 -> bf16 / fp16 bit patterns, round to nearest even (test data only).
inline uint16_t ToBf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;  // NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

inline uint16_t ToFp16(float f) {
  // Through double: exact rounding via scaling, adequate for test data.
  const uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  double a = std::fabs(static_cast<double>(f));
  if (std::isnan(f)) return 0x7e00;
  if (a >= 65520.0) return sign | 0x7c00;  // overflows to Inf
  if (a < std::ldexp(1.0, -14)) {          // subnormal range
    const double m = std::nearbyint(a * std::ldexp(1.0, 24));
    return sign | static_cast<uint16_t>(m);  // m == 1024 rolls into normal
  }
  int e;
  const double fr = std::frexp(a, &e);     // a = fr * 2^e, fr in [0.5, 1)
  double m = std::nearbyint(fr * 2048.0);  // 11 significant bits
  if (m == 2048.0) {
    m = 1024.0;
    ++e;
  }
  if (e - 1 + 15 >= 31) return sign | 0x7c00;
  const uint16_t exp_field = static_cast<uint16_t>(e - 1 + 15);
  return sign | static_cast<uint16_t>(exp_field << 10) |
         static_cast<uint16_t>(static_cast<int>(m) - 1024);
}

// Stored fp8 value (unscaled) of a bit pattern; NaN for NaN, +-Inf (e5m2).
inline double Fp8ToDouble(uint8_t b, bool e4m3) {
  const int mant = e4m3 ? 3 : 2, bias = e4m3 ? 7 : 15;
  const int e = (b & 0x7f) >> mant, m = b & ((1 << mant) - 1);
  const double sign = (b & 0x80) ? -1.0 : 1.0;
  if (e4m3 ? (b & 0x7f) == 0x7f : e == 31) {
    return !e4m3 && m == 0 ? sign * INFINITY : NAN;
  }
  return sign *
         (e == 0 ? std::ldexp(m, 1 - bias - mant) : std::ldexp((1 << mant) + m, e - bias - mant));
}

inline std::vector<double> Fp8Table(bool e4m3) {
  std::vector<double> v;
  for (int b = 0; b <= (e4m3 ? 0x7e : 0x7b); ++b)
    v.push_back(Fp8ToDouble(static_cast<uint8_t>(b), e4m3));
  return v;
}

// Nearest fp8 pattern (saturating to the largest finite; test data only).
inline uint8_t ToFp8(float f, bool e4m3) {
  if (std::isnan(f)) return e4m3 ? 0x7f : 0x7e;
  const uint8_t sign = std::signbit(f) ? 0x80 : 0;
  const double a = std::fabs(static_cast<double>(f));
  static const std::vector<double> values[2] = {Fp8Table(false), Fp8Table(true)};
  const std::vector<double>& v = values[e4m3 ? 1 : 0];  // increasing
  size_t hi = static_cast<size_t>(std::lower_bound(v.begin(), v.end(), a) - v.begin());
  if (hi == v.size()) hi = v.size() - 1;  // saturate
  const uint8_t best = static_cast<uint8_t>(hi > 0 && a - v[hi - 1] <= v[hi] - a ? hi - 1 : hi);
  return sign | best;
}

// A tensor's bytes placed `offset` bytes into an owned buffer, so tests can
// exercise unaligned starts.
class TestTensor {
 public:
  TestTensor(DType dtype, uint64_t numel, size_t offset = 0)
      : dtype_(dtype),
        numel_(numel),
        offset_(offset),
        bytes_(offset + numel * DTypeSize(dtype) + 8, 0) {}

  void Set(uint64_t i, float v) {
    unsigned char* p = bytes_.data() + offset_ + i * DTypeSize(dtype_);
    if (dtype_ == DType::kFp32) {
      std::memcpy(p, &v, 4);
    } else if (DTypeSize(dtype_) == 1) {
      *p = ToFp8(v, dtype_ == DType::kFp8E4M3);
    } else {
      const uint16_t h = dtype_ == DType::kBf16 ? ToBf16(v) : ToFp16(v);
      std::memcpy(p, &h, 2);
    }
  }
  void SetBits(uint64_t i, uint32_t bits) {
    unsigned char* p = bytes_.data() + offset_ + i * DTypeSize(dtype_);
    std::memcpy(p, &bits, DTypeSize(dtype_));  // little-endian
  }
  // Fills with N(0, scale^2) values.
  void FillNormal(uint64_t seed, float scale) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> dist(0.0f, scale);
    for (uint64_t i = 0; i < numel_; ++i) Set(i, dist(rng));
  }
  void set_scale_inv(float s) { scale_inv_ = s; }
  void set_saturation_magnitude(float m) { saturation_magnitude_ = m; }
  // The same tensor at another byte offset.
  TestTensor Moved(size_t offset) const {
    TestTensor t(dtype_, numel_, offset);
    t.scale_inv_ = scale_inv_;
    t.saturation_magnitude_ = saturation_magnitude_;
    std::memcpy(t.bytes_.data() + offset, bytes_.data() + offset_, numel_ * DTypeSize(dtype_));
    return t;
  }
  TensorRef Ref() const {
    TensorRef r;
    r.data = numel_ == 0 ? nullptr : bytes_.data() + offset_;
    r.numel = numel_;
    r.dtype = dtype_;
    r.scale_inv = scale_inv_;
    r.saturation_magnitude = saturation_magnitude_;
    return r;
  }

 private:
  DType dtype_;
  uint64_t numel_;
  size_t offset_;
  float scale_inv_ = 1.0f;
  float saturation_magnitude_ = 0.0f;
  std::vector<unsigned char> bytes_;
};

inline uint64_t Bits(double d) {
  uint64_t u;
  std::memcpy(&u, &d, 8);
  return u;
}

// Every figure of two unit statistics equal, sumsq and amax bit for bit.
inline void ExpectSame(const UnitStats& want, const UnitStats& got, const std::string& what = "") {
  EXPECT_EQ(Bits(want.sumsq), Bits(got.sumsq)) << what << " " << want.sumsq << " vs " << got.sumsq;
  EXPECT_EQ(Bits(want.amax), Bits(got.amax)) << what << " " << want.amax << " vs " << got.amax;
  EXPECT_EQ(want.nonfinite, got.nonfinite) << what;
  EXPECT_EQ(want.zeros, got.zeros) << what;
  EXPECT_EQ(want.saturated, got.saturated) << what;
  EXPECT_EQ(want.numel, got.numel) << what;
}

}  // namespace gnmr::testing
