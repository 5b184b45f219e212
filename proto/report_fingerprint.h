// ReportFingerprint: 64 bits that stand for what one StepStats says about
// gradients, so gnmrd can check that a standby replica would have reported
// exactly what its group's elected reporter did (docs/scale.md, "Replica
// check"). Data-parallel replicas hold the same gradients after the
// all-reduce and the statistics kernels are deterministic, so their
// fingerprints are equal; when they are not, the ranks are not the replicas
// their registration says (e.g. FSDP shards registered as whole units, or
// statistics taken before the all-reduce), and one replica's report would
// hide the others' gradients.
//
// Covers the step, the listed unit ids and each one's sumsq, amax,
// nonfinite and zeros. Not the forward statistics (each replica ran its own
// batch) or the client figures. The client
// computes it over the report it holds back, gnmrd over the report it
// received: the same function on the same message.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "gnmr/v1/gnmr.pb.h"

namespace gnmr {

namespace fingerprint_internal {

// splitmix64's finaliser: every input bit moves about half the output bits.
inline uint64_t Mix(uint64_t h, uint64_t word) {
  uint64_t z = h ^ (word + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2));
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

inline uint64_t Bits(double v) {
  if (std::isnan(v)) return 0x7ff8000000000000ULL;  // one NaN, whatever its payload
  uint64_t b = 0;
  std::memcpy(&b, &v, sizeof b);
  return b;
}

}  // namespace fingerprint_internal

inline uint64_t ReportFingerprint(const v1::StepStats& s) {
  using fingerprint_internal::Bits;
  using fingerprint_internal::Mix;
  uint64_t h = Mix(0x676e6d72ULL, static_cast<uint64_t>(s.step()));
  h = Mix(h, static_cast<uint64_t>(s.unit_id_size()));
  for (int i = 0; i < s.unit_id_size(); ++i) {
    h = Mix(h, s.unit_id(i));
    h = Mix(h, i < s.sumsq_size() ? Bits(s.sumsq(i)) : 0);
    h = Mix(h, i < s.amax_size() ? Bits(s.amax(i)) : 0);
    h = Mix(h, i < s.nonfinite_size() ? s.nonfinite(i) : 0);
    h = Mix(h, i < s.zeros_size() ? s.zeros(i) : 0);
  }
  return h;
}

}  // namespace gnmr
