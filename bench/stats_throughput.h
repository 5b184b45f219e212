// Shared by the CPU statistics benchmarks (bench/bench_client.cc,
// bench/cpu_stats_vs_read.cc): the gradient-like inputs and the
// streaming-read baselines the statistics throughput is measured against.
//
// The baseline is the best single-core read of a buffer we can write:
// 64-byte-aligned vector loads (AVX-512: 4 x 64 B per step; AVX2: 8 x 32 B)
// folded into 4 independent integer-add accumulators (cheap, and no load
// can be dropped: the caller keeps the sum), with a software prefetch (T0)
// of every line `kPrefetch` bytes ahead (0: none, the hardware prefetcher
// only). The same run-time ISA check as the kernels (cpu::IsaAvailable)
// decides which variants can run.
#pragma once

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#endif

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "gnmr/tensor.h"
#include "kernels/cpu/item_kernels.h"

namespace gnmr::bench {

// `bytes` of N(0, 0.01) gradients in `dtype` (denormal: N(0, 1e-39), almost
// all fp32/bf16 subnormals). bf16 truncates the fp32 value; fp16 and fp8
// get small normals from the random bits; no NaN/Inf anywhere.
inline std::vector<unsigned char> GradientBuffer(DType dtype, bool denormal, size_t bytes) {
  std::vector<unsigned char> b(bytes);
  std::mt19937 rng(1);
  std::normal_distribution<float> dist(0.0f, denormal ? 1e-39f : 0.01f);
  const size_t size = DTypeSize(dtype);
  for (size_t i = 0; i + size <= b.size(); i += size) {
    const float f = dist(rng);
    uint32_t u;
    std::memcpy(&u, &f, 4);
    if (dtype == DType::kFp32) {
      std::memcpy(&b[i], &u, 4);
    } else if (dtype == DType::kBf16) {
      const uint16_t h = static_cast<uint16_t>(u >> 16);
      std::memcpy(&b[i], &h, 2);
    } else if (dtype == DType::kFp16) {
      const uint16_t h = static_cast<uint16_t>(0x2000 + (u & 0x8fff));
      std::memcpy(&b[i], &h, 2);
    } else {
      b[i] = static_cast<unsigned char>(0x20 + (u & 0x9f));
    }
  }
  return b;
}

using ReadFn = uint64_t (*)(const unsigned char*, size_t);

#if defined(__x86_64__) || defined(_M_X64)
// Bytes before the first 64-byte boundary, and after the last whole
// 256-byte block: read byte by byte (the vector loops need aligned blocks).
inline uint64_t AlignHead(const unsigned char** p, size_t* n) {
  uint64_t sum = 0;
  while ((reinterpret_cast<uintptr_t>(*p) & 63) != 0 && *n > 0) sum += *(*p)++, --*n;
  return sum;
}
inline uint64_t Tail(const unsigned char* p, size_t n) {
  uint64_t sum = 0;
  for (size_t i = 0; i < (n & 255); ++i) sum += p[i];
  return sum;
}

// A T0 prefetch of the four lines kPrefetch bytes past p (0: none).
// Prefetches never fault; an integer address avoids forming a pointer past
// the buffer.
template <int kPrefetch>
__attribute__((always_inline)) inline void PrefetchBlock(const unsigned char* p) {
  if (kPrefetch > 0) {
    const uintptr_t ahead = reinterpret_cast<uintptr_t>(p) + kPrefetch;
    for (int l = 0; l < 4; ++l) {
      _mm_prefetch(reinterpret_cast<const char*>(ahead + 64 * l), _MM_HINT_T0);
    }
  }
}

template <int kPrefetch>
__attribute__((target("avx512f"))) uint64_t ReadAvx512(const unsigned char* p, size_t n) {
  uint64_t head = AlignHead(&p, &n);
  __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
  const unsigned char* end = p + (n & ~size_t{255});
  for (; p < end; p += 256) {
    PrefetchBlock<kPrefetch>(p);
    a0 = _mm512_add_epi64(a0, _mm512_load_si512(p));
    a1 = _mm512_add_epi64(a1, _mm512_load_si512(p + 64));
    a2 = _mm512_add_epi64(a2, _mm512_load_si512(p + 128));
    a3 = _mm512_add_epi64(a3, _mm512_load_si512(p + 192));
  }
  head += Tail(p, n);
  const __m512i s = _mm512_add_epi64(_mm512_add_epi64(a0, a1), _mm512_add_epi64(a2, a3));
  alignas(64) uint64_t lanes[8];  // (not _mm512_reduce_add_epi64: GCC 12 warns in it)
  _mm512_store_si512(lanes, s);
  for (uint64_t l : lanes) head += l;
  return head;
}

template <int kPrefetch>
__attribute__((target("avx2"))) uint64_t ReadAvx2(const unsigned char* p, size_t n) {
  uint64_t head = AlignHead(&p, &n);
  __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
  const unsigned char* end = p + (n & ~size_t{255});
  for (; p < end; p += 256) {
    PrefetchBlock<kPrefetch>(p);
    const __m256i* v = reinterpret_cast<const __m256i*>(p);
    a0 = _mm256_add_epi64(a0, _mm256_add_epi64(_mm256_load_si256(v + 0), _mm256_load_si256(v + 1)));
    a1 = _mm256_add_epi64(a1, _mm256_add_epi64(_mm256_load_si256(v + 2), _mm256_load_si256(v + 3)));
    a2 = _mm256_add_epi64(a2, _mm256_add_epi64(_mm256_load_si256(v + 4), _mm256_load_si256(v + 5)));
    a3 = _mm256_add_epi64(a3, _mm256_add_epi64(_mm256_load_si256(v + 6), _mm256_load_si256(v + 7)));
  }
  head += Tail(p, n);
  const __m256i s = _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3));
  alignas(32) uint64_t lanes[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), s);
  return head + lanes[0] + lanes[1] + lanes[2] + lanes[3];
}
#endif

