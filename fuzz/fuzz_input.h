// FuzzInput: reads typed values off the front of a fuzz input, for the
// targets that decode a structured sequence (job_sequence_fuzz.cc,
// controller_state_fuzz.cc). Past the end every read returns zero / empty,
// so a target never needs to check lengths; the fuzzer learns the layout
// from coverage. Deliberately tiny and header-only (no dependency on
// clang's FuzzedDataProvider, so the targets also build with GCC).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>

namespace gnmr::fuzz {

class FuzzInput {
 public:
  FuzzInput(const uint8_t* data, size_t size) : p_(data), end_(data + size) {}

  bool empty() const { return p_ == end_; }

  uint8_t Byte() { return p_ == end_ ? 0 : *p_++; }

  template <typename T>
  T Int() {
    T v{};
    const size_t n = std::min(sizeof(T), static_cast<size_t>(end_ - p_));
    std::memcpy(&v, p_, n);
    p_ += n;
    return v;
  }

  // A value in [lo, hi] (hi - lo < 2^32).
  int64_t Range(int64_t lo, int64_t hi) {
    const uint64_t span = static_cast<uint64_t>(hi - lo) + 1;
    const uint64_t v = span <= 256 ? Byte() : Int<uint32_t>();
    return lo + static_cast<int64_t>(v % span);
  }

  bool Bool() { return (Byte() & 1) != 0; }

  // A double that is often an edge case (NaN, +-Inf, 0, -0, huge, tiny,
  // negative) and otherwise a small non-negative value or raw bits.
  double Double() {
    switch (Byte() % 12) {
      case 0:
        return std::numeric_limits<double>::quiet_NaN();
      case 1:
        return std::numeric_limits<double>::infinity();
      case 2:
        return -std::numeric_limits<double>::infinity();
      case 3:
        return 0.0;
      case 4:
        return -0.0;
      case 5:
        return std::numeric_limits<double>::max();
      case 6:
        return std::numeric_limits<double>::denorm_min();
      case 7:
        return -1.0;
      case 8: {
        double d;
        const uint64_t bits = Int<uint64_t>();
        std::memcpy(&d, &bits, sizeof d);
        return d;
      }
      default: {
        const double whole = Byte() * 0.25;  // two reads, in this order
        return whole + Byte() / 64.0;
      }
    }
  }

  // Up to `max_len` bytes, length first.
  std::string String(size_t max_len) {
    const size_t n = std::min<size_t>(Byte() % (max_len + 1), end_ - p_);
    std::string s(reinterpret_cast<const char*>(p_), n);
    p_ += n;
    return s;
  }

  // Everything left.
  std::string Rest() {
    std::string s(reinterpret_cast<const char*>(p_), end_ - p_);
    p_ = end_;
    return s;
  }

 private:
  const uint8_t* p_;
  const uint8_t* end_;
};

}  // namespace gnmr::fuzz
