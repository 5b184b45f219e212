// RankTable: a job's per-rank records, found by rank without hashing.
//
// A job's ranks are 0..world_size-1 (checked at Register) and every report
// and ack names its rank, so the lookup on each of them is an index, not a
// walk of a hash map's buckets and nodes (at 16,384 ranks with acks the
// map's lookups were ~7% of gnmrd's CPU: docs/perf.md). The slots grow to
// the highest rank seen (8 bytes each); a record is allocated when its rank
// first registers and never moves, so pointers to it stay valid. Iteration
// is in rank order.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

namespace gnmr {

template <typename T>
class RankTable {
 public:
  RankTable() = default;
  RankTable(RankTable&&) noexcept = default;
  RankTable& operator=(RankTable&&) noexcept = default;
  // A copy copies the records (a job's topology is copied so that an import
  // can be tried on it before it is applied).
  RankTable(const RankTable& other) : slots_(other.slots_.size()), size_(other.size_) {
    for (size_t r = 0; r < slots_.size(); ++r) {
      if (other.slots_[r]) slots_[r] = std::make_unique<T>(*other.slots_[r]);
    }
  }
  RankTable& operator=(const RankTable& other) {
    if (this != &other) *this = RankTable(other);
    return *this;
  }

  // The rank's record, or null if it has none.
  T* Find(uint32_t rank) { return rank < slots_.size() ? slots_[rank].get() : nullptr; }
  const T* Find(uint32_t rank) const { return rank < slots_.size() ? slots_[rank].get() : nullptr; }

  // The rank's record, made (value-initialized) if it had none.
  T& operator[](uint32_t rank) {
    if (rank >= slots_.size()) slots_.resize(static_cast<size_t>(rank) + 1);
    std::unique_ptr<T>& slot = slots_[rank];
    if (!slot) {
      slot = std::make_unique<T>();
      ++size_;
    }
    return *slot;
  }

  // Ranks with a record.
  size_t size() const { return size_; }

  // f(rank, record) for every record, in rank order.
  template <typename F>
  void ForEach(F&& f) {
    for (size_t r = 0; r < slots_.size(); ++r) {
      if (slots_[r]) f(static_cast<uint32_t>(r), *slots_[r]);
    }
  }
  template <typename F>
  void ForEach(F&& f) const {
    for (size_t r = 0; r < slots_.size(); ++r) {
      if (slots_[r]) f(static_cast<uint32_t>(r), static_cast<const T&>(*slots_[r]));
    }
  }

 private:
  std::vector<std::unique_ptr<T>> slots_;
  size_t size_ = 0;
};

}  // namespace gnmr
