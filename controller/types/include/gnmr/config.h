// ControllerConfig: every tunable of the GNMR controller (docs/controller.md,
// "Config keys").
//
// The names match docs/controller.md, the YAML config file, `gnmrctl --set
// key=value` and the wire protocol, so one word means one thing everywhere.
// This is the one place the defaults live; tau, tau_delta and clip_min_scale
// were chosen from measurements (docs/controller.md, "Defaults and why"), the
// rest kept their first values. Validate() is called before a config is
// accepted, so the controller itself can assume every field is in range.
//
// A new scalar member also needs its proto field (controller.proto) and its
// row in controller/types/config_schema.cc (key, type, valid range, meaning): the wire
// codec, YAML, the Python dict, Validate(), operator== and DifferingKeys
// work from that table.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "gnmr/export.h"
#include "gnmr/status.h"

namespace gnmr {

// What recovery means for a unit (docs/controller.md, "Actions").
enum class Action : uint8_t {
  kPromote = 0,     // switch to the high-fidelity path for the lock
  kClip = 1,        // scale the gradient by clamp(mu/norm, clip_min_scale, 1)
  kSkip = 2,        // zero the unit's update on the first step in force
  kResetState = 3,  // reset the unit's optimizer moments on the first step
};

// With lag 0 and `promote`, the first step in force is the observed step,
// whose forward pass already ran on the low-cost path: its gradient gets this
// treatment instead (`entry`; docs/controller.md, "Actions").
enum class EntryTreatment : uint8_t { kNone = 0, kClip = 1, kSkip = 2 };

// With lag 0, what a candidate denied by the budget gets (`denied`):
// nothing, or its gradient of the observed step clipped to its mean for that
// one step, which costs no high-fidelity compute and holds no budget
// (docs/controller.md, "Denied candidates").
enum class DeniedTreatment : uint8_t { kNone = 0, kClip = 1 };

// Within one step, what a forward-triggered candidate (the root of a
// coupled spike) does to the candidates only gradient rules triggered (its
// coupled neighbours): ranks above them (rank, the default), or also keeps them
// out of the budget that step: they are denied, and clipped with
// `denied: clip` (exclusive; docs/controller.md, "Attribution").
enum class Attribution : uint8_t { kRank = 0, kExclusive = 1, kUpstream = 2 };

// Which ranks of a job send statistics (docs/scale.md, "Reporter
// election"): every rank, or one elected data-parallel replica of each
// shard (the others hold theirs back and send them only when elected).
// Read by gnmrd, not by the controller.
enum class ReportMode : uint8_t { kAll = 0, kOnePerShard = 1 };

// Why a unit became a candidate. Admission order: non-finite first, then
// units a forward rule (forward, saturation, underflow) triggered, then by
// risk (docs/controller.md, "Forward channel").
enum class Trigger : uint8_t {
  kNone = 0,
  kGnmr = 1,
  kDelta = 2,
  kNonFinite = 3,
  kForward = 4,     // forward norm / its own mean
  kSaturation = 5,  // saturated fraction / its own mean
  kUnderflow = 6,   // share of the usually non-zero elements flushed to zero
  // The block rules of a block-scaled forward tensor (docs/controller.md,
  // "Block rules"): saturated-block fraction / its own mean, and the share
  // of the usually live (unclamped) blocks now dead (clamped).
  kBlockSaturation = 7,
  kDeadBlocks = 8,
  kScaleClamps = 9,
  // Relative error of the dequantized tensor against its source / its own
  // mean (docs/controller.md, "Relative error").
  kRelativeError = 10,
  // The backward channel (docs/controller.md, "Backward channel"): the
  // forward, saturation and underflow rules on the gradient as quantized.
  kBackward = 11,
  kBackwardSaturation = 12,
  kBackwardUnderflow = 13,
};
constexpr int kNumTriggers = 14;
// A forward-channel trigger.
constexpr bool IsForwardTrigger(Trigger t) {
  return t >= Trigger::kForward && t <= Trigger::kRelativeError;
}
// A backward-channel trigger.
constexpr bool IsBackwardTrigger(Trigger t) {
  return t >= Trigger::kBackward && t <= Trigger::kBackwardUnderflow;
}
// A trigger of a quantizer's own output (forward or backward channel): the
// root-cause signals, which rank above the gradient rules.
constexpr bool IsQuantizerTrigger(Trigger t) { return IsForwardTrigger(t) || IsBackwardTrigger(t); }

GNMR_EXPORT const char* ActionName(Action a);
GNMR_EXPORT const char* EntryTreatmentName(EntryTreatment e);
GNMR_EXPORT const char* TriggerName(Trigger t);
GNMR_EXPORT const char* ReportModeName(ReportMode m);
GNMR_EXPORT bool ParseAction(const std::string& s, Action* out);
GNMR_EXPORT bool ParseEntryTreatment(const std::string& s, EntryTreatment* out);
GNMR_EXPORT const char* DeniedTreatmentName(DeniedTreatment d);
GNMR_EXPORT const char* AttributionName(Attribution a);

// Maps unit names to actions. `pattern` is a glob (`*`, `?`, `[abc]`)
// matched against the whole unit name; the first matching rule wins.
struct ActionRule {
  std::string pattern;
  Action action = Action::kPromote;
  // Lower bound of the clip scale for this rule; < 0 means "use the
  // config-wide clip_min_scale".
  double clip_min_scale = -1.0;

