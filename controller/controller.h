// Controller: the GNMR decision engine of one training job (docs/controller.md).
//
// Design notes
// - Pure and deterministic: no I/O, no threads, no clocks, no randomness.
//   The same sequence of calls yields bit-identical decisions, so the daemon,
//   `gnmrctl replay` and the tests all run exactly this code, and a recorded
//   trace can be replayed offline to tune a config.
// - Per observed step t the controller (1) updates each unit's history and
//   evaluates GNMR / Delta-GNMR, (2) releases every lock ending at or before
//   apply = t + lag, (3) admits triggered candidates in risk order while
//   fewer than max_o units are in recovery. A unit counts against max_o from
//   admission to release, the lag before its lock takes force included, and
//   locks are never pre-empted or shortened by the controller itself.
// - Each decision announces `next_lag`, the lag its successor uses (the
//   config's lag when the decision is made), and the successor's apply step
//   is max(t + announced lag, previous apply). So a lag change takes effect
//   one decision after it is announced (a trainer rank can tell which
//   decision will cover a step: docs/safety.md), and the apply step never
//   goes backwards, even when `lag` is lowered at run time. Together with the
//   rule above this keeps "units in force at any step <= max_o" under config
//   changes. With a constant lag, apply = t + lag exactly.
// - `denied: clip` (lag 0): a denial also gets a one-step clip entry in the
//   decision's published set, never in recovery_, so it holds no budget and
//   the invariant above concerns recovery_ alone. The last decision's clips
//   are state (last_denied_clips_): a rebuilt decision needs its digest.
// - Rewind() starts the step sequence over (a trainer restarted from an
//   earlier step without importing state) and keeps everything else.
// - Not thread-safe: the daemon serialises calls per job.
// - State is plain data; ControllerStateCodec::Save/Restore (state_codec.h)
//   round-trip it and a restored controller continues bit-identically.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "controller/action_resolver.h"
#include "controller/types/decision.h"
#include "gnmr/config.h"
#include "gnmr/status.h"

namespace gnmr {

// Cumulative counters, for summaries and metrics.
struct ControllerStats {
  uint64_t steps_observed = 0;
  uint64_t unit_steps_observed = 0;  // sample rows seen
  uint64_t unit_steps_in_force = 0;  // of those, units in force at the step
  uint64_t inactive_samples = 0;
  uint64_t nonfinite_samples = 0;
  uint64_t admissions_by_trigger[kNumTriggers] = {};  // indexed by Trigger
  uint64_t forward_samples = 0;                       // samples that carried forward statistics
  uint64_t backward_samples = 0;                      // samples that carried backward statistics
  uint64_t admissions_by_action[4] = {0, 0, 0, 0};    // indexed by Action
  uint64_t denials = 0;
  uint64_t denied_clips = 0;  // of the denials, those clipped (denied: clip)
  uint64_t releases = 0;
  uint64_t global_skips = 0;
  uint64_t peak_in_recovery = 0;

