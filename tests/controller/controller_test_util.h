// Helpers shared by the controller tests: building controllers, feeding
// hand-written steps, and comparing decisions bit for bit.
#pragma once

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "controller/controller.h"

namespace gnmr::testing {

// Explicit thresholds (not the defaults) for worked examples: tau 2.5,
// tau_delta 1.0, gnmr_floor 1.5, warmup 3, ema_decay 0.5, window 2,
// max_o 2, lock 3, lag 1.
inline ControllerConfig WorkedExampleConfig() {
  ControllerConfig c;
  c.tau = 2.5;
  c.tau_delta = 1.0;
  c.gnmr_floor = 1.5;
  c.warmup = 3;
  c.ema_decay = 0.5;
  c.short_window = 2;
  c.max_o = 2;
  c.lock_steps = 3;
  c.lag = 1;
  return c;
}

inline Controller MakeController(const ControllerConfig& config, int units) {
  StatusOr<Controller> c = Controller::Create(config);
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  Controller out = std::move(c).value();
  for (int i = 0; i < units; ++i) {
    EXPECT_TRUE(out.AddUnit("u" + std::to_string(i)).ok());
  }
  return out;
}

// A sample with the given gradient norm (sumsq = norm^2).
inline UnitSample Norm(uint32_t unit, double norm) {
  UnitSample s;
  s.unit_id = unit;
  s.sumsq = norm * norm;
  s.numel = 1000;
  return s;
}

inline UnitSample NonFinite(uint32_t unit) {
  UnitSample s;
  s.unit_id = unit;
  s.sumsq = std::nan("");
  s.nonfinite = 3;
  s.numel = 1000;
  return s;
}

// Observes one step and expects success.
inline Decision Step(Controller& c, int64_t step, const std::vector<UnitSample>& samples) {
  Decision d;
  Status s = c.Observe(step, samples, &d);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return d;
}

// Feeds `steps` steps where every unit has norm 1.0, starting at `first`.
inline int64_t Flat(Controller& c, int64_t first, int steps, int units, double norm = 1.0) {
  for (int k = 0; k < steps; ++k) {
    std::vector<UnitSample> v;
    for (int u = 0; u < units; ++u) v.push_back(Norm(u, norm));
    Step(c, first + k, v);
  }
  return first + steps;
}

inline bool SameBits(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }

// Full, bitwise comparison of two decisions; returns "" when identical.
inline bool SameForward(const ForwardEvidence& a, const ForwardEvidence& b) {
  return SameBits(a.fwd_ratio, b.fwd_ratio) && SameBits(a.saturation_ratio, b.saturation_ratio) &&
         SameBits(a.underflow_ratio, b.underflow_ratio);
}

inline std::string DiffDecisions(const Decision& a, const Decision& b) {
  if (a.observed_step != b.observed_step) return "observed_step";
  if (a.apply_step != b.apply_step) return "apply_step";
  if (a.sequence != b.sequence) return "sequence";
  if (a.config_version != b.config_version) return "config_version";
  if (a.global_skip != b.global_skip) return "global_skip";
  if (a.digest != b.digest) return "digest";
  if (a.recovery.size() != b.recovery.size()) return "recovery size";
  for (size_t i = 0; i < a.recovery.size(); ++i) {
    const RecoveryEntry &x = a.recovery[i], &y = b.recovery[i];
    if (x.unit_id != y.unit_id || x.action != y.action || x.entry != y.entry ||
        x.since != y.since || x.until != y.until || !SameBits(x.clip_min_scale, y.clip_min_scale) ||
        !SameBits(x.ref_norm, y.ref_norm) || x.denied_clip != y.denied_clip) {
      return "recovery entry " + std::to_string(i);
    }
  }
  if (a.admitted.size() != b.admitted.size()) return "admitted size";
  for (size_t i = 0; i < a.admitted.size(); ++i) {
    const Admission &x = a.admitted[i], &y = b.admitted[i];
    if (x.unit_id != y.unit_id || x.trigger != y.trigger || !SameBits(x.gnmr, y.gnmr) ||
        !SameBits(x.delta, y.delta) || !SameBits(x.norm, y.norm) || !SameBits(x.mu, y.mu) ||
        x.nonfinite != y.nonfinite || !SameForward(x.forward, y.forward)) {
      return "admission " + std::to_string(i);
    }
  }
  if (a.released != b.released) return "released";
  if (a.denied.size() != b.denied.size()) return "denied size";
  for (size_t i = 0; i < a.denied.size(); ++i) {
    if (a.denied[i].unit_id != b.denied[i].unit_id || a.denied[i].trigger != b.denied[i].trigger ||
        !SameBits(a.denied[i].risk, b.denied[i].risk) ||
        a.denied[i].clipped != b.denied[i].clipped ||
        !SameForward(a.denied[i].forward, b.denied[i].forward)) {
      return "denial " + std::to_string(i);
    }
  }
  return "";
}

}  // namespace gnmr::testing
