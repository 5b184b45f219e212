#include "client/src/unit_registry.h"

#include "kernels/cpu/cpu_stats.h"

namespace gnmr {
namespace {

uint64_t TotalNumel(const TensorRef* tensors, size_t count) {
  uint64_t n = 0;
  for (size_t i = 0; i < count; ++i) n += tensors[i].numel;
  return n;
}

}  // namespace

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
                                       const std::vector<TensorRef>& tensors,
                                       uint32_t shard_index, uint32_t shard_count) {
  Status s = CheckUnitName(name);
  if (!s.ok()) return s;
  if (names_.count(name)) return Status(StatusCode::kAlreadyExists, "unit '" + name + "' exists");
  if (tensors.empty()) return InvalidArgument("unit '" + name + "' has no tensors");
  s = cpu::CheckTensors(tensors.data(), tensors.size());
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
  units_.push_back(std::move(u));
  names_.insert(name);
  return static_cast<UnitHandle>(units_.size() - 1);
}

Status UnitRegistry::SetTensors(UnitHandle unit, const TensorRef* tensors, size_t count) {
  if (unit >= units_.size()) return InvalidArgument("unknown unit " + std::to_string(unit));
  Unit& u = units_[unit];
  if (count == 0) return InvalidArgument("unit '" + u.name + "': no tensors");
  Status s = cpu::CheckTensors(tensors, count);
  if (!s.ok()) return Status(s.code(), "unit '" + u.name + "': " + s.message());
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
