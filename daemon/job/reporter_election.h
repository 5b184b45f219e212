// ReporterElection: which ranks of a job send statistics (docs/scale.md,
// "Reporter election").
//
// Data-parallel replicas hold identical gradients after the all-reduce, so
// with `report: one_per_shard` one rank of each replica group (ranks that
// hold the same slots, topology.h) reports and the others stand by: they
// compute their statistics as before (the same-step guard needs them) and
// keep the last few reports, to send when they are elected.
//
// Design notes
// - Live means attached: a rank is live from its stream's attach to its
//   end, not from its registration (a rank that registered and never
//   attached must not hold its group's steps; SetLive).
// - The reporter of a group is its lowest-numbered eligible rank: one that
//   can stand by, is live, and has not been passed over for a missed
//   deadline since it registered. The choice depends only on the ranks'
//   states, not on the order of events, so every daemon picks the same
//   rank for the same job state.
// - A rank that cannot stand by (a client before election, or one that
//   does not say) reports whenever it runs; while one is live and not
//   passed over, no other rank of the group needs to. Silent (passed over)
//   or not attached, it is not waited for, and a replica that can stand by
//   reports for the group.
// - A silent reporter is passed over whatever its kind: the job opens a
//   step on a standby's ack even when no report came (StepAggregator::
//   Announce), so the step's deadline runs and PassOver hands the group to
//   the next replica.
// - A group with no eligible rank keeps one reporter anyway: first a live
//   rank passed over before (the pass-overs are forgiven), else the rank
//   reporting now, else the lowest. Waiting for a rank whose stream ended is
//   what `report: all` does for every rank: the step closes at its deadline.
// - Every change is returned as the ranks whose role flipped, so the job
//   tells exactly those ranks; reporters() lists the ranks the step
//   aggregator waits for.
// - Pure: no I/O, no locks (the job's lock serialises calls).
#pragma once

#include <cstdint>
#include <optional>
#include <unordered_map>
#include <vector>

#include "daemon/topology/topology.h"
#include "gnmr/config.h"

namespace gnmr {

class ReporterElection {
 public:
  struct RoleChange {
    uint32_t rank = 0;
    bool standby = false;  // the rank's new role
  };
  using Changes = std::vector<RoleChange>;

  explicit ReporterElection(const JobTopology* topology) : topology_(topology) {}

  ReportMode mode() const { return mode_; }
  void SetMode(ReportMode mode, Changes* changes);

  // `rank` registered (again; its topology is up to date): no longer passed
  // over, and not live until its stream attaches (SetLive).
  void OnRegistered(uint32_t rank, bool can_stand_by, Changes* changes);
  // `rank`'s stream attached (live) or ended (not live).
  void SetLive(uint32_t rank, bool live, Changes* changes);
  // `rank`, a reporter (of either kind), missed a step's deadline: another
  // eligible replica of its group takes over, if there is one. Returns the
  // rank that did.
  std::optional<uint32_t> PassOver(uint32_t rank, Changes* changes);

  // Whether `rank` stands by (never for a rank that cannot).
  bool standby(uint32_t rank) const;
  bool can_stand_by(uint32_t rank) const;
  // The ranks expected to report, ascending; in `report: all`, every
  // registered rank.
  const std::vector<uint32_t>& reporters() const { return reporters_; }

 private:
  struct RankState {
    bool can_stand_by = false;
    bool live = false;  // attached
    bool passed_over = false;
    bool reporting = true;                   // the role last announced
    uint32_t group = JobTopology::kNoGroup;  // when it last registered
  };

  // Recomputes the roles of `group`'s ranks, recording each flip.
  void Elect(uint32_t group, Changes* changes);
  void SetReporting(uint32_t rank, RankState& st, bool reporting, Changes* changes);
  void ElectAll(Changes* changes);

  const JobTopology* topology_;
  ReportMode mode_ = ReportMode::kAll;
  std::unordered_map<uint32_t, RankState> ranks_;
  std::vector<uint32_t> reporters_;  // ascending
};

}  // namespace gnmr
