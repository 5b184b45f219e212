#include "python/src/plan_bindings.h"

#include <string>

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
      .def("__repr__", [](const PlanEntry& e) {
        return "PlanEntry(unit=" + std::to_string(e.unit) + ", action=" + ActionName(e.action) +
               ", since=" + std::to_string(e.since) + ", until=" + std::to_string(e.until) +
               ", first_step=" + (e.first_step ? "True" : "False") +
               ", scale=" + std::to_string(e.scale) + (e.denied_clip ? ", denied_clip=True" : "") +
               ")";
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

  py::class_<ClientCounters>(m, "Counters")
      .def_readonly("reports_enqueued", &ClientCounters::reports_enqueued)
      .def_readonly("reports_sent", &ClientCounters::reports_sent)
      .def_readonly("reports_held", &ClientCounters::reports_held)
      .def_readonly("standby", &ClientCounters::standby)
      .def_readonly("reports_dropped", &ClientCounters::reports_dropped)
      .def_readonly("acks_sent", &ClientCounters::acks_sent)
      .def_readonly("acks_dropped", &ClientCounters::acks_dropped)
      .def_readonly("decisions_received", &ClientCounters::decisions_received)
      .def_readonly("decisions_rejected", &ClientCounters::decisions_rejected)
      .def_readonly("decisions_stale", &ClientCounters::decisions_stale)
      .def_readonly("missed_decisions", &ClientCounters::missed_decisions)
      .def_readonly("skipped_steps", &ClientCounters::skipped_steps)
      .def_readonly("generation", &ClientCounters::generation)
      .def_readonly("registrations", &ClientCounters::registrations)
      .def_readonly("reconnects", &ClientCounters::reconnects)
      .def_readonly("connect_failures", &ClientCounters::connect_failures)
      .def_readonly("connected", &ClientCounters::connected)
      .def_readonly("last_decided_step", &ClientCounters::last_decided_step)
      .def_readonly("stats_seconds", &ClientCounters::stats_seconds)
      .def_readonly("stats_gpu_seconds", &ClientCounters::stats_gpu_seconds)
      .def_property_readonly(
          "overhead_source",
          [](const ClientCounters& c) { return OverheadSourceName(c.overhead_source); })
      .def_readonly("overhead_ratio", &ClientCounters::overhead_ratio)
      .def_readonly("overhead_step", &ClientCounters::overhead_step)
      .def_readonly("last_error", &ClientCounters::last_error)
      .def("as_dict", [](const ClientCounters& c) {
        py::dict d;
        d["reports_enqueued"] = c.reports_enqueued;
        d["reports_sent"] = c.reports_sent;
        d["reports_held"] = c.reports_held;
        d["standby"] = c.standby;
        d["reports_dropped"] = c.reports_dropped;
        d["acks_sent"] = c.acks_sent;
        d["acks_dropped"] = c.acks_dropped;
        d["decisions_received"] = c.decisions_received;
        d["decisions_rejected"] = c.decisions_rejected;
        d["decisions_stale"] = c.decisions_stale;
        d["missed_decisions"] = c.missed_decisions;
        d["skipped_steps"] = c.skipped_steps;
        d["generation"] = c.generation;
        d["registrations"] = c.registrations;
        d["reconnects"] = c.reconnects;
        d["connect_failures"] = c.connect_failures;
        d["connected"] = c.connected;
        d["last_decided_step"] = c.last_decided_step;
        d["stats_seconds"] = c.stats_seconds;
        d["stats_gpu_seconds"] = c.stats_gpu_seconds;
        d["overhead_source"] = OverheadSourceName(c.overhead_source);
        d["overhead_ratio"] = c.overhead_ratio;
        d["overhead_step"] = c.overhead_step;
        d["last_error"] = c.last_error;
        return d;
      });
}

}  // namespace gnmr::python
