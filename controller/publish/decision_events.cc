#include "controller/publish/decision_events.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>

#include "controller/types/config_codec.h"

namespace gnmr {
namespace {

void SetForward(const ForwardEvidence& f, v1::Event* e) {
  e->set_fwd_ratio(f.fwd_ratio);
  e->set_saturation_ratio(f.saturation_ratio);
  e->set_underflow_ratio(f.underflow_ratio);
  e->set_bwd_ratio(f.bwd_ratio);
}

}  // namespace

void AppendDecisionEvents(const Decision& d, const Controller& controller, double time_unix,
                          std::vector<v1::Event>* out) {
  if (!d.HasChanges()) return;
  auto base = [&](v1::EventKind kind, uint32_t unit) {
    v1::Event e;
    e.set_observed_step(d.observed_step);
    e.set_apply_step(d.apply_step);
    e.set_kind(kind);
    e.set_unit(controller.unit(unit).name);
    e.set_time_unix(time_unix);
    return e;
  };
  for (const Admission& a : d.admitted) {
    v1::Event e = base(v1::EVENT_KIND_ADMISSION, a.unit_id);
    // d.recovery is in unit id order: a search, not a scan (it may be as
    // large as max_o, and so may the admissions).
    auto r = std::lower_bound(d.recovery.begin(), d.recovery.end(), a.unit_id,
                              [](const RecoveryEntry& x, uint32_t id) { return x.unit_id < id; });
    if (r != d.recovery.end() && r->unit_id == a.unit_id) {
      e.set_action(ToProto(r->action));
      e.set_until(r->until);
    }
    e.set_trigger(ToProto(a.trigger));
    // A non-finite sample is not evaluated: no GNMR or Delta exists for it.
    const bool evaluated = a.trigger != Trigger::kNonFinite;
    e.set_gnmr(evaluated ? a.gnmr : std::nan(""));
    e.set_delta(evaluated ? a.delta : std::nan(""));
    e.set_norm(a.norm);
    e.set_mu(a.mu);
    SetForward(a.forward, &e);
    if (a.nonfinite) e.set_detail("nonfinite=" + std::to_string(a.nonfinite));
    out->push_back(std::move(e));
  }
  for (uint32_t u : d.released) out->push_back(base(v1::EVENT_KIND_RELEASE, u));
  for (const Denial& x : d.denied) {
    // A clipped denial is an event kind of its own: it changed a gradient.
    v1::Event e = base(x.clipped ? v1::EVENT_KIND_DENIED_CLIP : v1::EVENT_KIND_DENIAL, x.unit_id);
    e.set_trigger(ToProto(x.trigger));
    if (x.clipped) {
      e.set_action(v1::ACTION_CLIP);
      e.set_until(d.apply_step + 1);
    }
    const UnitState& st = controller.unit(x.unit_id);
    e.set_gnmr(st.last_gnmr);
    e.set_delta(st.last_delta);
    e.set_norm(st.last_norm);
    e.set_mu(st.mu);
    SetForward(x.forward, &e);
    // Why it was left out: the budget, or attribution: exclusive (a forward
    // root this step; docs/controller.md, "Attribution").
    const std::string why = x.coupled ? "coupled to this step's forward root" : "max_o reached";
    e.set_detail(x.clipped ? why + "; clipped to mu at the observed step" : why);
    out->push_back(std::move(e));
  }
  if (d.global_skip) {
    v1::Event e;
    e.set_observed_step(d.observed_step);
    e.set_apply_step(d.apply_step);
    e.set_kind(v1::EVENT_KIND_GLOBAL_SKIP);
    e.set_time_unix(time_unix);
    e.set_detail("non-finite gradient observed");
    out->push_back(std::move(e));
  }
}

v1::Event JobEvent(v1::EventKind kind, int64_t observed_step, double time_unix,
                   std::string detail) {
  v1::Event e;
  e.set_observed_step(observed_step);
  e.set_kind(kind);
  e.set_time_unix(time_unix);
  e.set_detail(std::move(detail));
  return e;
}

}  // namespace gnmr