// A plain scalar 8-byte loop (the hardware prefetcher only): the former
// baseline, kept for comparison.
inline uint64_t ReadScalar(const unsigned char* p, size_t n) {
  uint64_t acc = 0;
  for (size_t i = 0; i + 8 <= n; i += 8) {
    uint64_t w;
    std::memcpy(&w, p + i, 8);
    acc += w;
  }
  return acc;
}

struct ReadVariant {
  std::string name;  // "<isa>/<prefetch bytes ahead>"
  cpu::Isa isa;
  int prefetch;
  ReadFn fn;
};

// The vectorized read variants this build has, runnable or not (check
// cpu::IsaAvailable(v.isa) before calling one).
inline std::vector<ReadVariant> ReadVariants() {
  std::vector<ReadVariant> v;
#if defined(__x86_64__) || defined(_M_X64)
  for (cpu::Isa isa : {cpu::Isa::kAvx512, cpu::Isa::kAvx2}) {
    const bool wide = isa == cpu::Isa::kAvx512;
    const std::string n = std::string(cpu::IsaName(isa)) + "/";
    v.push_back({n + "0", isa, 0, wide ? &ReadAvx512<0> : &ReadAvx2<0>});
    v.push_back({n + "1024", isa, 1024, wide ? &ReadAvx512<1024> : &ReadAvx2<1024>});
    v.push_back({n + "4096", isa, 4096, wide ? &ReadAvx512<4096> : &ReadAvx2<4096>});
    v.push_back({n + "8192", isa, 8192, wide ? &ReadAvx512<8192> : &ReadAvx2<8192>});
    v.push_back({n + "16384", isa, 16384, wide ? &ReadAvx512<16384> : &ReadAvx2<16384>});
  }
#endif
  return v;
}

}  // namespace gnmr::bench
