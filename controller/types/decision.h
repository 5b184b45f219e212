// The inputs and outputs of one controller step.
//
// A Decision always carries the *full* recovery set in force after it, not a
// delta: any later decision supersedes a lost one, so delivery to trainer
// ranks is idempotent (docs/architecture.md, "The wire contract"). The
// digest lets every rank prove it applied the same set.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "gnmr/config.h"

namespace gnmr {

// The largest step a report, a decision or a saved state may name: apply
// steps (+ lag) and lock ends (+ lock_steps) stay far from overflow, and
// every step stays exact enough in a JSON number to be read back.
constexpr int64_t kMaxStep = std::numeric_limits<int64_t>::max() / 4;

// Combined statistics of one unit at one step (docs/statistics.md, "Combination in gnmrd").
struct UnitSample {
  uint32_t unit_id = 0;
  double sumsq = 0.0;      // sum of squares; NaN/Inf are signals, not errors
  double amax = 0.0;       // max |x| over finite values
  uint64_t nonfinite = 0;  // count of NaN and Inf elements
  uint64_t zeros = 0;      // count of exact zeros
  uint64_t numel = 0;
  // Forward statistics (docs/controller.md, "Forward channel"): the unit's
  // quantized input as its low-precision path stores it, or its output
  // activation. Present when fwd_numel > 0.
  double fwd_sumsq = 0.0;      // dequantized; NaN/Inf: not evaluated
  double fwd_amax = 0.0;       // max |x| over finite values
  uint64_t fwd_saturated = 0;  // elements at the format's largest finite magnitude
  uint64_t fwd_zeros = 0;      // exact zeros (underflow included)
  uint64_t fwd_numel = 0;
  // Where the unit's first forward call of the step came, as
  // ForwardOrderKey(pipeline stage, position from 1); the earliest over the
  // ranks that report it. 0: unknown (an older client, or no forward
  // statistics). attribution: upstream reads it.
  uint64_t fwd_order = 0;
  // Block figures of block-scaled forward tensors (docs/statistics.md,
  // "Block columns"); fwd_blocks 0: none (not block-scaled, an older client
  // or trace). Summed over the ranks, like the forward counts.
  uint64_t fwd_blocks = 0;
  uint64_t fwd_saturated_blocks = 0;  // blocks with a code at the element maximum
  uint64_t fwd_dead_blocks = 0;       // blocks whose codes are all zero
  uint64_t fwd_scale_clamps = 0;      // blocks whose scale is at an end of its range
  // Source figures of block-scaled forward tensors observed with the tensor
  // they were quantized from (docs/statistics.md, "Source columns");
  // fwd_source_numel 0: none. The relative error is error / source sumsq.
  uint64_t fwd_source_numel = 0;  // elements of those tensors
  uint64_t fwd_underflow = 0;     // source x != 0, dequantized 0
  double fwd_error_sumsq = 0.0;   // sum((x - x_hat)^2); finite, >= 0
  double fwd_source_sumsq = 0.0;  // sum(x^2); finite, >= 0
  // Backward statistics (docs/controller.md, "Backward channel"): the
  // gradient as the unit's backward quantizer stored it. Present when
  // bwd_numel > 0; summed over the ranks like the forward figures.
  double bwd_sumsq = 0.0;      // dequantized; NaN/Inf: not evaluated
  uint64_t bwd_saturated = 0;  // elements at the format's largest finite magnitude
  uint64_t bwd_zeros = 0;      // exact zeros (underflow included)
  uint64_t bwd_numel = 0;
  // Where the unit's first backward call of the step came, as
  // BackwardOrderKey(pipeline stage, position from 1); the earliest over
  // the ranks. 0: unknown.
  uint64_t bwd_order = 0;
};

// Pipeline stages a forward order tells apart (StepStats.fwd_stage): a
// stage holds at least one rank, and world_size is at most 65536.
inline constexpr uint32_t kMaxPipelineStages = 65536;

// The forward order key: by stage, then by position within the stage (a
// micro-batch runs stage s's forward after stage s - 1's). Position 0
// (unknown) stays 0 in any stage.
inline uint64_t ForwardOrderKey(uint32_t stage, uint32_t position) {
  return position == 0 ? 0 : (static_cast<uint64_t>(stage) << 32) | position;
}

// The backward order key: a micro-batch runs stage s's backward before
// stage s - 1's, so later stages come first; then by position.
inline uint64_t BackwardOrderKey(uint32_t stage, uint32_t position) {
  return position == 0 ? 0 : ForwardOrderKey(kMaxPipelineStages - 1 - stage, position);
}

// Whether a sample's forward counts fit its element count: the controller
// refuses a sample where they do not, and the trace reader the row.
inline bool ForwardCountsFit(const UnitSample& s) {
  return s.fwd_saturated <= s.fwd_numel && s.fwd_zeros <= s.fwd_numel &&
         s.fwd_blocks <= s.fwd_numel && s.fwd_saturated_blocks <= s.fwd_blocks &&
         s.fwd_dead_blocks <= s.fwd_blocks && s.fwd_scale_clamps <= s.fwd_blocks &&
         s.fwd_source_numel <= s.fwd_numel && s.fwd_underflow <= s.fwd_source_numel;
}

// The same for the backward counts.
inline bool BackwardCountsFit(const UnitSample& s) {
  return s.bwd_saturated <= s.bwd_numel && s.bwd_zeros <= s.bwd_numel;
}

// Whether `v` is what a sum of squares over finite values can be: finite
// and not negative.
inline bool FiniteSumOfSquares(double v) { return std::isfinite(v) && v >= 0.0; }

// Whether a sample's source sums are such sums (the kernels sum finite
// pairs only).
inline bool SourceSumsValid(const UnitSample& s) {
  return FiniteSumOfSquares(s.fwd_error_sumsq) && FiniteSumOfSquares(s.fwd_source_sumsq);
}

// The forward channel's figures for one sample (docs/controller.md,
// "Forward channel"): what each forward rule compared with its threshold,
// so an operator can see why `forward`, `saturation` or `underflow` fired
// (or how close a gradient-triggered unit's forward pass came). All 0 when
// the sample carried no forward statistics, its forward sum or gradient
// was non-finite (not evaluated), or the channel was in its warmup.
struct ForwardEvidence {
  double fwd_ratio = 0.0;         // F: forward norm / fwd_mu, vs tau_forward
  double saturation_ratio = 0.0;  // S: saturated fraction / its floored mean, vs tau_saturation
  // U: share of the usually non-zero elements now zero, vs
  // underflow_fraction; negative when fewer are zero than usual.
  double underflow_ratio = 0.0;
  // B: the backward channel's quantized-gradient norm / its mean, vs
  // tau_backward (docs/controller.md, "Backward channel"); 0 when not
  // evaluated. In events and replay output, not in the recovery reason.
  double bwd_ratio = 0.0;
};

// Why a unit is in recovery: the signals of the sample that admitted it
// (a denied clip: of the one that denied it), so a trainer sees why a plan
// names a unit (docs/controller.md, "Why a unit is in recovery").
// Informational: not in the digest, and no rank applies anything from it.
struct RecoveryReason {
  Trigger trigger = Trigger::kNone;  // kNone: unknown (an older daemon or state)
  double gnmr = 0.0;                 // 0 when non-finite
  double delta = 0.0;                // Delta-GNMR; 0 when its window was empty
  ForwardEvidence forward;
};

// One unit in recovery: in force for steps [since, until).
struct RecoveryEntry {
  uint32_t unit_id = 0;
  Action action = Action::kPromote;
  // Treatment of the first step in force when it is the observed step itself
  // (lag 0, promote); kNone otherwise.
  EntryTreatment entry = EntryTreatment::kNone;
  int64_t since = 0;
  int64_t until = 0;
  double clip_min_scale = 0.0;
  // The unit's historical mean as of this decision: the clip target, so a
  // clipped gradient is scaled by clamp(ref_norm / norm, clip_min_scale, 1).
  double ref_norm = 0.0;
  // A candidate denied by the budget whose gradient of the observed step is
  // clipped (denied: clip, lag 0): action clip for [apply, apply + 1). Part
  // of the published set only; it holds no budget and is never released.
  bool denied_clip = false;
  RecoveryReason reason;

