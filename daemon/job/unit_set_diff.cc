#include "daemon/job/unit_set_diff.h"

#include <unordered_map>

namespace gnmr {
namespace {

uint32_t Shards(const RankUnitSpec& u) { return u.shard_count == 0 ? 1 : u.shard_count; }

std::string ShardOf(const RankUnitSpec& u) {
  return std::to_string(u.shard_index) + "/" + std::to_string(Shards(u));
}

}  // namespace

std::string DescribeUnitSetChange(const std::vector<RankUnitSpec>& before,
                                  const std::vector<RankUnitSpec>& now, size_t max_items) {
  std::unordered_map<std::string, const RankUnitSpec*> old_by_name;
  old_by_name.reserve(before.size());
  for (const RankUnitSpec& u : before) old_by_name.emplace(u.name, &u);

  std::vector<std::string> items;
  size_t total = 0;
  auto add = [&](std::string item) {
    if (items.size() < max_items) items.push_back(std::move(item));
    ++total;
  };
  size_t matched = 0;
  for (const RankUnitSpec& u : now) {
    auto it = old_by_name.find(u.name);
    if (it == old_by_name.end()) {
      add("unit '" + u.name + "' is new");
      continue;
    }
    ++matched;
    const RankUnitSpec& o = *it->second;
    if (u.shard_index != o.shard_index || Shards(u) != Shards(o)) {
      add("unit '" + u.name + "' shard " + ShardOf(u) + " vs " + ShardOf(o) + " before");
    } else if (u.numel != 0 && o.numel != 0 && u.numel != o.numel) {
      add("unit '" + u.name + "' numel " + std::to_string(u.numel) + " vs " +
          std::to_string(o.numel) + " before");
    }
  }
  if (matched < before.size()) {
    std::unordered_map<std::string, bool> in_now;
    in_now.reserve(now.size());
    for (const RankUnitSpec& u : now) in_now.emplace(u.name, true);
    for (const RankUnitSpec& o : before) {
      if (!in_now.count(o.name)) add("unit '" + o.name + "' is missing");
    }
  }
  std::string out;
  for (const std::string& item : items) {
    if (!out.empty()) out += "; ";
    out += item;
  }
  if (total > items.size()) {
    out += "; and " + std::to_string(total - items.size()) + " more";
  }
  return out;
}

}  // namespace gnmr
