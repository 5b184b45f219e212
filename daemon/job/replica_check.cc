#include "daemon/job/replica_check.h"

namespace gnmr {

ReplicaCheck::Entry* ReplicaCheck::At(uint32_t group, int64_t step) {
  if (step < 0 || paused_) return nullptr;
  if (group >= groups_.size()) groups_.resize(static_cast<size_t>(group) + 1);
  std::unique_ptr<Ring>& ring = groups_[group];
  if (!ring) ring = std::make_unique<Ring>();
  Entry& e = (*ring)[static_cast<size_t>(step) % kSteps];
  if (e.step > step) return nullptr;
  if (e.step < step) e = Entry{step};
  return &e;
}

std::optional<ReplicaCheck::Mismatch> ReplicaCheck::Reported(uint32_t group, uint32_t rank,
                                                             int64_t step, uint64_t fingerprint,
                                                             bool* compared) {
  *compared = false;
  Entry* e = At(group, step);
  if (e == nullptr) return std::nullopt;
  if (e->reported) {  // a second report of the step (a takeover)
    *compared = true;
    if (e->reported_fp == fingerprint) return std::nullopt;
    return Mismatch{group, step, e->reporter, rank};
  }
  e->reported = true;
  e->reporter = rank;
  e->reported_fp = fingerprint;
  if (!e->noted) return std::nullopt;
  e->noted = false;
  *compared = true;
  if (e->noted_fp == fingerprint) return std::nullopt;
  return Mismatch{group, step, rank, e->standby};
}

std::optional<ReplicaCheck::Mismatch> ReplicaCheck::Noted(uint32_t group, uint32_t rank,
                                                          int64_t step, uint64_t fingerprint,
                                                          bool* compared) {
  *compared = false;
  Entry* e = At(group, step);
  if (e == nullptr) return std::nullopt;
  if (!e->reported) {
    if (!e->noted) {
      e->noted = true;
      e->standby = rank;
      e->noted_fp = fingerprint;
    }
    return std::nullopt;
  }
  *compared = true;
  if (e->reported_fp == fingerprint) return std::nullopt;
  return Mismatch{group, step, e->reporter, rank};
}

}  // namespace gnmr
