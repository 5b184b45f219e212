// The forward channel of a unit (docs/controller.md, "Forward channel").
//
// Gradient norms see a numerical fault only through backpropagation, where
// attention couples a k or v fault into q's gradient and LayerNorm masks
// fc2's; the quantizer's own output shows it at the root. When a unit's
// report carries forward statistics (its quantized input as its
// low-precision path stores it, or its output activation), three rules
// compare them with the unit's own history:
// - forward: forward norm / its EMA mean (warmup and clamp as GNMR);
// - saturation: the saturated fraction / its EMA mean, the mean floored at
//   one element (current scaling keeps one element at the format's maximum,
//   so a healthy tensor has at least that);
// - underflow: of the elements usually non-zero (1 - the zero fraction's
//   mean), the share that is now zero: a scale too small flushes them.
//   Relative to the usual non-zero share, so a ReLU output that is half
//   zeros triggers only when a quarter (the default) of its other half goes.
// Each sample enters each history clamped at that rule's threshold, so a
// fault cannot raise the bar it is measured against. The channel has its
// own warmup count: forward tensors may start after the gradients did.
//
// A block-scaled forward tensor adds three block rules of the same forms
// (docs/controller.md, "Block rules"), each off until its threshold is set:
// - block_saturation: the saturated-block fraction / its mean, floored at
//   one block (the saturation form: E8M0's floor rule saturates a block's
//   largest values by construction, so healthy blocks saturate too);
// - dead_blocks and scale_clamps: of the blocks usually live (unclamped),
//   the share now dead (clamped) (the underflow form).
// Their history has its own warmup count, over samples with blocks.
//
// A tensor observed with its source (what it was quantized from) adds the
// relative_error rule (docs/controller.md, "Relative error"): the relative
// error sum((x - x_hat)^2) / sum(x^2) over its mean, the ratio form, off
// until tau_relative_error is set, with its own warmup count.
//
// The backward channel (docs/controller.md, "Backward channel") runs the
// three element rules on the gradient as the unit's backward quantizer
// stored it (tau_backward for the norm; tau_saturation and
// underflow_fraction as forward), with its own history and warmup: a fault
// in the backward quantizer leaves the forward pass healthy, and the
// gradient norms of every unit upstream of it rise with the root's.
#include <algorithm>
#include <cmath>
#include <limits>

#include "controller/controller.h"

