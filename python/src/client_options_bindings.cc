#include "python/src/client_options_bindings.h"

#include <utility>

namespace py = pybind11;

namespace gnmr::python {

std::chrono::milliseconds Ms(double v, const char* what) {
  if (!(v >= 0) || v > 3.6e6) {
    throw py::value_error(std::string(what) + " must be in [0, 3600000] ms");
  }
  return std::chrono::milliseconds(static_cast<int64_t>(v));
}

ClientOptions ToClientOptions(const PyOptions& o) {
  ClientOptions c;
  c.target = o.target;
  c.job_id = o.job_id;
  c.rank = o.rank;
  c.world_size = o.world_size;
  c.token = o.token;
  c.admin_token = o.admin_token;
  c.decision_wait = Ms(o.decision_wait_ms, "decision_wait_ms");
  c.max_queued_reports = o.max_queued_reports;
  c.backoff_initial = Ms(o.backoff_initial_ms, "backoff_initial_ms");
  c.backoff_max = Ms(o.backoff_max_ms, "backoff_max_ms");
  c.profile_gpu_overhead = o.profile_gpu_overhead;
  c.local_events_path = o.local_events_path;
  c.pipeline_stage = o.pipeline_stage;
  c.attach_timeout = Ms(o.attach_timeout_ms, "attach_timeout_ms");
  return c;
}

void BindClientOptions(py::module_& m) {
  const PyOptions defaults;
  py::class_<PyOptions>(m, "ClientOptions")
      .def(py::init([](std::string target, std::string job_id, uint32_t rank, uint32_t world_size,
                       std::string token, double decision_wait_ms, size_t max_queued_reports,
                       double backoff_initial_ms, double backoff_max_ms, std::string admin_token,
                       bool profile_gpu_overhead, std::string local_events_path,
                       uint32_t pipeline_stage, double attach_timeout_ms) {
             PyOptions o;
             o.target = std::move(target);
             o.job_id = std::move(job_id);
             o.rank = rank;
             o.world_size = world_size;
             o.token = std::move(token);
             o.decision_wait_ms = decision_wait_ms;
             o.max_queued_reports = max_queued_reports;
             o.backoff_initial_ms = backoff_initial_ms;
             o.backoff_max_ms = backoff_max_ms;
             o.admin_token = std::move(admin_token);
             o.profile_gpu_overhead = profile_gpu_overhead;
             o.local_events_path = std::move(local_events_path);
             o.pipeline_stage = pipeline_stage;
             o.attach_timeout_ms = attach_timeout_ms;
             return o;
           }),
           py::kw_only(), py::arg("target"), py::arg("job_id"), py::arg("rank") = defaults.rank,
           py::arg("world_size") = defaults.world_size, py::arg("token") = "",
           py::arg("decision_wait_ms") = defaults.decision_wait_ms,
           py::arg("max_queued_reports") = defaults.max_queued_reports,
           py::arg("backoff_initial_ms") = defaults.backoff_initial_ms,
           py::arg("backoff_max_ms") = defaults.backoff_max_ms, py::arg("admin_token") = "",
           py::arg("profile_gpu_overhead") = defaults.profile_gpu_overhead,
           py::arg("local_events_path") = "", py::arg("pipeline_stage") = defaults.pipeline_stage,
           py::arg("attach_timeout_ms") = defaults.attach_timeout_ms)
      .def_readwrite("target", &PyOptions::target)
      .def_readwrite("job_id", &PyOptions::job_id)
      .def_readwrite("rank", &PyOptions::rank)
      .def_readwrite("world_size", &PyOptions::world_size)
      .def_readwrite("token", &PyOptions::token)
      .def_readwrite("decision_wait_ms", &PyOptions::decision_wait_ms)
      .def_readwrite("max_queued_reports", &PyOptions::max_queued_reports)
      .def_readwrite("backoff_initial_ms", &PyOptions::backoff_initial_ms)
      .def_readwrite("backoff_max_ms", &PyOptions::backoff_max_ms)
      .def_readwrite("admin_token", &PyOptions::admin_token)
      .def_readwrite("profile_gpu_overhead", &PyOptions::profile_gpu_overhead)
      .def_readwrite("local_events_path", &PyOptions::local_events_path)
      .def_readwrite("pipeline_stage", &PyOptions::pipeline_stage)
      .def_readwrite("attach_timeout_ms", &PyOptions::attach_timeout_ms);
}

}  // namespace gnmr::python
