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
#include <algorithm>
#include <cmath>

#include "controller/controller.h"

namespace gnmr {
namespace {

constexpr double kEps = 1e-12;

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
  const double n = static_cast<double>(s.fwd_numel);
  const double norm = std::sqrt(s.fwd_sumsq);
  const double saturated = static_cast<double>(s.fwd_saturated) / n;
  const double zeros = static_cast<double>(s.fwd_zeros) / n;

  if (u.fwd_valid_samples < config_.warmup) {
    // Warmup: plain averages of the samples so far.
    const double k = static_cast<double>(u.fwd_valid_samples);
    u.fwd_mu = (u.fwd_mu * k + norm) / (k + 1.0);
    u.saturation_mu = (u.saturation_mu * k + saturated) / (k + 1.0);
    u.zeros_mu = (u.zeros_mu * k + zeros) / (k + 1.0);
    ++u.fwd_valid_samples;
    return v;
  }

  const double ratio = norm / std::max(u.fwd_mu, kEps);
  const double saturation_base = std::max(u.saturation_mu, 1.0 / n);
  const double saturation_ratio = saturated / saturation_base;
  const double usually_nonzero = 1.0 - u.zeros_mu;
  const double flushed = usually_nonzero > kEps ? (zeros - u.zeros_mu) / usually_nonzero : 0.0;

  const double d = config_.ema_decay;
  u.fwd_mu = d * u.fwd_mu + (1.0 - d) * std::min(norm, config_.tau_forward * u.fwd_mu);
  u.saturation_mu = d * u.saturation_mu +
                    (1.0 - d) * std::min(saturated, config_.tau_saturation * saturation_base);
  u.zeros_mu =
      d * u.zeros_mu +
      (1.0 - d) * std::min(zeros, u.zeros_mu + config_.underflow_fraction * usually_nonzero);
  ++u.fwd_valid_samples;
  u.last_forward = ratio;
  u.last_saturation = saturation_ratio;
  u.last_underflow = flushed;
  v.evidence = {ratio, saturation_ratio, flushed};

  // The triggered rule of highest risk names the trigger; ties go to the
  // first listed.
  const struct {
    Trigger trigger;
    double risk;
    bool fired;
  } rules[] = {
      {Trigger::kForward, ratio / config_.tau_forward, ratio >= config_.tau_forward},
      {Trigger::kSaturation, saturation_ratio / config_.tau_saturation,
       saturation_ratio >= config_.tau_saturation},
      {Trigger::kUnderflow, flushed / config_.underflow_fraction,
       flushed >= config_.underflow_fraction},
  };
  double fired_risk = -1.0;
  for (const auto& r : rules) {
    v.risk = std::max(v.risk, r.risk);
    if (r.fired && r.risk > fired_risk) {
      v.trigger = r.trigger;
      fired_risk = r.risk;
    }
  }
  return v;
}

}  // namespace gnmr
