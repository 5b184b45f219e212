// The canonical summation order of sumsq (docs/statistics.md, "What a rank
// computes per unit").
//
// Squares of fp32 / bf16 / fp16 (and fp8) values are exact in fp64, so the
// only source of rounding is the order of the additions. Every
// implementation (the CPU path in kernels/cpu, the CUDA kernels) adds in
// exactly this order, which makes their results bit-identical:
//
// 1. Elements. x is decoded to double without floating-point arithmetic on
//    denormals (so flush-to-zero / denormals-are-zero modes cannot change
//    it) and squared in fp64. NaN and Inf elements contribute +0.0 to the
//    sum; they are counted instead, and the unit's final sumsq is the
//    canonical quiet NaN (0x7ff8000000000000) if any element is NaN, else
//    +Inf if any element is infinite.
// 2. Work items. A tensor of n elements is cut into work items of
//    kItemElems = 4096 consecutive elements: item k covers elements
//    [k * 4096, (k + 1) * 4096). The last item may be partial; its missing
//    elements count as +0.0. An empty tensor has no items and sums to +0.0.
// 3. Lanes. Inside a work item there are kLanes = 256 lanes. Lane j starts
//    at +0.0 and adds, sequentially, the squares of the item's elements
//    j, j + 256, j + 512, ..., j + 15 * 256 (16 of them).
// 4. Lane tree. For s = 128, 64, 32, 16, 8, 4, 2, 1 and every j < s:
//    lane[j] = lane[j] + lane[j + s]. The item's partial is lane[0]
//    (the classic shared-memory tree reduction).
// 5. Item tree. The m item partials p[0..m) of a tensor are combined by
//    T(lo, 1) = p[lo],
//    T(lo, c) = T(lo, h) + T(lo + h, c - h), h = largest power of two < c.
//    Equivalently: pad p with +0.0 to the next power of two and add
//    adjacent pairs level by level ((p0 + p1) + (p2 + p3)) + ...; a padded
//    +0.0 never changes a sum. Aligned blocks of 2^b partials are exact
//    subtrees, so a GPU can reduce them block by block. The tensor's sum is
//    T(0, m), or +0.0 when m == 0.
// 5a. fp8 scale. For fp8 (e4m3fn, e5m2) steps 1-5 use the stored values
//    decoded unscaled (their squares have at most 8 significant bits, so
//    every partial is as exact as for the other dtypes). With
//    s = |(double)scale_inv| (s * s is exact: 48 bits), the tensor's sum
//    is T(0, m) * (s * s), one rounding, and its amax is
//    amax_unscaled * s (exact: 4 x 24 bits). Zeros are stored zeros and
//    non-finite elements are stored NaN/Inf patterns, whatever the scale.
//    scale_inv must be finite (the CPU path rejects NaN/Inf); other dtypes
//    ignore it. A scale read at computation time (TensorRef::scale_inv_ptr)
//    that is not finite leaves the tensor's values undefined: the unit's
//    sumsq is the canonical NaN (as for a NaN element) and the tensor adds
//    nothing to amax; zeros and nonfinite still count its stored patterns. (Scaling each element
//    instead would round x * scale_inv squared, and would cost a multiply per element.)
// 6. Unit. The unit's sumsq is ((0.0 + t0) + t1) + ... over its tensors in
//    the order they were given.
//
// amax, nonfinite and zeros are order-independent: amax is the maximum of
// |x| over finite elements, compared as integers on the bit pattern with
// the sign bit cleared (exponent-all-ones patterns are excluded; for
// e4m3fn, which has no Inf, only S.1111.111 = NaN), converted to double at
// the end.
//
// saturated is order-independent too (an integer count): with a = the
// element's bit pattern with the sign bit cleared (fp8: the stored code,
// before scale_inv) and thr = the tensor's saturation pattern
// (kernels/saturation.h: TensorRef::saturation_magnitude rounded up into
// the tensor's format; 0 = not counted), an element counts iff
// thr != 0 and thr <= a < the format's first NaN/Inf pattern. For finite
// IEEE values the pattern order is the magnitude order, so this is
// |x| >= the rounded magnitude; NaN/Inf never count, and a tensor's count
// does not depend on its scale. Implementations may compute it only where
// thr != 0 (gradient tensors keep their code unchanged).
#pragma once

#include <cstdint>

namespace gnmr::stats_order {

inline constexpr uint64_t kItemElems = 4096;
inline constexpr uint32_t kLanes = 256;
inline constexpr uint32_t kRowsPerItem = kItemElems / kLanes;  // 16

// The quiet NaN every implementation returns for a unit with a NaN element.
inline constexpr uint64_t kCanonicalNanBits = 0x7ff8000000000000ull;

// Step 5 as a streaming computation: Push the item partials in order, then
// Finish. It keeps one pending subtree per level (a binary counter), so a
// tensor of any size needs no allocation.
class ItemTree {
 public:
  void Push(double partial) { PushSubtree(partial, 0); }

  // The subtree T(lo, 2^level) of partials lo .. lo + 2^level - 1, where
  // lo (the count pushed so far) is a multiple of 2^level: the same state
  // as pushing those partials one by one.
  void PushSubtree(double subtree, int level) {
    double v = subtree;
    while (depth_ > 0 && level_[depth_ - 1] == level) {
      v = value_[depth_ - 1] + v;  // left subtree + right subtree
      --depth_;
      ++level;
    }
    value_[depth_] = v;
    level_[depth_] = level;
    ++depth_;
  }

  // T(0, m): pending subtrees have strictly decreasing sizes from bottom to
  // top, and T(lo, c) = left + T(rest), so they fold from the top down.
  double Finish() const {
    if (depth_ == 0) return 0.0;
    double acc = value_[depth_ - 1];
    for (int i = depth_ - 2; i >= 0; --i) acc = value_[i] + acc;
    return acc;
  }

 private:
  double value_[65] = {};
  int level_[65] = {};
  int depth_ = 0;
};

}  // namespace gnmr::stats_order
