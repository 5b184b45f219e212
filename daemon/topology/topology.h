// JobTopology: which units a job has, how each is sharded, and which rank
// reports which shard.
//
// Built from Register requests (untrusted: every call validates and either
// applies completely or changes nothing). Each (unit, shard) pair gets a dense
// "slot" so step aggregation can use flat arrays instead of maps. Ranks
// holding the same shard are data-parallel replicas of it.
//
// Replica groups: ranks that hold exactly the same slots (the data-parallel
// replicas of one shard of the model: same tensor- and pipeline-parallel
// coordinates) form a group; reporter election (reporter_election.h) picks
// one rank per group. A rank whose slot set no other rank holds is a group
// of its own. Found at registration in O(the rank's units): a hash of the
// slot set, confirmed by comparing with a member's.
//
// Memory: a rank's layout is 16 bytes per unit it holds (its entries in
// registration order and in unit id order). Replicas of a shard register
// the same units in the same order, so a rank whose entries equal those of
// a member of its group shares that member's (immutable) layout instead of
// holding a copy: at 16,384 ranks x 1,024 units, 16 KB per rank less
// (docs/scale.md, "Memory per rank").
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/rank_table.h"
#include "gnmr/status.h"

namespace gnmr {

struct UnitLayout {
  std::string name;
  uint32_t shard_count = 1;
  uint32_t first_slot = 0;            // slots [first_slot, first_slot + shard_count)
  std::vector<uint64_t> shard_numel;  // as registered (0 = not yet seen)
};

// One unit as registered by one rank.
struct RankUnitSpec {
  std::string name;
  uint64_t numel = 0;
  uint32_t shard_index = 0;
  uint32_t shard_count = 1;
};

class JobTopology {
 public:
  struct Limits {
    uint32_t max_units = 1u << 20;
    uint32_t max_shards = 4096;
  };

  JobTopology() = default;
  explicit JobTopology(Limits limits) : limits_(limits) {}

  // The checks of one rank's unit list on its own (InvalidArgument): empty or
  // duplicate names, shard count above the limit, shard index out of range.
  Status ValidateSpecs(const std::vector<RankUnitSpec>& units) const;

  // What RegisterRank would add to the layout's size (resource_caps.h).
  struct Growth {
    uint64_t units = 0;
    uint64_t name_bytes = 0;
    uint64_t slots = 0;
    int64_t rank_units = 0;  // may be negative: a rank registering fewer
    uint64_t ranks = 0;      // 1 for a rank not registered before
  };

  // Every check RegisterRank makes, changing nothing: ValidateSpecs, then
  // against the layout (FailedPrecondition): a shard count different from
  // the one the unit was first registered with, a numel for a shard
  // different from the one registered for it before (0 = not stated:
  // never differs); then capacity (ResourceExhausted). `new_units` (may be
  // null) receives the names RegisterRank would create, in order (views
  // into `units`); `growth`
  // (may be null) what `rank`'s registration would add.
  Status CheckRank(const std::vector<RankUnitSpec>& units, std::vector<std::string_view>* new_units,
                   uint32_t rank = 0, Growth* growth = nullptr) const;

  // Registers `units` for `rank`, replacing what that rank registered before.
  // Units are created on first sight (`new_units` receives their names, in
  // order, so the caller can add them to the controller with the same ids).
  // Errors (those of CheckRank) change nothing.
  Status RegisterRank(uint32_t rank, const std::vector<RankUnitSpec>& units,
                      std::vector<uint32_t>* unit_ids, std::vector<std::string>* new_units);

  // Recreates a unit from a snapshot (ids follow call order). Ranks are not
  // restored: they register again after a daemon restart. ResourceExhausted
  // past max_units, DataLoss for an invalid layout; nothing changes then.
  Status RestoreUnit(const std::string& name, uint32_t shard_count,
                     const std::vector<uint64_t>& shard_numel);

  // Resolves entry `position` of a report from `rank` naming `unit_id` to its
  // slot; -1 if the rank did not register that unit. O(1) when the rank
  // reports units in registration order, a binary search otherwise.
  int64_t SlotOf(uint32_t rank, size_t position, uint32_t unit_id) const;

  // Resolves the strictly increasing unit ids of a sparse report from
  // `rank` to `slots` (n each), one walk over the rank's units in id order:
  // O(n log(units / n)). Returns the index of the first id the rank did not
  // register, or -1 when all resolved.
  int64_t SlotsOfIncreasing(uint32_t rank, const uint32_t* ids, size_t n, uint32_t* slots) const;

