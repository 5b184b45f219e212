// `gnmrctl units` (a job's units: GNMR, history, state) and `gnmrctl
// release` (an operator ends a unit's recovery early).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>

#include "common/text.h"
#include "controller_io/wire_names.h"
#include "tools/gnmrctl/admin_client.h"
#include "tools/gnmrctl/commands.h"
#include "tools/gnmrctl/table.h"

namespace gnmr {
namespace cli {
namespace {

using Align = Table::Align;

// The daemon's --top order: GNMR descending (NaN counts as 0), then id.
void SortTop(std::vector<v1::UnitInfo>* units) {
  auto key = [](const v1::UnitInfo& u) { return std::isfinite(u.gnmr()) ? u.gnmr() : 0.0; };
  std::stable_sort(units->begin(), units->end(), [&](const v1::UnitInfo& a, const v1::UnitInfo& b) {
    if (key(a) != key(b)) return key(a) > key(b);
    return a.unit_id() < b.unit_id();
  });
}

void PrintUnits(const v1::ListUnitsResponse& resp) {
  Table t({{"UNIT"},
           {"STATE"},
           {"GNMR", Align::kRight},
           {"DELTA", Align::kRight},
           {"NORM", Align::kRight},
           {"MU", Align::kRight},
           {"ACTION"},
           {"SINCE", Align::kRight},
           {"UNTIL", Align::kRight},
           {"LAST STEP", Align::kRight}});
  for (const v1::UnitInfo& u : resp.units()) {
    const bool recovering = u.state() == v1::UNIT_STATE_RECOVERY;
    t.AddRow({EscapeForLog(u.name()), UnitStateName(u.state()), FormatNumber(u.gnmr()),
              FormatNumber(u.delta()), FormatNumber(u.norm()), FormatNumber(u.mu()),
              ActionText(u.action()), recovering ? std::to_string(u.since()) : "-",
              recovering ? std::to_string(u.until()) : "-", FormatStep(u.last_step())});
  }
  std::fputs(t.Render().c_str(), stdout);
}

}  // namespace

int UnitsCommand(int argc, char** argv) {
  AdminCommand cmd("units", "gnmrctl units --job J [--top N] [--state STATE] [options]",
                   "Lists a job's units: state (warmup, active, recovery), last GNMR and\n"
                   "Delta-GNMR, last norm, historical mean mu, action, and for units in\n"
                   "recovery the first step in force (SINCE) and the first step no longer\n"
                   "in force (UNTIL). Units come in id order; with --top, the N with the\n"
                   "highest GNMR first.");
  cmd.AddJobFlag();
  std::string top_text, state;
  cmd.flags().AddString("top", "N", "only the N units with the highest last GNMR", &top_text);
  cmd.flags().AddString("state", "STATE", "only units in this state: recovery, warmup or active",
                        &state);
  if (auto rc = cmd.Start(argc, argv)) return *rc;
  int64_t top = 0;
  if (!top_text.empty()) {
    StatusOr<int64_t> n = ParseIntFlag("top", top_text, 1, std::numeric_limits<uint32_t>::max());
    if (!n.ok()) return cmd.Usage(n.status().message());
    top = *n;
  }
  if (!state.empty() && state != "recovery" && state != "warmup" && state != "active") {
    return cmd.Usage("--state '" + state + "': expected recovery, warmup or active");
  }

  v1::ListUnitsRequest req;
  req.set_job_id(cmd.job());
  // With --state the top N are chosen among the matching units, here.
  req.set_top(state.empty() ? static_cast<uint32_t>(top) : 0);
  v1::ListUnitsResponse resp;
  const grpc::Status g = cmd.client().stub().ListUnits(cmd.client().Context().get(), req, &resp);
  if (!g.ok()) return cmd.client().Fail(g);
  if (!state.empty()) {
    std::vector<v1::UnitInfo> kept;
    for (v1::UnitInfo& u : *resp.mutable_units()) {
      if (UnitStateName(u.state()) == state) kept.push_back(std::move(u));
    }
    if (top > 0) {
      SortTop(&kept);
      if (kept.size() > static_cast<size_t>(top)) kept.resize(static_cast<size_t>(top));
    }
    resp.clear_units();
    for (v1::UnitInfo& u : kept) *resp.add_units() = std::move(u);
  }
  if (cmd.json()) {
    PrintJson(resp);
  } else {
    PrintUnits(resp);
  }
  return kExitOk;
}

int ReleaseCommand(int argc, char** argv) {
  AdminCommand cmd("release", "gnmrctl release --job J --unit U [options]",
                   "Ends the recovery of one unit now (an operator override; the\n"
                   "controller may admit it again if it still triggers). Needs the\n"
                   "admin token (--admin-token, --admin-token-file or\n"
                   "$GNMR_ADMIN_TOKEN), or the Unix socket of a daemon without one.");
  cmd.AddJobFlag();
  std::string unit;
  cmd.flags().AddString("unit", "U", "the unit's name (required)", &unit);
  if (auto rc = cmd.Start(argc, argv)) return *rc;
  if (unit.empty()) return cmd.Usage("--unit is required");
  v1::ReleaseUnitRequest req;
  req.set_job_id(cmd.job());
  req.set_unit(unit);
  v1::ReleaseUnitResponse resp;
  const grpc::Status g =
      cmd.client().stub().ReleaseUnit(cmd.client().Context(true).get(), req, &resp);
  if (!g.ok()) return cmd.client().Fail(g);
  if (cmd.json()) {
    PrintJson(req);
  } else {
    std::printf("job %s: released unit %s\n", cmd.job().c_str(), unit.c_str());
  }
  return kExitOk;
}

}  // namespace cli
}  // namespace gnmr
