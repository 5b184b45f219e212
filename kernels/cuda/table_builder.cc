#include "kernels/cuda/table_builder.h"

#include <cmath>
#include <string>

#include "kernels/saturation.h"
#include "kernels/stats_order.h"

namespace gnmr::cuda {
namespace {

constexpr DType kGroupOrder[] = {DType::kFp32, DType::kBf16, DType::kFp16, DType::kFp8E4M3,
                                 DType::kFp8E5M2};

bool IsFp8(DType d) { return d == DType::kFp8E4M3 || d == DType::kFp8E5M2; }

uint64_t ItemsOf(uint64_t numel) {
  return (numel + stats_order::kItemElems - 1) / stats_order::kItemElems;
}

}  // namespace

Status BuildTables(const std::vector<std::vector<TensorRef>>& units, int device,
                   const ReadableCheck& check, HostTables* out) {
  HostTables h;
  for (size_t u = 0; u < units.size(); ++u) {
    h.units.push_back(
        DevUnit{static_cast<uint32_t>(h.tensors.size()), static_cast<uint32_t>(units[u].size())});
    for (const TensorRef& t : units[u]) {
      const std::string name =
          "unit " + std::to_string(u) + " tensor " + std::to_string(h.tensors.size());
      if (DTypeSize(t.dtype) == 0) return InvalidArgument(name + ": unknown dtype");
      const void* scale_dev = nullptr;
      if (IsFp8(t.dtype) && t.scale_inv_ptr != nullptr) {
        Status st = check(t.scale_inv_ptr, sizeof(float), alignof(float), &scale_dev);
        if (!st.ok()) return InvalidArgument(name + ": scale_inv_ptr: " + st.message());
      } else if (IsFp8(t.dtype) && !std::isfinite(t.scale_inv)) {
        return InvalidArgument(name + ": fp8 scale_inv is not finite");
      }
      if (!saturation::ValidMagnitude(t.saturation_magnitude)) {
        return InvalidArgument(name + ": saturation_magnitude is negative or NaN");
      }
      if (t.numel > 0 && t.data == nullptr) return InvalidArgument(name + ": data is null");
      if (t.numel > 0 && t.device != device) {
        return InvalidArgument(name + ": not on CUDA device " + std::to_string(device));
      }
      const void* data_dev = nullptr;
      if (t.numel > 0) {
        Status st = check(t.data, t.numel * DTypeSize(t.dtype), 1, &data_dev);
        if (!st.ok()) return InvalidArgument(name + ": data: " + st.message());
      }
      DevTensor d{};
      d.numel = t.numel;
      d.unit = static_cast<uint32_t>(u);
      d.scale_inv = t.scale_inv;
      d.scale_inv_ptr = static_cast<const float*>(scale_dev);
      d.dtype = static_cast<uint32_t>(t.dtype);
      d.saturation = saturation::Threshold(t.dtype, t.saturation_magnitude);
      h.tensors.push_back(d);
      h.ptrs.push_back(data_dev);
    }
  }
  // Items grouped by dtype, then by saturation counting (off, on);
  // first_item of each tensor in the grouped table.
  std::vector<uint64_t> first_item(h.tensors.size(), 0);
  for (DType group : kGroupOrder) {
    const int g = static_cast<int>(group);
    h.item_range[g][0] = h.items.size();
    for (const bool sat : {false, true}) {
      if (sat) h.sat_begin[g] = h.items.size();
      for (size_t k = 0; k < h.tensors.size(); ++k) {
        if (h.tensors[k].dtype != static_cast<uint32_t>(group)) continue;
        if ((h.tensors[k].saturation != 0) != sat) continue;
        first_item[k] = h.items.size();
        const uint64_t numel = h.tensors[k].numel;
        for (uint64_t i = 0; i < ItemsOf(numel); ++i) {
          const uint64_t off = i * stats_order::kItemElems;
          const uint64_t left = numel - off;
          h.items.push_back(DevItem{
              off, static_cast<uint32_t>(k),
              static_cast<uint32_t>(left < stats_order::kItemElems ? left
                                                                   : stats_order::kItemElems)});
        }
      }
    }
    h.item_range[g][1] = h.items.size();
  }
  for (size_t k = 0; k < h.tensors.size(); ++k) {
    DevTensor& d = h.tensors[k];
    d.first_seg = h.segs.size();
    const uint64_t n = ItemsOf(d.numel);
    for (uint64_t i = 0; i < n; i += kSegItems) {
      const uint64_t c = n - i < kSegItems ? n - i : kSegItems;
      h.segs.push_back(DevSeg{first_item[k] + i, static_cast<uint32_t>(c), 0});
    }
    d.n_segs = static_cast<uint32_t>(h.segs.size() - d.first_seg);
  }
  *out = std::move(h);
  return Status::Ok();
}

}  // namespace gnmr::cuda
