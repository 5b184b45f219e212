// Denied candidates (docs/controller.md, "Denied candidates"): with
// `denied: clip` at lag 0, a candidate the budget leaves out gets a one-step
// clip toward its mean. The entries live beside recovery_, never in it: they
// hold no budget and no lock, so the controller's own bookkeeping (max_o,
// releases, unit-steps in recovery) is that of `denied: none`, and only the
// published set (and so the digest) differs. Also here: which steps fall
// under attribution: exclusive, whose coupled denials get the same clip.
#include <algorithm>
#include <iterator>
#include <vector>

#include "controller/controller.h"

namespace gnmr {

RecoveryEntry Controller::DeniedClip(uint32_t unit_id, int64_t apply,
                                     const Admission& evidence) const {
  RecoveryEntry e;
  e.unit_id = unit_id;
  e.action = Action::kClip;  // whatever the unit's rule: no high-fidelity compute
  e.since = apply;
  e.until = apply + 1;
  e.clip_min_scale = units_[unit_id].resolved.clip_min_scale;
  e.denied_clip = true;
  e.reason = ReasonOf(evidence);
  return e;
}

// attribution: exclusive (docs/controller.md, "Attribution"): a step where a
// quantizer rule (forward or backward channel) triggered a unit not yet in
// recovery keeps that step's
// gradient-only candidates (the root's coupled neighbours) out of the budget.
bool Controller::ExclusiveStep() const {
  if (config_.attribution == Attribution::kRank) return false;
  for (const Candidate& c : candidates_) {
    if (IsQuantizerTrigger(c.trigger) && !in_recovery_[c.unit_id]) return true;
  }
  return false;
}

// attribution: upstream (docs/controller.md, "Attribution"): a faulty
// quantizer's output feeds the next unit's input (v into o, fc1 into fc2),
// so that unit's forward rules trigger in the same step too. The root is the
// one that ran first: the least forward order (the client's count of first
// calls). A faulty backward quantizer's output feeds the gradient of the
// units before it, which backward reaches next: its root is the least
// backward order. Candidates of unknown order (0: an older client) are
// never a root, and never coupled by one.
uint32_t Controller::ChannelRoot(bool backward) const {
  if (config_.attribution != Attribution::kUpstream) return kNoRoot;
  uint32_t root = kNoRoot;
  uint64_t root_order = 0;
  for (const Candidate& c : candidates_) {
    const bool in_channel = backward ? IsBackwardTrigger(c.trigger) : IsForwardTrigger(c.trigger);
    const uint64_t order = backward ? c.bwd_order : c.fwd_order;
    if (!in_channel || in_recovery_[c.unit_id] || order == 0) continue;
    if (root == kNoRoot || order < root_order || (order == root_order && c.unit_id < root)) {
      root = c.unit_id;
      root_order = order;
    }
  }
  return root;
}

void Controller::PublishedSet(std::vector<RecoveryEntry>* out) const {
  if (last_denied_clips_.empty()) {
    *out = recovery_;
    return;
  }
  // Both in unit id order and disjoint (a unit in recovery is no candidate).
  out->clear();
  out->reserve(recovery_.size() + last_denied_clips_.size());
  std::merge(recovery_.begin(), recovery_.end(), last_denied_clips_.begin(),
             last_denied_clips_.end(), std::back_inserter(*out),
             [](const RecoveryEntry& a, const RecoveryEntry& b) { return a.unit_id < b.unit_id; });
}

}  // namespace gnmr
