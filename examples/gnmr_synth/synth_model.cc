#include "examples/gnmr_synth/synth_model.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>

namespace gnmr::synth {
namespace {

struct Kind {
  const char* name;
  uint64_t numel;  // whole unit (weight)
  uint64_t bias;   // extra bias tensor, 0 = none
  bool sharded;    // column-parallel when the world size is even
  DType dtype;
  double scale;
};

constexpr Kind kKinds[4] = {
    {"attn.qkv", 6144, 0, true, DType::kFp32, 1.0e-3},
    {"attn.out", 2048, 0, false, DType::kBf16, 2.0e-3},
    {"mlp.fc1", 8192, 128, true, DType::kFp32, 1.5e-3},
    {"mlp.fc2", 8192, 0, false, DType::kFp32, 1.0e-3},
};

uint64_t Mix(uint64_t x) {  // splitmix64 finalizer
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

uint64_t Key(uint64_t seed, int64_t step, uint64_t unit, uint64_t shard) {
  return Mix(Mix(Mix(seed ^ static_cast<uint64_t>(step)) ^ unit) ^ shard);
}

// Two N(0,1) samples from 64 random bits (Box-Muller).
void Normals(uint64_t bits, float* a, float* b) {
  const float u1 = (static_cast<float>(bits >> 40) + 1.0f) * 0x1p-24f;  // (0, 1]
  const float u2 = static_cast<float>((bits >> 16) & 0xffffff) * 0x1p-24f;
  const float r = std::sqrt(-2.0f * std::log(u1));
  *a = r * std::cos(6.2831853f * u2);
  *b = r * std::sin(6.2831853f * u2);
}

uint16_t ToBf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

float FromBf16(uint16_t h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Applies f to every element of a tensor's bytes.
template <typename F>
void ForEach(DType dtype, std::vector<unsigned char>* bytes, F f) {
  if (dtype == DType::kBf16) {
    for (size_t i = 0; i + 2 <= bytes->size(); i += 2) {
      uint16_t h;
      std::memcpy(&h, &(*bytes)[i], 2);
      h = ToBf16(f(i / 2, FromBf16(h)));
      std::memcpy(&(*bytes)[i], &h, 2);
    }
  } else {
    for (size_t i = 0; i + 4 <= bytes->size(); i += 4) {
      float x;
      std::memcpy(&x, &(*bytes)[i], 4);
      x = f(i / 4, x);
      std::memcpy(&(*bytes)[i], &x, 4);
    }
  }
}

}  // namespace

std::vector<UnitLayout> MakeLayout(uint32_t units, uint32_t rank, uint32_t world_size) {
  std::vector<UnitLayout> out;
  const bool shard = world_size % 2 == 0;
  for (uint32_t i = 0; i < units; ++i) {
    const Kind& k = kKinds[i % 4];
    const uint32_t layer = i / 4;
    UnitLayout u;
    u.name = "layers." + std::to_string(layer) + "." + k.name;
    u.dtype = k.dtype;
    u.shard_count = shard && k.sharded ? 2 : 1;
    u.shard_index = rank % u.shard_count;
    u.tensor_numel.push_back(k.numel / u.shard_count);
    if (k.bias > 0) u.tensor_numel.push_back(k.bias / u.shard_count);
    u.base_scale = k.scale * (1.0 + 0.1 * (layer % 8));
    out.push_back(u);
  }
  return out;
}

StatusOr<uint32_t> ResolveUnit(const std::vector<UnitLayout>& layout, const std::string& unit) {
  if (!unit.empty() && std::all_of(unit.begin(), unit.end(), ::isdigit)) {
    const unsigned long long i = std::strtoull(unit.c_str(), nullptr, 10);
    if (unit.size() > 9 || i >= layout.size()) {
      return InvalidArgument("unit index " + unit + " out of range (0.." +
                             std::to_string(layout.size() - 1) + ")");
    }
    return static_cast<uint32_t>(i);
  }
  for (size_t i = 0; i < layout.size(); ++i) {
    if (layout[i].name == unit) return static_cast<uint32_t>(i);
  }
  return InvalidArgument("no unit named '" + unit + "' (names look like layers.0.mlp.fc1)");
}

SyntheticModel::SyntheticModel(std::vector<UnitLayout> layout, uint64_t seed)
    : layout_(std::move(layout)), seed_(seed) {
  data_.resize(layout_.size());
  for (size_t u = 0; u < layout_.size(); ++u) {
    for (uint64_t n : layout_[u].tensor_numel) {
      data_[u].emplace_back(n * DTypeSize(layout_[u].dtype), 0);
    }
  }
}

std::vector<TensorRef> SyntheticModel::Tensors(uint32_t unit) const {
  std::vector<TensorRef> refs;
  for (size_t t = 0; t < data_[unit].size(); ++t) {
    TensorRef r;
    r.data = data_[unit][t].data();
    r.numel = layout_[unit].tensor_numel[t];
    r.dtype = layout_[unit].dtype;
    refs.push_back(r);
  }
  return refs;
}

void SyntheticModel::Produce(int64_t step) {
  for (size_t u = 0; u < layout_.size(); ++u) {
    const UnitLayout& l = layout_[u];
    // Same for every shard and replica of the unit: the norm's fluctuation.
    float g, unused;
    Normals(Key(seed_, step, u, ~0ull), &g, &unused);
    const float s = static_cast<float>(l.base_scale) * (1.0f + 0.07f * std::clamp(g, -2.0f, 2.0f));
    for (size_t t = 0; t < data_[u].size(); ++t) {
      const uint64_t key = Key(seed_, step, u * 16 + t, l.shard_index);
      float pair[2];
      ForEach(l.dtype, &data_[u][t], [&](size_t i, float) {
        if (i % 2 == 0) Normals(Mix(key + i), &pair[0], &pair[1]);
        return s * pair[i % 2];
      });
    }
  }
}

void SyntheticModel::Scale(uint32_t unit, double factor) {
  const float f = static_cast<float>(factor);
  for (auto& bytes : data_[unit]) {
    ForEach(layout_[unit].dtype, &bytes, [f](size_t, float x) { return x * f; });
  }
}

void SyntheticModel::Zero(uint32_t unit) {
  for (auto& bytes : data_[unit]) std::fill(bytes.begin(), bytes.end(), 0);
}

void SyntheticModel::PutNan(uint32_t unit) {
  ForEach(layout_[unit].dtype, &data_[unit][0],
          [](size_t i, float x) { return i == 0 ? std::numeric_limits<float>::quiet_NaN() : x; });
}

}  // namespace gnmr::synth
