#include "client/src/unit_registry.h"

#include <cmath>
#include <cstring>

#include "kernels/cpu_stats.h"

namespace gnmr {
namespace {

std::string DeviceName(int32_t device) {
  return device == kHostDevice ? std::string("the host") : "CUDA device " + std::to_string(device);
}

uint64_t TotalNumel(const TensorRef* tensors, size_t count) {
  uint64_t n = 0;
  for (size_t i = 0; i < count; ++i) n += tensors[i].numel;
  return n;
}

// Device tensors are checked without reading them (the GPU path does).
Status CheckDeviceTensors(const TensorRef* tensors, size_t count) {
  for (size_t i = 0; i < count; ++i) {
    const TensorRef& t = tensors[i];
    const std::string name = "tensor " + std::to_string(i);
    if (DTypeSize(t.dtype) == 0) {
      return InvalidArgument(name + ": unknown dtype " + std::to_string(static_cast<int>(t.dtype)));
    }
    // A scale_inv_ptr is checked by the GPU path (device-accessible memory).
    if ((t.dtype == DType::kFp8E4M3 || t.dtype == DType::kFp8E5M2) && t.scale_inv_ptr == nullptr &&
        !std::isfinite(t.scale_inv)) {
      return InvalidArgument(name + ": " + DTypeName(t.dtype) + " scale_inv is not finite");
    }
    uint32_t m;  // on the bit pattern, as the kernels judge it (no FP mode can change it)
    std::memcpy(&m, &t.saturation_magnitude, sizeof m);
    if (m > 0x7f800000u && m != 0x80000000u) {
      return InvalidArgument(name + ": saturation_magnitude is negative or NaN");
    }
    if (t.numel > 0 && t.data == nullptr) return InvalidArgument(name + ": data is null");
  }
  return Status::Ok();
}

Status CheckTensorsOn(int32_t device, const TensorRef* tensors, size_t count) {
  return device == kHostDevice ? cpu::CheckTensors(tensors, count)
                               : CheckDeviceTensors(tensors, count);
}

}  // namespace

StatusOr<int32_t> UnitDevice(const TensorRef* tensors, size_t count) {
  if (count == 0) return kHostDevice;
  const int32_t d = tensors[0].device;
  for (size_t i = 0; i < count; ++i) {
    if (tensors[i].device < kHostDevice) {
      return InvalidArgument("tensor " + std::to_string(i) + ": device " +
                             std::to_string(tensors[i].device) +
                             " is neither host (-1) nor a CUDA ordinal");
    }
    if (tensors[i].device != d) {
      return InvalidArgument("tensors on different devices (" + std::to_string(d) + " and " +
                             std::to_string(tensors[i].device) +
                             "): a unit's tensors must all be on the host or on one CUDA device");
    }
  }
  return d;
}

Status CheckJobId(const std::string& id) {
  if (id.empty() || id.size() > 128) return InvalidArgument("job id must be 1..128 bytes");
  for (char c : id) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == ':' || c == '-';
    if (!ok) return InvalidArgument("job id '" + id + "' has a character outside [A-Za-z0-9._:-]");
  }
  return Status::Ok();
}

Status CheckUnitName(const std::string& name) {
  if (name.empty() || name.size() > 256) return InvalidArgument("unit name must be 1..256 bytes");
  for (char c : name) {
    if (c < 0x20 || c > 0x7e) {
      return InvalidArgument("unit name '" + name + "' has a non-printable or non-ASCII byte");
    }
  }
  return Status::Ok();
}

StatusOr<UnitHandle> UnitRegistry::Add(const std::string& name,
                                       const std::vector<TensorRef>& tensors, uint32_t shard_index,
                                       uint32_t shard_count) {
  GNMR_RETURN_IF_ERROR(CheckUnitName(name));
  if (names_.count(name)) return Status(StatusCode::kAlreadyExists, "unit '" + name + "' exists");
  if (tensors.empty()) return InvalidArgument("unit '" + name + "' has no tensors");
  StatusOr<int32_t> device = UnitDevice(tensors.data(), tensors.size());
  if (!device.ok())
    return Status(device.status().code(), "unit '" + name + "': " + device.status().message());
  const Status s = CheckTensorsOn(*device, tensors.data(), tensors.size());
  if (!s.ok()) return Status(s.code(), "unit '" + name + "': " + s.message());
  if (shard_count < 1 || shard_index >= shard_count) {
    return InvalidArgument("unit '" + name + "': need shard_index < shard_count");
  }
  Unit u;
  u.name = name;
  u.tensors = tensors;
  u.numel = TotalNumel(tensors.data(), tensors.size());
  u.dtype = tensors.front().dtype;
  u.shard_index = shard_index;
  u.shard_count = shard_count;
  u.device = *device;
  units_.push_back(std::move(u));
  names_.insert(name);
  return static_cast<UnitHandle>(units_.size() - 1);
}