  uint64_t admissions() const {
    uint64_t n = 0;
    for (uint64_t v : admissions_by_trigger) n += v;
    return n;
  }
  double recovery_fraction() const {
    return unit_steps_observed == 0 ? 0.0
                                    : static_cast<double>(unit_steps_in_force) /
                                          static_cast<double>(unit_steps_observed);
  }
};

// Per-unit history and last evaluation.
struct UnitState {
  std::string name;
  ResolvedAction resolved;    // from the config's action rules
  int64_t valid_samples = 0;  // finite, active samples seen (warmup)
  double mu = 0.0;            // historical mean of the norm
  // Last observation, for admin views (not used by the decision rule).
  int64_t last_step = -1;
  double last_norm = 0.0;
  double last_gnmr = 0.0;
  double last_delta = 0.0;
  Trigger last_trigger = Trigger::kNone;
  // The forward channel's history: its own warmup count and means of the
  // forward norm, the saturated fraction and the zero fraction.
  int64_t fwd_valid_samples = 0;
  double fwd_mu = 0.0;
  double saturation_mu = 0.0;
  double zeros_mu = 0.0;
  // The last sample's forward ratios F, S and U (ForwardEvidence; admin
  // views), 0 when it was not evaluated (warmup, no forward statistics).
  double last_forward = 0.0;
  double last_saturation = 0.0;
  double last_underflow = 0.0;
  // The block rules' history (samples with block-scaled forward tensors):
  // their own warmup count and means of the saturated, dead and clamped
  // fractions of the blocks.
  int64_t block_valid_samples = 0;
  double saturated_blocks_mu = 0.0;
  double dead_blocks_mu = 0.0;
  double scale_clamps_mu = 0.0;
  // The relative-error rule's history (samples with a source): its own
  // warmup count and the mean of error / source sumsq.
  int64_t source_valid_samples = 0;
  double relative_error_mu = 0.0;
  // The backward channel's history (docs/controller.md, "Backward
  // channel"): the forward channel's three means, of the gradient as
  // quantized, with their own warmup count.
  int64_t bwd_valid_samples = 0;
  double bwd_mu = 0.0;
  double bwd_saturation_mu = 0.0;
  double bwd_zeros_mu = 0.0;
  // The last sample's backward norm / its mean (admin views); 0 when not
  // evaluated.
  double last_backward = 0.0;
  // The last sample's block figures as fractions of its blocks
  // (docs/statistics.md, "Block columns"); 0 when it had no block-scaled
  // forward tensors. Admin views and metrics.
  double last_saturated_blocks = 0.0;
  double last_dead_blocks = 0.0;
  double last_scale_clamps = 0.0;
};

class Controller {
 public:
  // Fails with InvalidArgument if the config does not validate.
  static StatusOr<Controller> Create(const ControllerConfig& config);

  // Registers a unit; ids are dense and follow registration order, which is
  // also the final tie-break of the admission order. AlreadyExists if the
  // name is registered (use FindUnit first for idempotent registration).
  StatusOr<uint32_t> AddUnit(const std::string& name);
  std::optional<uint32_t> FindUnit(const std::string& name) const;
  size_t num_units() const { return units_.size(); }
  // id < num_units(); a larger id is a programming error and throws
  // std::out_of_range rather than reading past the table.
  const UnitState& unit(uint32_t id) const { return units_.at(id); }

  // Checks that AddUnit would accept every name (none empty, registered or
  // listed twice; capacity): lets a caller validate before changing its own
  // state, so AddUnit of these names cannot fail after it.
  // Views: a Register of 10^6 units need not copy every name once more.
  Status CheckNewUnits(const std::vector<std::string_view>& names) const;

  // Observes step `step` (strictly greater than every step observed since
  // creation or the last Rewind) with any subset of the units, each at most
  // once, and writes the decision for it.
  // On error nothing changes: unknown unit (NotFound), repeated unit, step not
  // increasing or a negative finite sumsq (InvalidArgument). NaN and +/-Inf
  // are signals: the unit triggers `nonfinite`.
  Status Observe(int64_t step, const UnitSample* samples, size_t count, Decision* out);
  Status Observe(int64_t step, const std::vector<UnitSample>& samples, Decision* out) {
    return Observe(step, samples.data(), samples.size(), out);
  }

  // Replaces the config (validated first). Applies to future decisions:
  // existing locks keep their interval; actions are re-resolved for future
  // admissions; Delta-GNMR windows keep their most recent values.
  Status SetConfig(const ControllerConfig& config);
  const ControllerConfig& config() const { return config_; }
  uint64_t config_version() const { return config_version_; }
  // Heap bytes of the compiled action rules (memory accounting).
  size_t action_rule_bytes() const { return resolver_.MemoryBytes(); }

  // Operator override (gnmrctl release): ends the unit's recovery now. The
  // next decision lists it as released. NotFound if it is not in recovery.
  Status Release(uint32_t unit_id);