  bool operator==(const ActionRule& o) const {
    return pattern == o.pattern && action == o.action && clip_min_scale == o.clip_min_scale;
  }
};

struct GNMR_EXPORT ControllerConfig {
  int32_t warmup = 50;                           // valid samples that only build history
  double ema_decay = 0.98;                       // historical mean decay
  double tau = 6.0;                              // GNMR trigger threshold
  double tau_delta = 4.0;                        // Delta-GNMR trigger threshold
  double gnmr_floor = 1.5;                       // Delta-GNMR counts only at GNMR >= floor
  int32_t short_window = 4;                      // evaluated steps in the Delta-GNMR window
  int32_t max_o = 4;                             // hard budget: units in recovery at once
  int32_t lock_steps = 20;                       // steps a recovered unit stays recovered
  int32_t lag = 1;                               // decision for step t applies from t + lag
  EntryTreatment entry = EntryTreatment::kClip;  // lag-0 promote entry
  // Lag-0 budget denials; `clip` needs lag 0. `none` until an evaluation
  // chooses (issue 15).
  DeniedTreatment denied = DeniedTreatment::kNone;
  double clip_min_scale = 0.01;                  // default lower bound of clip scales
  std::vector<ActionRule> actions;               // first match wins; default promote
  ReportMode report = ReportMode::kOnePerShard;  // which ranks send statistics
  // The forward channel: units whose reports carry forward statistics.
  double tau_forward = 6.0;          // forward norm / its own mean
  double tau_saturation = 16.0;      // saturated fraction / its own mean
  double underflow_fraction = 0.25;  // of the usually non-zero elements, flushed to zero
  // The block rules (block-scaled forward tensors only); 0 turns a rule
  // off, and each is off until an evaluation on tuning seeds chooses it.
  double tau_block_saturation = 0.0;  // saturated-block fraction / its own mean
  double dead_block_fraction = 0.0;   // of the usually live blocks, now dead
  double scale_clamp_fraction = 0.0;  // of the usually unclamped blocks, now clamped
  // Relative error against the source (tensors observed with one) / its
  // own mean; 0 turns it off, and it is off until an evaluation chooses it.
  double tau_relative_error = 0.0;
  // The backward channel (units whose reports carry backward statistics):
  // its norm rule's threshold; its saturation and underflow rules share
  // tau_saturation and underflow_fraction with the forward channel.
  double tau_backward = 6.0;                     // backward norm / its own mean
  Attribution attribution = Attribution::kRank;  // forward roots vs gradient-only neighbours

  // Upper bounds that keep a hostile or mistyped config from allocating
  // absurd amounts or overflowing step arithmetic.
  static constexpr int32_t kMaxWindow = 1024;
  static constexpr int32_t kMaxLag = 1000;
  static constexpr int32_t kMaxLockSteps = 1000000;
  static constexpr int32_t kMaxWarmup = 1000000;
  static constexpr size_t kMaxActionRules = 256;

  // OK, or InvalidArgument naming the first offending key.
  Status Validate() const;

  bool operator==(const ControllerConfig& o) const;
  bool operator!=(const ControllerConfig& o) const { return !(*this == o); }
};

// The keys whose values differ between `a` and `b`, in declaration order,
// each as "key (a_value vs b_value)", e.g. "tau (2.5 vs 6)"; "actions" when
// the rule lists differ.
GNMR_EXPORT std::vector<std::string> DifferingKeys(const ControllerConfig& a,
                                                   const ControllerConfig& b);

// The action (and clip floor) a unit of this name gets under `config`.
struct ResolvedAction {
  Action action = Action::kPromote;
  double clip_min_scale = ControllerConfig{}.clip_min_scale;
};
GNMR_EXPORT ResolvedAction ResolveAction(const ControllerConfig& config,
                                         const std::string& unit_name);

}  // namespace gnmr
