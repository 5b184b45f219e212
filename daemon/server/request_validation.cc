#include "daemon/server/request_validation.h"

#include "common/unit_name.h"

namespace gnmr {

Status ValidateJobId(const std::string& job_id, const RequestLimits& limits) {
  if (job_id.empty()) return InvalidArgument("job_id is empty");
  if (job_id.size() > limits.max_job_id_bytes) {
    return InvalidArgument("job_id is longer than " + std::to_string(limits.max_job_id_bytes) +
                           " bytes");
  }
  for (char c : job_id) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == ':' || c == '-';
    if (!ok) return InvalidArgument("job_id may only contain [A-Za-z0-9._:-]");
  }
  return Status::Ok();
}

Status ValidateUnitName(const std::string& name, const RequestLimits& limits) {
  return CheckUnitName(name, limits.max_name_bytes);
}

Status ValidateRegister(const v1::RegisterRequest& req, const RequestLimits& limits) {
  GNMR_RETURN_IF_ERROR(ValidateJobId(req.job_id(), limits));
  if (req.world_size() == 0 || req.world_size() > limits.max_world_size) {
    return InvalidArgument("world_size must be in [1, " + std::to_string(limits.max_world_size) +
                           "], got " + std::to_string(req.world_size()));
  }
  if (req.rank() >= req.world_size()) {
    return InvalidArgument("rank " + std::to_string(req.rank()) + " is not below world_size " +
                           std::to_string(req.world_size()));
  }
  if (static_cast<uint32_t>(req.units_size()) > limits.max_units_per_rank) {
    return InvalidArgument("more than " + std::to_string(limits.max_units_per_rank) +
                           " units in one registration");
  }
  if (req.token().size() > limits.max_token_bytes) return InvalidArgument("token is too long");
  if (req.client_version().size() > 256) return InvalidArgument("client_version is too long");
  for (int i = 0; i < req.units_size(); ++i) {
    const v1::UnitSpec& u = req.units(i);
    const Status s = ValidateUnitName(u.name(), limits);
    if (!s.ok()) return InvalidArgument("units[" + std::to_string(i) + "]: " + s.message());
    if (!v1::DType_IsValid(u.dtype())) {
      return InvalidArgument("units[" + std::to_string(i) + "]: unknown dtype " +
                             std::to_string(u.dtype()));
    }
  }
  return Status::Ok();
}

}  // namespace gnmr