  bool InForceAt(int64_t step) const { return since <= step && step < until; }
};

struct Admission {
  uint32_t unit_id = 0;
  Trigger trigger = Trigger::kNone;
  double gnmr = 0.0;   // 0 when non-finite
  double delta = 0.0;  // Delta-GNMR; 0 when its window was empty
  double norm = 0.0;   // sqrt(sumsq); NaN/Inf when non-finite
  double mu = 0.0;     // historical mean before this sample
  uint64_t nonfinite = 0;
  ForwardEvidence forward;
};

// What a recovery entry keeps of the sample that admitted (or denied) it;
// a non-finite figure reads 0, since a reader refuses one (the figures are
// informational and must never cost a decision).
inline RecoveryReason ReasonOf(const Admission& a) {
  auto finite = [](double x) { return std::isfinite(x) ? x : 0.0; };
  RecoveryReason r;
  r.trigger = a.trigger;
  r.gnmr = finite(a.gnmr);
  r.delta = finite(a.delta);
  r.forward.fwd_ratio = finite(a.forward.fwd_ratio);
  r.forward.saturation_ratio = finite(a.forward.saturation_ratio);
  r.forward.underflow_ratio = finite(a.forward.underflow_ratio);
  return r;
}

// A triggered candidate left out because max_o units were already in
// recovery, or (coupled) because attribution: exclusive kept a gradient-only
// candidate out of the budget in a step where a forward rule named a root.
struct Denial {
  uint32_t unit_id = 0;
  Trigger trigger = Trigger::kNone;
  double risk = 0.0;  // +inf for non-finite
  // denied: clip at lag 0: its gradient of the observed step is clipped
  // (a denied_clip entry of the decision's set).
  bool clipped = false;
  bool coupled = false;     // left out by attribution (exclusive, upstream), not by max_o
  ForwardEvidence forward;  // as Admission::forward
};

// `recovery` also holds this step's denied clips (RecoveryEntry::denied_clip,
// denied: clip), which are not in the controller's recovery set.
struct Decision {
  int64_t observed_step = 0;
  int64_t apply_step = 0;
  uint64_t sequence = 0;                // 1, 2, 3, ... per controller
  uint64_t config_version = 0;          // which config produced this decision
  std::vector<RecoveryEntry> recovery;  // full set after it (+ denied clips), unit id order
  std::vector<Admission> admitted;      // in admission (priority) order
  std::vector<uint32_t> released;       // unit ids, ascending
  std::vector<Denial> denied;           // in priority order
  bool global_skip = false;             // a non-finite gradient was observed
  uint64_t digest = 0;                  // DigestOf(apply_step, recovery, global_skip)
  // The lag the next decision uses: its apply step is max(its observed step
  // + next_lag, this apply_step). The config's lag as of this decision, so a
  // lag change takes effect one decision after it is announced
  // (docs/safety.md, "Plan validity"). Not part of the digest.
  int32_t next_lag = 0;

  // True if it admits, releases or denies anything (or asks a global skip).
  bool HasChanges() const {
    return !admitted.empty() || !released.empty() || !denied.empty() || global_skip;
  }
};

// 64-bit FNV-1a over a canonical little-endian encoding of the set's
// identity (unit, action, entry, since, until; not denied_clip, which
// changes nothing a rank applies), the apply step and global_skip. Platform
// independent, so a client can recompute it.
uint64_t DigestOf(int64_t apply_step, const std::vector<RecoveryEntry>& set, bool global_skip);

}  // namespace gnmr
