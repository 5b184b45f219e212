#include "daemon/topology/topology.h"

#include <algorithm>
#include <string_view>
#include <unordered_set>

namespace gnmr {

Status JobTopology::ValidateSpecs(const std::vector<RankUnitSpec>& units) const {
  std::unordered_set<std::string_view> seen;  // views: no copy of every name
  for (size_t i = 0; i < units.size(); ++i) {
    const RankUnitSpec& u = units[i];
    // Built only for an error: a registration of 50,000 valid units makes none.
    auto where = [&] { return "unit " + std::to_string(i) + " ('" + u.name + "')"; };
    if (u.name.empty()) return InvalidArgument("unit " + std::to_string(i) + " has an empty name");
    if (!seen.insert(u.name).second) {
      return InvalidArgument(where() + " is listed twice");
    }
    const uint32_t shards = u.shard_count == 0 ? 1 : u.shard_count;
    if (shards > limits_.max_shards) {
      return InvalidArgument(where() + " has shard_count " + std::to_string(shards) + " > " +
                             std::to_string(limits_.max_shards));
    }
    if (u.shard_index >= shards) {
      return InvalidArgument(where() + " has shard_index " + std::to_string(u.shard_index) +
                             " >= shard_count " + std::to_string(shards));
    }
  }
  return Status::Ok();
}

Status JobTopology::CheckRank(const std::vector<RankUnitSpec>& units,
                              std::vector<std::string_view>* new_units, uint32_t rank,
                              Growth* growth) const {
  GNMR_RETURN_IF_ERROR(ValidateSpecs(units));
  size_t fresh = 0;
  Growth g;
  for (size_t i = 0; i < units.size(); ++i) {
    const RankUnitSpec& u = units[i];
    const uint32_t shards = u.shard_count == 0 ? 1 : u.shard_count;
    auto it = ids_.find(u.name);
    if (it == ids_.end()) {
      ++fresh;
      g.name_bytes += u.name.size();
      g.slots += shards;
      if (new_units) new_units->push_back(u.name);
      continue;
    }
    auto where = [&] { return "unit " + std::to_string(i) + " ('" + u.name + "')"; };
    const UnitLayout& l = units_[it->second];
    if (l.shard_count != shards) {
      return Status(StatusCode::kFailedPrecondition,
                    where() + " has shard_count " + std::to_string(shards) +
                        " but was registered with " + std::to_string(l.shard_count) +
                        "; a different model needs a new job id");
    }
    const uint64_t known = l.shard_numel[u.shard_index];
    if (known != 0 && u.numel != 0 && known != u.numel) {
      return Status(StatusCode::kFailedPrecondition,
                    where() + " shard " + std::to_string(u.shard_index) + "/" +
                        std::to_string(shards) + " has numel " + std::to_string(u.numel) +
                        " but was registered with " + std::to_string(known) +
                        "; a different model needs a new job id");
    }
  }
  if (units_.size() + fresh > limits_.max_units) {
    return Status(StatusCode::kResourceExhausted, "job would have more than " +
                                                      std::to_string(limits_.max_units) +
                                                      " units (max_units_per_job)");
  }
  if (growth) {
    g.units = fresh;
    const RankLayout* r = ranks_.Find(rank);
    const uint64_t before = r == nullptr ? 0 : r->slots->entries.size();
    g.rank_units = static_cast<int64_t>(units.size()) - static_cast<int64_t>(before);
    g.ranks = r == nullptr ? 1 : 0;
    *growth = g;
  }
  return Status::Ok();
}

Status JobTopology::RegisterRank(uint32_t rank, const std::vector<RankUnitSpec>& units,
                                 std::vector<uint32_t>* unit_ids,
                                 std::vector<std::string>* new_units) {
  // Pass 1: validate everything against the current layout.
  GNMR_RETURN_IF_ERROR(CheckRank(units, nullptr));

  // Pass 2: apply.
  auto layout = std::make_shared<SlotLayout>();
  layout->entries.reserve(units.size());
  unit_ids->clear();
  for (const RankUnitSpec& u : units) {
    const uint32_t shards = u.shard_count == 0 ? 1 : u.shard_count;
    auto it = ids_.find(u.name);
    uint32_t id;
    if (it == ids_.end()) {
      id = static_cast<uint32_t>(units_.size());
      UnitLayout l;
      l.name = u.name;
      l.shard_count = shards;
      l.first_slot = static_cast<uint32_t>(num_slots_);
      l.shard_numel.assign(shards, 0);
      num_slots_ += shards;
      slot_unit_.resize(num_slots_, id);
      name_bytes_ += u.name.size();
      units_.push_back(std::move(l));
      ids_.emplace(u.name, id);
      new_units->push_back(u.name);
    } else {
      id = it->second;
    }
    UnitLayout& l = units_[id];
    if (u.numel != 0) l.shard_numel[u.shard_index] = u.numel;
    const uint32_t slot = l.first_slot + u.shard_index;
    layout->entries.push_back({id, slot});
    unit_ids->push_back(id);
  }
  layout->by_unit = layout->entries;
  std::sort(layout->by_unit.begin(), layout->by_unit.end(),
            [](const RankEntry& a, const RankEntry& b) { return a.unit_id < b.unit_id; });
  const bool new_rank = ranks_.Find(rank) == nullptr;
  RankLayout& held = ranks_[rank];
  if (new_rank) {
    rank_list_.insert(std::lower_bound(rank_list_.begin(), rank_list_.end(), rank), rank);
  }
  holders_.resize(num_slots_, 0);
  if (!new_rank) {
    for (const RankEntry& e : held.slots->entries) --holders_[e.slot];
  }
  for (const RankEntry& e : layout->entries) ++holders_[e.slot];
  rank_units_ = rank_units_ - (new_rank ? 0 : held.slots->entries.size()) + layout->entries.size();
  // A rank registering again with the same slots stays in its group.
  auto same_slots = [](const std::vector<RankEntry>& a, const std::vector<RankEntry>& b) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i) {
      if (a[i].slot != b[i].slot) return false;
    }
    return true;
  };
  const bool same_group = !new_rank && same_slots(held.slots->by_unit, layout->by_unit);
  if (!new_rank && !same_group) LeaveGroup(rank, held.group);
  uint32_t group = same_group ? held.group : kNoGroup;
  if (!same_group) {
    const uint64_t hash = SlotSetHash(layout->by_unit);
    for (auto [it, end] = groups_by_hash_.equal_range(hash); it != end; ++it) {
      const std::vector<uint32_t>& members = groups_[it->second];
      if (!members.empty() &&
          same_slots(ranks_.Find(members.front())->slots->by_unit, layout->by_unit)) {
        group = it->second;
        break;
      }
    }
    if (group == kNoGroup) {
      group = static_cast<uint32_t>(groups_.size());
      groups_.emplace_back();
      groups_by_hash_.emplace(hash, group);
    }
    std::vector<uint32_t>& members = groups_[group];
    members.insert(std::lower_bound(members.begin(), members.end(), rank), rank);
  }
  held.group = group;
  if (!new_rank) ReleaseLayout(held.slots.get());
  held.slots = SharedOrOwn(rank, group, std::move(layout));
  HoldLayout(held.slots.get());
  CountUnitsNotHeld();
  return Status::Ok();
}

