// The units a client registers: names, tensors, sharding; checked the way
// the daemon will check them, so mistakes surface in AddUnit, not as a
// Register failure in the background.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <unordered_set>
#include <vector>

#include "gnmr/client.h"
#include "gnmr/status.h"
#include "gnmr/v1/gnmr.pb.h"

namespace gnmr {

// 1..128 bytes of [A-Za-z0-9._:-].
Status CheckJobId(const std::string& id);
// 1..256 bytes of printable ASCII.
Status CheckUnitName(const std::string& name);
// Where a unit's tensors live: kHostDevice, or the one CUDA device all of
// them are on; InvalidArgument if they are spread over several places.
StatusOr<int32_t> UnitDevice(const TensorRef* tensors, size_t count);

class UnitRegistry {
 public:
  struct Unit {
    std::string name;
    std::vector<TensorRef> tensors;
    uint64_t numel = 0;
    DType dtype = DType::kFp32;
    uint32_t shard_index = 0;
    uint32_t shard_count = 1;
    int32_t device = kHostDevice;  // every tensor's: host, or one CUDA device
  };

  StatusOr<UnitHandle> Add(const std::string& name, const std::vector<TensorRef>& tensors,
                           uint32_t shard_index, uint32_t shard_count);
  // Same total numel as registered; reuses the unit's storage. A device
  // unit stays on its device with the same tensor count, dtypes and numels
  // (the GPU tables are built once).
  Status SetTensors(UnitHandle unit, const TensorRef* tensors, size_t count);

  size_t size() const { return units_.size(); }
  const Unit& unit(UnitHandle h) const { return units_[h]; }
  const std::string& name(UnitHandle h) const;
  void FillSpecs(v1::RegisterRequest* req) const;

 private:
  std::vector<Unit> units_;
  std::unordered_set<std::string> names_;
};

}  // namespace gnmr
