// Syntactic validation of requests from peers (docs/architecture.md, "The wire
// contract"): every byte is untrusted. These checks need no job state;
// Job::Register and the aggregator check the rest. Each failure names the field
// and the limit.
#pragma once

#include <string>

#include "common/unit_name.h"
#include "gnmr/status.h"
#include "gnmr/v1/gnmr.pb.h"

namespace gnmr {

struct RequestLimits {
  uint32_t max_world_size = 65536;
  uint32_t max_units_per_rank = 1000000;
  size_t max_name_bytes = kMaxUnitNameBytes;
  size_t max_job_id_bytes = 128;
  size_t max_token_bytes = 4096;
};

// 1..128 bytes of [A-Za-z0-9._:-].
Status ValidateJobId(const std::string& job_id, const RequestLimits& limits = {});
// 1..256 bytes of printable ASCII (common/unit_name.h).
Status ValidateUnitName(const std::string& name, const RequestLimits& limits = {});
Status ValidateRegister(const v1::RegisterRequest& req, const RequestLimits& limits = {});

}  // namespace gnmr
