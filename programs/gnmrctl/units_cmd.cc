// `gnmrctl units` (a job's units: GNMR, history, state) and `gnmrctl
// release` (an operator ends a unit's recovery early).
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <string>

#include "common/text.h"
#include "controller/publish/wire_names.h"
#include "programs/gnmrctl/admin_client.h"
#include "programs/gnmrctl/commands.h"
#include "programs/gnmrctl/table.h"

namespace gnmr {
namespace cli {
namespace {

using Align = Table::Align;

// Units fetched per call when gnmrctl lists every page itself.
constexpr uint32_t kPageUnits = 5000;

void PrintUnits(const v1::ListUnitsResponse& resp) {
  Table t({{"UNIT"},
           {"STATE"},
           {"GNMR", Align::kRight},
           {"DELTA", Align::kRight},
           {"NORM", Align::kRight},
           {"MU", Align::kRight},
           {"FWD F/S/U", Align::kRight},
           {"TRIGGER"},
           {"ACTION"},
           {"SINCE", Align::kRight},
           {"UNTIL", Align::kRight},
           {"LAST STEP", Align::kRight}});
  for (const v1::UnitInfo& u : resp.units()) {
    const bool recovering = u.state() == v1::UNIT_STATE_RECOVERY;
    t.AddRow({EscapeForLog(u.name()), UnitStateName(u.state()), FormatNumber(u.gnmr()),
              FormatNumber(u.delta()), FormatNumber(u.norm()), FormatNumber(u.mu()),
              QuantizerRatiosText(u.fwd_ratio(), u.saturation_ratio(), u.underflow_ratio(),
                                  u.bwd_ratio()),
              u.trigger() == v1::TRIGGER_NONE ? "-" : TriggerText(u.trigger()),
              ActionText(u.action()), recovering ? std::to_string(u.since()) : "-",
              recovering ? std::to_string(u.until()) : "-", FormatStep(u.last_step())});
  }
  std::fputs(t.Render().c_str(), stdout);
}

}  // namespace

int UnitsCommand(int argc, char** argv) {
  AdminCommand cmd(
      "units",
      "gnmrctl units --job J [--pattern GLOB] [--state STATE] [--top N]\n"
      "                     [--limit N [--offset K]] [options]",
      "Lists a job's units: state (warmup, active, recovery), last GNMR and\n"
      "Delta-GNMR, last norm, historical mean mu, the forward channel's last\n"
      "ratios (FWD F/S/U: forward norm, saturation and underflow, vs their\n"
      "own history; - when not evaluated), TRIGGER (why a unit in recovery\n"
      "was admitted, else what its last sample triggered), action, and for\n"
      "units in recovery the first step in force (SINCE) and the first step\n"
      "no longer in force (UNTIL). Units come in id order; with --top, the N with the\n"
      "highest GNMR first. The daemon filters and pages, so a job with tens\n"
      "of thousands of units costs only what is shown: without --limit every\n"
      "matching unit is listed (fetched in pages); with --limit one page, and\n"
      "a line on stderr says how many matched and where the next page starts.");
  cmd.AddJobFlag();
  std::string state, pattern;
  int64_t top = 0, limit = 0, offset = 0;
  cmd.flags().AddString("pattern", "GLOB",
                        "only units whose name matches (`*`, `?`, `[a-z]`; quote it)", &pattern);
  cmd.flags().AddString("state", "STATE", "only units in this state: recovery, warmup or active",
                        &state);
  cmd.flags().AddInt("top", "N", "only the N matching units with the highest last GNMR", 1,
                     std::numeric_limits<uint32_t>::max(), &top);
  cmd.flags().AddInt("limit", "N", "one page of at most N units", 1,
                     std::numeric_limits<uint32_t>::max(), &limit);
  cmd.flags().AddInt("offset", "K", "the page starts after the first K units (with --limit)", 0,
                     std::numeric_limits<uint32_t>::max(), &offset);
  if (auto rc = cmd.Start(argc, argv)) return *rc;
  v1::UnitState wanted = v1::UNIT_STATE_UNSPECIFIED;
  if (state == "recovery") {
    wanted = v1::UNIT_STATE_RECOVERY;
  } else if (state == "warmup") {
    wanted = v1::UNIT_STATE_WARMUP;
  } else if (state == "active") {
    wanted = v1::UNIT_STATE_ACTIVE;
  } else if (!state.empty()) {
    return cmd.Usage("--state '" + state + "': expected recovery, warmup or active");
  }
  if (offset > 0 && limit == 0) return cmd.Usage("--offset needs --limit (one page)");

  v1::ListUnitsRequest req;
  req.set_job_id(cmd.job());
  req.set_pattern(pattern);
  req.set_state(wanted);
  req.set_top(static_cast<uint32_t>(top));
  req.set_offset(static_cast<uint32_t>(offset));
  req.set_limit(limit > 0 ? static_cast<uint32_t>(limit) : kPageUnits);
  v1::ListUnitsResponse all;
  for (;;) {
    v1::ListUnitsResponse page;
    const grpc::Status g = cmd.client().stub().ListUnits(cmd.client().Context().get(), req, &page);
    if (!g.ok()) return cmd.client().Fail(g);
    all.set_matched(page.matched());
    all.set_next_offset(page.next_offset());
    for (v1::UnitInfo& u : *page.mutable_units()) *all.add_units() = std::move(u);
    // One page with --limit; else every page. The daemon's offsets only
    // grow, and the last page says 0.
    if (limit > 0 || page.next_offset() == 0 || page.next_offset() <= req.offset()) break;
    req.set_offset(page.next_offset());
  }
  if (cmd.json()) {
    PrintJson(all);
  } else {
    PrintUnits(all);
  }
  if (limit > 0) {
    const uint64_t first = static_cast<uint64_t>(offset) + 1;
    const uint64_t last = static_cast<uint64_t>(offset) + all.units_size();
    std::string line = all.units_size() == 0
                           ? "no units at offset " + std::to_string(offset)
                           : "units " + std::to_string(first) + "-" + std::to_string(last);
    line +=
        " of " + std::to_string(top > 0 ? std::min<uint64_t>(top, all.matched()) : all.matched());
    line += all.next_offset() > 0 ? "; next page: --offset " + std::to_string(all.next_offset())
                                  : "; last page";
    std::fprintf(stderr, "%s\n", line.c_str());
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
