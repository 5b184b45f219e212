// The synthetic model of gnmr-synth: a realistic unit layout and per-step
// gradients that are deterministic per (job, step, unit, shard), so every
// replica of a shard produces identical data.
//
// Layout: U units, 4 per layer (attn.qkv, attn.out, mlp.fc1, mlp.fc2). With
// an even world size, attn.qkv and mlp.fc1 are column-parallel: shard
// rank % 2 of 2, half the elements each; the others are replicated.
// attn.out is bf16, the rest fp32; mlp.fc1 has a weight and a bias tensor.
// Each step a unit's gradient is N(0, s^2) noise with s = base * (1 + 0.07 g),
// g ~ N(0,1) clamped to [-2, 2] per (step, unit): norms fluctuate ~5-10%.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "gnmr/status.h"
#include "gnmr/tensor.h"

namespace gnmr::synth {

struct UnitLayout {
  std::string name;
  DType dtype = DType::kFp32;
  std::vector<uint64_t> tensor_numel;  // this rank's share
  uint32_t shard_index = 0;
  uint32_t shard_count = 1;
  double base_scale = 1e-3;
};

std::vector<UnitLayout> MakeLayout(uint32_t units, uint32_t rank, uint32_t world_size);

// "3" (an index) or "layers.0.mlp.fc1" (a name) -> index.
StatusOr<uint32_t> ResolveUnit(const std::vector<UnitLayout>& layout, const std::string& unit);

class SyntheticModel {
 public:
  SyntheticModel(std::vector<UnitLayout> layout, uint64_t seed);

  const std::vector<UnitLayout>& layout() const { return layout_; }
  std::vector<TensorRef> Tensors(uint32_t unit) const;

  // Writes every unit's gradient of `step`.
  void Produce(int64_t step);
  // Multiplies a unit's gradient by `factor` (spikes, clip).
  void Scale(uint32_t unit, double factor);
  void Zero(uint32_t unit);
  void PutNan(uint32_t unit);

 private:
  std::vector<UnitLayout> layout_;
  uint64_t seed_;
  // Per unit, per tensor: raw element bytes of the unit's dtype.
  std::vector<std::vector<std::vector<unsigned char>>> data_;
};

}  // namespace gnmr::synth
