#include "python/src/plan_bindings.h"

#include <string>
#include <vector>

#include <pybind11/stl.h>

#include "gnmr/client.h"
#include "gnmr/config.h"

namespace py = pybind11;

namespace gnmr::python {
namespace {

const char* OverheadSourceName(OverheadSource s) {
  switch (s) {
    case OverheadSource::kHostWall:
      return "host_wall";
    case OverheadSource::kCupti:
      return "cupti";
    case OverheadSource::kUnavailable:
      return "unavailable";
  }
  return "unknown";
}

std::string PlanRepr(const Plan& p) {
  std::string s = "Plan(step=" + std::to_string(p.step) +
                  ", has_decision=" + (p.has_decision ? "True" : "False") +
                  (p.has_decision ? std::string()
                                  : std::string(", miss_reason=") + MissReasonName(p.miss_reason)) +
                  ", skip_step=" + (p.skip_step ? "True" : "False") + ", entries=[";
  for (size_t i = 0; i < p.entries.size(); ++i) {
    const PlanEntry& e = p.entries[i];
    s += (i ? ", " : "") + std::string("(") + std::to_string(e.unit) + ", " + ActionName(e.action) +
         ", " + std::to_string(e.since) + ".." + std::to_string(e.until) + ")";
  }
  return s + "])";
}

}  // namespace

void BindPlanTypes(py::module_& m) {
  py::class_<PlanEntry>(m, "PlanEntry")
      .def_readonly("unit", &PlanEntry::unit)
      .def_readonly("action", &PlanEntry::action)
      .def_readonly("entry", &PlanEntry::entry)
      .def_readonly("first_step", &PlanEntry::first_step)
      .def_readonly("since", &PlanEntry::since)
      .def_readonly("until", &PlanEntry::until)
      .def_readonly("ref_norm", &PlanEntry::ref_norm)
      .def_readonly("clip_min_scale", &PlanEntry::clip_min_scale)
      .def_readonly("norm", &PlanEntry::norm)
      .def_readonly("scale", &PlanEntry::scale)
      .def_readonly("denied_clip", &PlanEntry::denied_clip)
      // Why the unit is in recovery (docs/controller.md): "gnmr", "delta",
      // "nonfinite", "forward", "saturation", "underflow", "block_saturation",
      // "dead_blocks", "scale_clamps", "relative_error", "backward",
      // "backward_saturation", "backward_underflow"; "none" unknown.
      .def_property_readonly("trigger",
                             [](const PlanEntry& e) { return std::string(TriggerName(e.trigger)); })
      .def_readonly("gnmr", &PlanEntry::gnmr)
      .def_readonly("delta", &PlanEntry::delta)
      .def_readonly("fwd_ratio", &PlanEntry::fwd_ratio)
      .def_readonly("saturation_ratio", &PlanEntry::saturation_ratio)
      .def_readonly("underflow_ratio", &PlanEntry::underflow_ratio)
      .def("__repr__", [](const PlanEntry& e) {
        return "PlanEntry(unit=" + std::to_string(e.unit) + ", action=" + ActionName(e.action) +
               ", since=" + std::to_string(e.since) + ", until=" + std::to_string(e.until) +
               ", first_step=" + (e.first_step ? "True" : "False") +
               ", trigger=" + TriggerName(e.trigger) + ", scale=" + std::to_string(e.scale) +
               (e.denied_clip ? ", denied_clip=True" : "") + ")";
      });

  py::class_<Plan>(m, "Plan")
      .def_readonly("step", &Plan::step)
      .def_readonly("has_decision", &Plan::has_decision)
      .def_readonly("miss_reason", &Plan::miss_reason)
      .def_readonly("generation", &Plan::generation)
      .def_readonly("nonfinite_observed", &Plan::nonfinite_observed)
      .def_readonly("skip_step", &Plan::skip_step)
      .def_readonly("observed_step", &Plan::observed_step)
      .def_readonly("apply_step", &Plan::apply_step)
      .def_readonly("sequence", &Plan::sequence)
      .def_readonly("digest", &Plan::digest)
      .def_readonly("global_skip", &Plan::global_skip)
      .def_readonly("entries", &Plan::entries)
      .def(
          "find",
          [](const Plan& p, UnitHandle u) -> py::object {
            const PlanEntry* e = p.Find(u);
            return e ? py::cast(*e) : py::none();
          },
          py::arg("unit"))
      .def("__repr__", &PlanRepr);

  // Every field once: bound as a read-only property and listed for as_dict,
  // which reads them back through the properties (so the two cannot drift).
  py::class_<ClientCounters> counters(m, "Counters");
  std::vector<const char*> names;
  auto field = [&](const char* name, auto member) {
    counters.def_readonly(name, member);
    names.push_back(name);
  };
  field("reports_enqueued", &ClientCounters::reports_enqueued);
  field("reports_sent", &ClientCounters::reports_sent);
  field("reports_held", &ClientCounters::reports_held);
  field("standby", &ClientCounters::standby);
  field("reports_dropped", &ClientCounters::reports_dropped);
  field("acks_sent", &ClientCounters::acks_sent);
  field("acks_dropped", &ClientCounters::acks_dropped);
  field("decisions_received", &ClientCounters::decisions_received);
  field("decisions_rejected", &ClientCounters::decisions_rejected);
  field("decisions_stale", &ClientCounters::decisions_stale);
  field("missed_decisions", &ClientCounters::missed_decisions);
  field("skipped_steps", &ClientCounters::skipped_steps);
  field("steps_without_decision", &ClientCounters::steps_without_decision);
  field("forward_calls_dropped", &ClientCounters::forward_calls_dropped);
  field("generation", &ClientCounters::generation);
  field("registrations", &ClientCounters::registrations);
  field("reconnects", &ClientCounters::reconnects);
  field("connect_failures", &ClientCounters::connect_failures);
  field("attach_failures", &ClientCounters::attach_failures);
  field("connected", &ClientCounters::connected);
  field("last_decided_step", &ClientCounters::last_decided_step);
  field("stats_seconds", &ClientCounters::stats_seconds);
  field("stats_gpu_seconds", &ClientCounters::stats_gpu_seconds);
  counters.def_property_readonly("overhead_source", [](const ClientCounters& c) {
    return OverheadSourceName(c.overhead_source);
  });
  names.push_back("overhead_source");
  field("overhead_ratio", &ClientCounters::overhead_ratio);
  field("overhead_step", &ClientCounters::overhead_step);
  field("last_error", &ClientCounters::last_error);
  counters.def("as_dict", [names](const py::object& self) {
    py::dict d;
    for (const char* name : names) d[name] = self.attr(name);
    return d;
  });
}

}  // namespace gnmr::python