  size_t num_units() const { return units_.size(); }
  size_t num_slots() const { return num_slots_; }
  uint64_t name_bytes() const { return name_bytes_; }
  // Units registered, summed over the ranks.
  uint64_t rank_units() const { return rank_units_; }
  size_t num_ranks() const { return ranks_.size(); }
  const UnitLayout& unit(uint32_t id) const { return units_[id]; }
  const std::vector<UnitLayout>& units() const { return units_; }
  bool HasRank(uint32_t rank) const;
  std::vector<uint32_t> Ranks() const { return rank_list_; }             // ascending
  const std::vector<uint32_t>& rank_list() const { return rank_list_; }  // ascending
  // The unit a slot belongs to.
  uint32_t unit_of_slot(uint32_t slot) const { return slot_unit_[slot]; }
  // How many registered ranks hold `slot` (0: no rank can report it).
  uint32_t holders(uint32_t slot) const { return slot < holders_.size() ? holders_[slot] : 0; }
  // Units with a shard that no registered rank holds: never complete.
  size_t units_not_held() const { return units_not_held_; }
  // Calls f(slot) for every slot `rank` holds (registration order).
  template <typename F>
  void ForEachSlotOfRank(uint32_t rank, F f) const {
    const RankLayout* r = ranks_.Find(rank);
    if (r == nullptr) return;
    for (const RankEntry& e : r->slots->entries) f(e.slot);
  }
  // The replica group of `rank` (kNoGroup: not registered); ids are dense,
  // in order of first registration, and a group keeps its id while empty.
  static constexpr uint32_t kNoGroup = UINT32_MAX;
  uint32_t group_of(uint32_t rank) const;
  // The ranks of a group, ascending.
  const std::vector<uint32_t>& group_members(uint32_t group) const { return groups_[group]; }
  size_t num_groups() const { return groups_.size(); }
  // Units registered by `rank`, in its registration order.
  std::vector<uint32_t> UnitsOfRank(uint32_t rank) const;
  // What `rank` registered, in its registration order (numel: the one known
  // for its shard); empty if it has not registered.
  std::vector<RankUnitSpec> SpecsOfRank(uint32_t rank) const;
  // Distinct layouts held (ranks sharing one count once), and their
  // entries summed: what the ranks' layouts cost (the job's memory
  // footprint, resource_caps.h). Kept as ranks register: O(1).
  size_t distinct_layouts() const { return layout_refs_.size(); }
  uint64_t distinct_layout_entries() const { return distinct_layout_entries_; }

 private:
  struct RankEntry {
    uint32_t unit_id;
    uint32_t slot;
  };
  // What a rank registered; immutable once made, shared by the replicas
  // that registered the same entries in the same order.
  struct SlotLayout {
    std::vector<RankEntry> entries;  // registration order
    // The same entries in unit id order, for reports in another order: 8
    // bytes per entry (a hash map took ~48; a rank may hold 10^6 units).
    std::vector<RankEntry> by_unit;
  };
  struct RankLayout {
    std::shared_ptr<const SlotLayout> slots;
    uint32_t group = kNoGroup;
  };

  // Takes `rank` out of `group` (it registered other slots); an emptied
  // group keeps its id but is no longer found by its slot set.
  void LeaveGroup(uint32_t rank, uint32_t group);
  static uint64_t SlotSetHash(const std::vector<RankEntry>& by_unit);
  std::shared_ptr<const SlotLayout> SharedOrOwn(uint32_t rank, uint32_t group,
                                                std::shared_ptr<const SlotLayout> own) const;

  void CountUnitsNotHeld();
  // The count of ranks holding each distinct layout (ranks_ holds the
  // only references, so a layout is freed when its count reaches 0).
  void HoldLayout(const SlotLayout* layout);
  void ReleaseLayout(const SlotLayout* layout);

  Limits limits_;
  std::vector<UnitLayout> units_;
  std::unordered_map<std::string, uint32_t> ids_;
  RankTable<RankLayout> ranks_;
  std::vector<uint32_t> rank_list_;            // ascending
  std::vector<uint32_t> holders_;              // per slot: ranks holding it
  std::vector<uint32_t> slot_unit_;            // per slot: its unit
  std::vector<std::vector<uint32_t>> groups_;  // members, ascending
  std::unordered_multimap<uint64_t, uint32_t> groups_by_hash_;
  size_t units_not_held_ = 0;
  size_t num_slots_ = 0;
  uint64_t name_bytes_ = 0;
  uint64_t rank_units_ = 0;
  std::unordered_map<const SlotLayout*, uint32_t> layout_refs_;
  uint64_t distinct_layout_entries_ = 0;
};

}  // namespace gnmr