// The layout of another member of `group` when it has the same entries in
// the same order (the same slot set is already known: same group), else
// `own`. One comparison, O(the rank's units), at registration only.
std::shared_ptr<const JobTopology::SlotLayout> JobTopology::SharedOrOwn(
    uint32_t rank, uint32_t group, std::shared_ptr<const SlotLayout> own) const {
  const std::vector<uint32_t>& members = groups_[group];
  auto other = std::find_if(members.begin(), members.end(), [&](uint32_t m) { return m != rank; });
  if (other == members.end()) return own;
  const std::shared_ptr<const SlotLayout>& theirs = ranks_.Find(*other)->slots;
  auto same_entry = [](const RankEntry& x, const RankEntry& y) {
    return x.unit_id == y.unit_id && x.slot == y.slot;
  };
  const bool same =
      theirs->entries.size() == own->entries.size() &&
      std::equal(theirs->entries.begin(), theirs->entries.end(), own->entries.begin(), same_entry);
  return same ? theirs : own;
}

void JobTopology::HoldLayout(const SlotLayout* layout) {
  if (++layout_refs_[layout] == 1) distinct_layout_entries_ += layout->entries.size();
}

void JobTopology::ReleaseLayout(const SlotLayout* layout) {
  auto it = layout_refs_.find(layout);
  if (it == layout_refs_.end()) return;  // cannot happen: every held layout is counted
  if (--it->second == 0) {
    distinct_layout_entries_ -= layout->entries.size();
    layout_refs_.erase(it);
  }
}

uint64_t JobTopology::SlotSetHash(const std::vector<RankEntry>& by_unit) {
  uint64_t h = 14695981039346656037ull;  // FNV-1a over the slots, unit id order
  for (const RankEntry& e : by_unit) h = (h ^ e.slot) * 1099511628211ull;
  return h ^ by_unit.size();
}