  // The trainer restarted from an earlier step without importing this
  // controller's state (a crash-restart from a checkpoint under the same
  // job id): forgets the last observed step and the last apply step, so the
  // next observed step may be any step, also one observed before, and its
  // apply step is that step + next_lag() even if earlier than the last one.
  // Drops the last decision's denied clips (that decision is not rebuilt).
  // Keeps everything else: unit history and windows, the recovery set with
  // its locks (a held lock still ends at its `until` and counts against
  // max_o until released, so the budget holds on the resumed steps too),
  // next_lag, counters and the sequence (which keeps increasing).
  void Rewind();

  // The next decision's sequence number skips one. A decision covers the
  // steps up to its successor's apply step when their sequence numbers are
  // consecutive (docs/safety.md, "Plan validity"); the daemon leaves a gap
  // when it left steps undecided on purpose (a restore hold), so that no
  // rank plans them with the last decision. Not part of the saved state:
  // a restore holds again.
  void LeaveSequenceGap() { sequence_gap_ = true; }

  // The recovery set as of the last decision, unit id order.
  const std::vector<RecoveryEntry>& recovery() const { return recovery_; }
  // The last decision's denied clips (denied: clip), unit id order: in its
  // published set, not in recovery(); they hold no budget.
  const std::vector<RecoveryEntry>& last_denied_clips() const { return last_denied_clips_; }
  // The set the last decision published (its digest's set): recovery()
  // and last_denied_clips() merged in unit id order.
  void PublishedSet(std::vector<RecoveryEntry>* out) const;
  // O(1): a decision checks every candidate, and a recovery set can be as
  // large as max_o.
  bool InRecovery(uint32_t unit_id) const {
    return unit_id < in_recovery_.size() && in_recovery_[unit_id] != 0;
  }
  // Units of the current set in force at `step`.
  int InForceAt(int64_t step) const;

  const ControllerStats& stats() const { return stats_; }
  std::optional<int64_t> last_step() const {
    return has_last_step_ ? std::optional<int64_t>(last_step_) : std::nullopt;
  }
  uint64_t sequence() const { return sequence_; }
  // The sequence number the next decision will have.
  uint64_t next_sequence() const { return sequence_ + (sequence_gap_ ? 2 : 1); }
  // The apply step of the last decision.
  std::optional<int64_t> last_apply() const {
    return has_last_apply_ ? std::optional<int64_t>(last_apply_) : std::nullopt;
  }
  // The last decision's global_skip (false before any decision).
  bool last_global_skip() const { return last_global_skip_; }
  // The lag the next decision uses: announced by the last decision (its
  // next_lag), or the config's lag when none has announced one yet.
  int32_t next_lag() const { return has_next_lag_ ? next_lag_ : config_.lag; }

  // The unit's Delta-GNMR window, oldest first.
  std::vector<double> Window(uint32_t unit_id) const;

 private:
  friend class ControllerStateCodec;  // serialization (state_codec.h)

  explicit Controller(const ControllerConfig& config);

  struct Candidate {
    uint32_t unit_id;
    Trigger trigger;
    double risk;
    Admission evidence;
    uint64_t fwd_order;  // the sample's ForwardOrderKey; 0: unknown
    uint64_t bwd_order;  // the sample's BackwardOrderKey; 0: unknown
  };
  // A quantizer channel's verdict on one sample (forward_channel.cc).
  struct ForwardVerdict {
    Trigger trigger = Trigger::kNone;  // the channel's rule of highest risk
    double risk = 0.0;                 // max over the channel's rules
    ForwardEvidence evidence;          // 0 when not evaluated (decision.h)
  };
  // The forward and backward verdicts as one: the fired rule of higher risk
  // (a tie: forward), the higher risk, the forward evidence with B.
  static ForwardVerdict Stronger(const ForwardVerdict& fwd, const ForwardVerdict& bwd);