Status UnitRegistry::SetTensors(UnitHandle unit, const TensorRef* tensors, size_t count) {
  if (unit >= units_.size()) return InvalidArgument("unknown unit " + std::to_string(unit));
  Unit& u = units_[unit];
  if (count == 0) return InvalidArgument("unit '" + u.name + "': no tensors");
  if (tensors == nullptr) return InvalidArgument("unit '" + u.name + "': tensor list is null");
  StatusOr<int32_t> device = UnitDevice(tensors, count);
  if (!device.ok()) {
    return Status(device.status().code(), "unit '" + u.name + "': " + device.status().message());
  }
  if (*device != u.device) {
    return InvalidArgument("unit '" + u.name + "': registered on " + DeviceName(u.device) +
                           ", new tensors on " + DeviceName(*device) +
                           " (a unit cannot move between host and devices)");
  }
  Status s = CheckTensorsOn(u.device, tensors, count);
  if (!s.ok()) return Status(s.code(), "unit '" + u.name + "': " + s.message());
  if (u.device != kHostDevice) {
    // The GPU tables hold one entry per tensor: only pointers may change.
    if (count != u.tensors.size()) {
      return InvalidArgument("unit '" + u.name + "': " + std::to_string(count) +
                             " tensors, registered with " + std::to_string(u.tensors.size()) +
                             " (device units keep their layout)");
    }
    for (size_t i = 0; i < count; ++i) {
      const bool fp8 = tensors[i].dtype == DType::kFp8E4M3 || tensors[i].dtype == DType::kFp8E5M2;
      if (tensors[i].dtype != u.tensors[i].dtype || tensors[i].numel != u.tensors[i].numel ||
          tensors[i].saturation_magnitude != u.tensors[i].saturation_magnitude ||
          (fp8 && (tensors[i].scale_inv != u.tensors[i].scale_inv ||
                   tensors[i].scale_inv_ptr != u.tensors[i].scale_inv_ptr))) {
        return InvalidArgument("unit '" + u.name + "': tensor " + std::to_string(i) +
                               " changed dtype, numel, saturation_magnitude, scale_inv or "
                               "scale_inv_ptr (device units: only data pointers may change; a "
                               "scale_inv_ptr's value may)");
      }
    }
  }
  const uint64_t numel = TotalNumel(tensors, count);
  if (numel != u.numel) {
    return InvalidArgument("unit '" + u.name + "': numel " + std::to_string(numel) +
                           " differs from the registered " + std::to_string(u.numel));
  }
  u.tensors.assign(tensors, tensors + count);
  return Status::Ok();
}

const std::string& UnitRegistry::name(UnitHandle h) const {
  static const std::string kNone;
  return h < units_.size() ? units_[h].name : kNone;
}

// The wire dtype is the internal one's number.
static_assert(static_cast<int>(DType::kFp32) == v1::DTYPE_FP32 &&
              static_cast<int>(DType::kBf16) == v1::DTYPE_BF16 &&
              static_cast<int>(DType::kFp16) == v1::DTYPE_FP16 &&
              static_cast<int>(DType::kFp8E4M3) == v1::DTYPE_FP8_E4M3FN &&
              static_cast<int>(DType::kFp8E5M2) == v1::DTYPE_FP8_E5M2 && v1::DType_MAX == 5);

void UnitRegistry::FillSpecs(v1::RegisterRequest* req) const {
  for (const Unit& u : units_) {
    v1::UnitSpec* spec = req->add_units();
    spec->set_name(u.name);
    spec->set_numel(u.numel);
    spec->set_dtype(static_cast<v1::DType>(u.dtype));
    spec->set_shard_index(u.shard_index);
    spec->set_shard_count(u.shard_count);
  }
}

}  // namespace gnmr