void JobTopology::LeaveGroup(uint32_t rank, uint32_t group) {
  std::vector<uint32_t>& members = groups_[group];
  members.erase(std::find(members.begin(), members.end(), rank));
  if (!members.empty()) return;
  for (auto it = groups_by_hash_.begin(); it != groups_by_hash_.end(); ++it) {  // rare
    if (it->second == group) {
      groups_by_hash_.erase(it);
      return;
    }
  }
}

uint32_t JobTopology::group_of(uint32_t rank) const {
  const RankLayout* r = ranks_.Find(rank);
  return r == nullptr ? kNoGroup : r->group;
}

void JobTopology::CountUnitsNotHeld() {
  // O(slots), at registration only: step aggregation reads the count.
  units_not_held_ = 0;
  for (const UnitLayout& u : units_) {
    for (uint32_t k = 0; k < u.shard_count; ++k) {
      if (holders_[u.first_slot + k] == 0) {
        ++units_not_held_;
        break;
      }
    }
  }
}

Status JobTopology::RestoreUnit(const std::string& name, uint32_t shard_count,
                                const std::vector<uint64_t>& shard_numel) {
  if (units_.size() >= limits_.max_units) {
    return Status(StatusCode::kResourceExhausted,
                  "job would have more than " + std::to_string(limits_.max_units) + " units");
  }
  if (name.empty() || ids_.count(name) || shard_count == 0 || shard_count > limits_.max_shards ||
      shard_numel.size() != shard_count) {
    return DataLoss("invalid unit layout for '" + name + "' in job state");
  }
  UnitLayout l;
  l.name = name;
  l.shard_count = shard_count;
  l.first_slot = static_cast<uint32_t>(num_slots_);
  l.shard_numel = shard_numel;
  num_slots_ += shard_count;
  slot_unit_.resize(num_slots_, static_cast<uint32_t>(units_.size()));
  name_bytes_ += name.size();
  ids_.emplace(name, static_cast<uint32_t>(units_.size()));
  units_.push_back(std::move(l));
  holders_.resize(num_slots_, 0);
  ++units_not_held_;  // no rank holds a restored unit until one registers
  return Status::Ok();
}

int64_t JobTopology::SlotOf(uint32_t rank, size_t position, uint32_t unit_id) const {
  const RankLayout* r = ranks_.Find(rank);
  if (r == nullptr) return -1;
  const SlotLayout& l = *r->slots;
  if (position < l.entries.size() && l.entries[position].unit_id == unit_id) {
    return l.entries[position].slot;
  }
  auto it = std::lower_bound(l.by_unit.begin(), l.by_unit.end(), unit_id,
                             [](const RankEntry& e, uint32_t id) { return e.unit_id < id; });
  return it == l.by_unit.end() || it->unit_id != unit_id ? -1 : static_cast<int64_t>(it->slot);
}

int64_t JobTopology::SlotsOfIncreasing(uint32_t rank, const uint32_t* ids, size_t n,
                                       uint32_t* slots) const {
  const RankLayout* r = ranks_.Find(rank);
  if (r == nullptr) return n == 0 ? -1 : 0;
  const std::vector<RankEntry>& by_unit = r->slots->by_unit;
  auto it = by_unit.begin();
  for (size_t i = 0; i < n; ++i) {
    it = std::lower_bound(it, by_unit.end(), ids[i],
                          [](const RankEntry& e, uint32_t id) { return e.unit_id < id; });
    if (it == by_unit.end() || it->unit_id != ids[i]) return static_cast<int64_t>(i);
    slots[i] = it->slot;
  }
  return -1;
}

bool JobTopology::HasRank(uint32_t rank) const { return ranks_.Find(rank) != nullptr; }

std::vector<RankUnitSpec> JobTopology::SpecsOfRank(uint32_t rank) const {
  std::vector<RankUnitSpec> out;
  const RankLayout* r = ranks_.Find(rank);
  if (r == nullptr) return out;
  out.reserve(r->slots->entries.size());
  for (const RankEntry& e : r->slots->entries) {
    const UnitLayout& l = units_[e.unit_id];
    const uint32_t index = e.slot - l.first_slot;
    out.push_back({l.name, l.shard_numel[index], index, l.shard_count});
  }
  return out;
}

std::vector<uint32_t> JobTopology::UnitsOfRank(uint32_t rank) const {
  std::vector<uint32_t> out;
  const RankLayout* r = ranks_.Find(rank);
  if (r == nullptr) return out;
  for (const RankEntry& e : r->slots->entries) out.push_back(e.unit_id);
  return out;
}

}  // namespace gnmr