  // The steps of Observe, in order (docs/controller.md, "The decision for
  // step t"). CheckSamples changes nothing a caller sees (it marks the units
  // it read, for the duplicate check); AdvanceTo records the step and
  // returns its apply step, announcing the config's lag for the next.
  Status CheckSamples(int64_t step, const UnitSample* samples, size_t count);
  int64_t AdvanceTo(int64_t step);
  // 1. Releases every lock ending at or before `apply` (and the operator's
  // releases since the last step) into d->released. This, AdmitCandidates
  // and Publish: admission.cc.
  void ReleaseEndedLocks(int64_t apply, Decision* d);
  // 2-4. Ranks the candidates and admits while the budget allows; the rest
  // are denials (with denied: clip at lag 0, one-step clips). Returns the
  // admissions in force at the observed step itself (lag 0).
  uint64_t AdmitCandidates(int64_t step, int64_t apply, Decision* d);
  // The published set with its reference norms, the digest, the sequence.
  void Publish(int64_t apply, Decision* d);
  // Evaluates one sample; appends to candidates_ if triggered.
  void Evaluate(const UnitSample& s);
  // Updates `u`'s forward history with `s` and says which forward rule, if
  // any, triggered and the figures each compared (none, and 0, in warmup,
  // for a non-finite or absent one).
  ForwardVerdict EvaluateForward(UnitState& u, const UnitSample& s);
  // The same for the backward channel (its evidence: B alone).
  ForwardVerdict EvaluateBackward(UnitState& u, const UnitSample& s);
  // Appends a candidate triggered as `v` says (gradient evidence: 0 in
  // the gradient's warmup).
  void AddCandidate(UnitState& u, const UnitSample& s, const ForwardVerdict& v, double gnmr,
                    double delta, double mu_before);
  // The one-step clip of a unit denied at `apply` (ref_norm set later).
  RecoveryEntry DeniedClip(uint32_t unit_id, int64_t apply, const Admission& evidence) const;
  // Whether this step's candidates fall under attribution: exclusive or
  // upstream (denied_clips.cc).
  bool ExclusiveStep() const;
  // attribution: upstream: this step's root in the forward (backward)
  // channel, the candidate a forward (backward) rule triggered, not in
  // recovery, that comes first in forward (backward) order; kNoRoot when
  // there is none or attribution is not upstream (denied_clips.cc).
  static constexpr uint32_t kNoRoot = UINT32_MAX;
  uint32_t ChannelRoot(bool backward) const;
  void PushWindow(uint32_t unit_id, double gnmr);
  double WindowMean(uint32_t unit_id) const;
  void ResizeWindows(int32_t new_size);

  ControllerConfig config_;
  ActionResolver resolver_;  // config_'s action rules, compiled
  uint64_t config_version_ = 1;
  std::vector<UnitState> units_;
  std::unordered_map<std::string, uint32_t> ids_by_name_;
  // Delta-GNMR windows: short_window slots per unit, a ring with its own
  // fill count and next-write position.
  std::vector<double> window_values_;
  std::vector<int32_t> window_fill_;
  std::vector<int32_t> window_next_;

  std::vector<RecoveryEntry> recovery_;  // unit id order
  // Per unit: 1 while it is in recovery_. Derived from recovery_ (not part
  // of the serialized state) and kept in step with it everywhere it
  // changes.
  std::vector<uint8_t> in_recovery_;
  std::vector<uint32_t> admin_released_;  // reported by the next decision
  // The last decision's denied clips, unit id order (state: a rebuilt last
  // decision needs them for its digest).
  std::vector<RecoveryEntry> last_denied_clips_;
  bool has_last_step_ = false;
  int64_t last_step_ = 0;
  bool has_last_apply_ = false;
  int64_t last_apply_ = 0;
  bool last_global_skip_ = false;
  // The lag of the next decision, once announced (a decision, or a config
  // change after which the lag before it stays in force for one decision).
  bool has_next_lag_ = false;
  int32_t next_lag_ = 0;
  uint64_t sequence_ = 0;
  bool sequence_gap_ = false;  // LeaveSequenceGap
  ControllerStats stats_;

  // Scratch, reused between steps to avoid allocation; not state.
  std::vector<Candidate> candidates_;
  std::vector<uint64_t> seen_epoch_;
  uint64_t epoch_ = 0;
};

}  // namespace gnmr