namespace gnmr {
namespace {

constexpr double kEps = 1e-12;
// The clamp of a rule that is off: none.
constexpr double kOff = std::numeric_limits<double>::infinity();

// One rule's evaluation: its figure against its threshold.
struct RuleResult {
  Trigger trigger;
  double risk;
  bool fired;
};

// The plain average of k samples with mean `mu` and one more, `x` (warmup).
double AddToAverage(double mu, double x, double k) { return (mu * k + x) / (k + 1.0); }

// The mean after a sample of the ratio form (forward, saturation,
// block_saturation, relative_error), the sample clamped at `cap` (the
// threshold times the base; +inf for a rule that is off).
double RatioMean(double mu, double x, double cap, double decay) {
  return decay * mu + (1.0 - decay) * std::min(x, cap);
}

// The share form of underflow, dead_blocks and scale_clamps (the other
// rules are ratios to a mean): of the share usually not hit (1 - mu), the
// part hit now.
double ShareHit(double x, double mu) {
  const double usually_not = 1.0 - mu;
  return usually_not > kEps ? (x - mu) / usually_not : 0.0;
}

// The mean after a sample of the share form, the sample clamped at the
// threshold (`fraction` 0: the rule is off, the sample enters unclamped).
double ShareMean(double mu, double x, double fraction, double decay) {
  const double entering = fraction > 0 ? std::min(x, mu + fraction * (1.0 - mu)) : x;
  return decay * mu + (1.0 - decay) * entering;
}

// The triggered rule of highest risk names the verdict's trigger (ties go
// to the first listed); the verdict's risk is the highest of all.
void Choose(const RuleResult* rules, size_t count, Trigger* trigger, double* risk) {
  double fired_risk = -1.0;
  for (size_t i = 0; i < count; ++i) {
    const RuleResult& r = rules[i];
    *risk = std::max(*risk, r.risk);
    if (r.fired && r.risk > fired_risk) {
      *trigger = r.trigger;
      fired_risk = r.risk;
    }
  }
}

// One channel's element figures and the history they are judged against.
struct ElementFigures {
  double sumsq;
  uint64_t saturated, zeros, numel;
};
struct ElementHistory {
  int64_t& valid_samples;
  double& mu;  // of the norm
  double& saturation_mu;
  double& zeros_mu;
};
// The norm, saturation and underflow rules (the forward channel's forms)
// on one channel's figures (numel > 0, sumsq finite): updates the history;
// in warmup returns false, else writes the three rules to `out` and their
// figures (norm ratio, saturation ratio, flushed share) to `figures`.
bool EvaluateElements(const ControllerConfig& config, const ElementFigures& f, double tau_norm,
                      const Trigger (&triggers)[3], ElementHistory h, RuleResult* out,
                      ForwardEvidence* figures) {
  const double n = static_cast<double>(f.numel);
  const double norm = std::sqrt(f.sumsq);
  const double saturated = static_cast<double>(f.saturated) / n;
  const double zeros = static_cast<double>(f.zeros) / n;
  if (h.valid_samples < config.warmup) {
    // Warmup: plain averages of the samples so far.
    const double k = static_cast<double>(h.valid_samples);
    h.mu = AddToAverage(h.mu, norm, k);
    h.saturation_mu = AddToAverage(h.saturation_mu, saturated, k);
    h.zeros_mu = AddToAverage(h.zeros_mu, zeros, k);
    ++h.valid_samples;
    return false;
  }
  const double ratio = norm / std::max(h.mu, kEps);
  const double saturation_base = std::max(h.saturation_mu, 1.0 / n);
  const double saturation_ratio = saturated / saturation_base;
  const double flushed = ShareHit(zeros, h.zeros_mu);

  const double d = config.ema_decay;
  h.mu = RatioMean(h.mu, norm, tau_norm * h.mu, d);
  h.saturation_mu =
      RatioMean(h.saturation_mu, saturated, config.tau_saturation * saturation_base, d);
  h.zeros_mu = ShareMean(h.zeros_mu, zeros, config.underflow_fraction, d);
  ++h.valid_samples;
  *figures = {ratio, saturation_ratio, flushed};
  out[0] = {triggers[0], ratio / tau_norm, ratio >= tau_norm};
  out[1] = {triggers[1], saturation_ratio / config.tau_saturation,
            saturation_ratio >= config.tau_saturation};
  out[2] = {triggers[2], flushed / config.underflow_fraction, flushed >= config.underflow_fraction};
  return true;
}

// The block rules of a sample with `blocks` blocks, whose fractions
// EvaluateForward set in u.last_*_blocks: updates their history and writes
// the rules that are on to `out` (none in warmup); returns how many. A rule
// that is off takes no part, so an old config decides as before.
size_t EvaluateBlocks(const ControllerConfig& config, uint64_t blocks, UnitState& u,
                      RuleResult* out) {
  const double saturated = u.last_saturated_blocks;
  const double dead = u.last_dead_blocks;
  const double clamped = u.last_scale_clamps;
  if (u.block_valid_samples < config.warmup) {
    // Warmup: plain averages of the samples so far.
    const double k = static_cast<double>(u.block_valid_samples);
    u.saturated_blocks_mu = AddToAverage(u.saturated_blocks_mu, saturated, k);
    u.dead_blocks_mu = AddToAverage(u.dead_blocks_mu, dead, k);
    u.scale_clamps_mu = AddToAverage(u.scale_clamps_mu, clamped, k);
    ++u.block_valid_samples;
    return 0;
  }
  const double tau = config.tau_block_saturation;
  const double base = std::max(u.saturated_blocks_mu, 1.0 / static_cast<double>(blocks));
  const double saturation_ratio = saturated / base;
  const double dead_share = ShareHit(dead, u.dead_blocks_mu);
  const double clamp_share = ShareHit(clamped, u.scale_clamps_mu);

  const double d = config.ema_decay;
  u.saturated_blocks_mu =
      RatioMean(u.saturated_blocks_mu, saturated, tau > 0 ? tau * base : kOff, d);
  u.dead_blocks_mu = ShareMean(u.dead_blocks_mu, dead, config.dead_block_fraction, d);
  u.scale_clamps_mu = ShareMean(u.scale_clamps_mu, clamped, config.scale_clamp_fraction, d);
  ++u.block_valid_samples;

  size_t n = 0;
  if (tau > 0) {
    out[n++] = {Trigger::kBlockSaturation, saturation_ratio / tau, saturation_ratio >= tau};
  }
  if (const double f = config.dead_block_fraction; f > 0) {
    out[n++] = {Trigger::kDeadBlocks, dead_share / f, dead_share >= f};
  }
  if (const double f = config.scale_clamp_fraction; f > 0) {
    out[n++] = {Trigger::kScaleClamps, clamp_share / f, clamp_share >= f};
  }
  return n;
}

// The relative-error rule of a sample with a source (fwd_source_sumsq > 0):
// as EvaluateBlocks, one rule.
size_t EvaluateSource(const ControllerConfig& config, const UnitSample& s, UnitState& u,
                      RuleResult* out) {
  const double error = s.fwd_error_sumsq / s.fwd_source_sumsq;
  if (u.source_valid_samples < config.warmup) {
    const double k = static_cast<double>(u.source_valid_samples);
    u.relative_error_mu = AddToAverage(u.relative_error_mu, error, k);
    ++u.source_valid_samples;
    return 0;
  }
  const double tau = config.tau_relative_error;
  const double base = std::max(u.relative_error_mu, kEps);
  const double ratio = error / base;
  u.relative_error_mu =
      RatioMean(u.relative_error_mu, error, tau > 0 ? tau * base : kOff, config.ema_decay);
  ++u.source_valid_samples;
  if (tau <= 0) return 0;
  out[0] = {Trigger::kRelativeError, ratio / tau, ratio >= tau};
  return 1;
}

// Whether a sample carries source figures the relative error can be read
// from (an all-zero source has none).
bool HasSource(const UnitSample& s) { return s.fwd_source_numel > 0 && s.fwd_source_sumsq > 0; }

}  // namespace

Controller::ForwardVerdict Controller::EvaluateForward(UnitState& u, const UnitSample& s) {
  ForwardVerdict v;
  // Of the sample's blocks (Observe(): the counts fit); 0 without any.
  auto of_blocks = [&s](uint64_t count) {
    return s.fwd_blocks > 0 ? static_cast<double>(count) / static_cast<double>(s.fwd_blocks) : 0.0;
  };
  u.last_saturated_blocks = of_blocks(s.fwd_saturated_blocks);
  u.last_dead_blocks = of_blocks(s.fwd_dead_blocks);
  u.last_scale_clamps = of_blocks(s.fwd_scale_clamps);
  u.last_forward = u.last_saturation = u.last_underflow = 0.0;  // until evaluated below
  // Observe() refused negative sums and counts above numel.
  if (s.fwd_numel == 0 || !std::isfinite(s.fwd_sumsq)) return v;
  ++stats_.forward_samples;
  constexpr Trigger kRules[3] = {Trigger::kForward, Trigger::kSaturation, Trigger::kUnderflow};
  RuleResult rules[7];
  const ElementFigures f{s.fwd_sumsq, s.fwd_saturated, s.fwd_zeros, s.fwd_numel};
  if (!EvaluateElements(config_, f, config_.tau_forward, kRules,
                        {u.fwd_valid_samples, u.fwd_mu, u.saturation_mu, u.zeros_mu}, rules,
                        &v.evidence)) {
    // Samples with blocks or a source are forward samples: those histories
    // are in their warmup too, and only build.
    if (s.fwd_blocks > 0) EvaluateBlocks(config_, s.fwd_blocks, u, rules);
    if (HasSource(s)) EvaluateSource(config_, s, u, rules);
    return v;
  }
  u.last_forward = v.evidence.fwd_ratio;
  u.last_saturation = v.evidence.saturation_ratio;
  u.last_underflow = v.evidence.underflow_ratio;
  size_t rule_count = 3;
  if (s.fwd_blocks > 0) rule_count += EvaluateBlocks(config_, s.fwd_blocks, u, rules + rule_count);
  if (HasSource(s)) rule_count += EvaluateSource(config_, s, u, rules + rule_count);
  Choose(rules, rule_count, &v.trigger, &v.risk);
  return v;
}

Controller::ForwardVerdict Controller::EvaluateBackward(UnitState& u, const UnitSample& s) {
  ForwardVerdict v;
  u.last_backward = 0.0;  // until evaluated below
  if (s.bwd_numel == 0 || !std::isfinite(s.bwd_sumsq)) return v;
  ++stats_.backward_samples;
  constexpr Trigger kRules[3] = {Trigger::kBackward, Trigger::kBackwardSaturation,
                                 Trigger::kBackwardUnderflow};
  RuleResult rules[3];
  ForwardEvidence figures;
  const ElementFigures f{s.bwd_sumsq, s.bwd_saturated, s.bwd_zeros, s.bwd_numel};
  if (!EvaluateElements(config_, f, config_.tau_backward, kRules,
                        {u.bwd_valid_samples, u.bwd_mu, u.bwd_saturation_mu, u.bwd_zeros_mu}, rules,
                        &figures)) {
    return v;
  }
  u.last_backward = figures.fwd_ratio;
  v.evidence.bwd_ratio = figures.fwd_ratio;
  Choose(rules, 3, &v.trigger, &v.risk);
  return v;
}

Controller::ForwardVerdict Controller::Stronger(const ForwardVerdict& fwd,
                                                const ForwardVerdict& bwd) {
  ForwardVerdict v = fwd;
  if (bwd.trigger != Trigger::kNone && (fwd.trigger == Trigger::kNone || bwd.risk > fwd.risk)) {
    v.trigger = bwd.trigger;
  }
  v.risk = std::max(fwd.risk, bwd.risk);
  v.evidence.bwd_ratio = bwd.evidence.bwd_ratio;
  return v;
}

}  // namespace gnmr
