// Test helper: norm and mu per unit name, as a daemon reports them for one
// job (Admin.ListUnits over `channel`); empty if the call fails.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <utility>

#include <grpcpp/grpcpp.h>

#include "gnmr/v1/gnmr.grpc.pb.h"

namespace gnmr::testing {

inline std::map<std::string, std::pair<double, double>> UnitNormsAndMeans(
    const std::shared_ptr<grpc::Channel>& channel, const std::string& job) {
  auto admin = v1::Admin::NewStub(channel);
  grpc::ClientContext ctx;
  v1::ListUnitsRequest req;
  req.set_job_id(job);
  v1::ListUnitsResponse resp;
  std::map<std::string, std::pair<double, double>> out;
  if (!admin->ListUnits(&ctx, req, &resp).ok()) return out;
  for (const v1::UnitInfo& u : resp.units()) out[u.name()] = {u.norm(), u.mu()};
  return out;
}

}  // namespace gnmr::testing
