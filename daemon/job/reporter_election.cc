#include "daemon/job/reporter_election.h"

#include <algorithm>

namespace gnmr {

void ReporterElection::SetMode(ReportMode mode, Changes* changes) {
  if (mode == mode_) return;
  mode_ = mode;
  ElectAll(changes);
}

void ReporterElection::OnRegistered(uint32_t rank, bool can_stand_by, Changes* changes) {
  auto [it, inserted] = ranks_.try_emplace(rank);
  RankState& st = it->second;
  st.can_stand_by = can_stand_by;
  st.live = false;  // until its stream attaches (SetLive): registering is not reporting
  st.passed_over = false;
  if (inserted) {  // reports until elected otherwise, like a rank not told
    reporters_.insert(std::lower_bound(reporters_.begin(), reporters_.end(), rank), rank);
  }
  // The group it is in, and the one it left if it registered other slots.
  const uint32_t group = topology_->group_of(rank);
  if (st.group != JobTopology::kNoGroup && st.group != group) Elect(st.group, changes);
  st.group = group;
  if (group != JobTopology::kNoGroup) Elect(group, changes);
}

void ReporterElection::SetLive(uint32_t rank, bool live, Changes* changes) {
  auto it = ranks_.find(rank);
  if (it == ranks_.end() || it->second.live == live) return;
  it->second.live = live;
  const uint32_t group = topology_->group_of(rank);
  if (group != JobTopology::kNoGroup) Elect(group, changes);
}

std::optional<uint32_t> ReporterElection::PassOver(uint32_t rank, Changes* changes) {
  auto it = ranks_.find(rank);
  const uint32_t group = topology_->group_of(rank);
  if (mode_ != ReportMode::kOnePerShard || it == ranks_.end() || group == JobTopology::kNoGroup) {
    return std::nullopt;
  }
  it->second.passed_over = true;
  const size_t before = changes->size();
  Elect(group, changes);
  for (size_t i = before; i < changes->size(); ++i) {
    if (!(*changes)[i].standby) return (*changes)[i].rank;  // it took over
  }
  return std::nullopt;
}

bool ReporterElection::standby(uint32_t rank) const {
  auto it = ranks_.find(rank);
  return it != ranks_.end() && it->second.can_stand_by && !it->second.reporting;
}

bool ReporterElection::can_stand_by(uint32_t rank) const {
  auto it = ranks_.find(rank);
  return it != ranks_.end() && it->second.can_stand_by;
}

void ReporterElection::SetReporting(uint32_t rank, RankState& st, bool reporting,
                                    Changes* changes) {
  if (st.reporting == reporting) return;
  st.reporting = reporting;
  auto pos = std::lower_bound(reporters_.begin(), reporters_.end(), rank);
  if (reporting) {
    reporters_.insert(pos, rank);
  } else {
    reporters_.erase(pos);
  }
  changes->push_back({rank, !reporting});
}

void ReporterElection::ElectAll(Changes* changes) {
  for (uint32_t g = 0; g < topology_->num_groups(); ++g) Elect(g, changes);
}

void ReporterElection::Elect(uint32_t group, Changes* changes) {
  const std::vector<uint32_t>& members = topology_->group_members(group);
  if (members.empty()) return;
  // Ranks the election knows (a rank the topology has but OnRegistered
  // has not seen yet keeps reporting until it is).
  auto state = [this](uint32_t rank) -> RankState* {
    auto it = ranks_.find(rank);
    return it == ranks_.end() ? nullptr : &it->second;
  };
  if (mode_ == ReportMode::kAll) {
    for (uint32_t r : members) {
      if (RankState* st = state(r)) SetReporting(r, *st, true, changes);
    }
    return;
  }
  // One pass over the group: what the rules below choose from.
  bool legacy_live = false;    // a live rank that cannot stand by and was not passed over
  bool legacy_passed = false;  // ... one that was passed over
  int64_t eligible = -1;       // the lowest live rank not passed over
  int64_t live = -1;           // the lowest live rank
  int64_t reporting = -1;      // the highest rank reporting now
  for (uint32_t r : members) {
    const RankState* st = state(r);
    if (!st) continue;
    if (st->reporting) reporting = r;
    if (!st->can_stand_by) {
      if (st->live) (st->passed_over ? legacy_passed : legacy_live) = true;
      continue;
    }
    if (st->live && live < 0) live = r;
    if (st->live && !st->passed_over && eligible < 0) eligible = r;
  }
  auto forgive = [&](bool can_stand_by) {
    for (uint32_t r : members) {
      RankState* st = state(r);
      if (st && st->can_stand_by == can_stand_by && st->live) st->passed_over = false;
    }
  };
  if (!legacy_live && live < 0 && legacy_passed) {  // only silent old clients: forgive them
    forgive(false);
    legacy_live = true;
  }
  int64_t chosen = -1;  // a live rank that cannot stand by reports for the group anyway
  if (!legacy_live) {
    if (eligible >= 0) {
      chosen = eligible;
    } else if (live >= 0) {  // every live rank was passed over: forgive them
      chosen = live;
      forgive(true);
    }
  }
  // No live rank covers the group: keep one reporter to wait for (the step
  // closes at its deadline), as `report: all` waits for a rank whose stream
  // ended.
  int64_t wait_for = -1;
  if (!legacy_live && chosen < 0) {
    wait_for = reporting >= 0 ? reporting : (state(members.front()) ? members.front() : -1);
  }
  for (uint32_t r : members) {
    RankState* st = state(r);
    if (!st) continue;
    const int64_t rank = static_cast<int64_t>(r);
    // A rank that cannot stand by reports whenever it is live; the steps
    // wait for it unless it was passed over (or is not attached: a
    // registration alone never holds the group's steps).
    const bool legacy_reports = !st->can_stand_by && st->live && !st->passed_over;
    SetReporting(r, *st, rank == chosen || rank == wait_for || legacy_reports, changes);
  }
}

}  // namespace gnmr
