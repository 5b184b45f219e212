// The client's options on the Python side: PyOptions (gnmr.ClientOptions,
// with ClientOptions' defaults and times in milliseconds as floats), their
// conversion to gnmr::ClientOptions and their binding. Apart from module.cc,
// which binds the Client that takes them, so that the fourteen fields, their
// defaults and their checks are read in one place.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

#include <pybind11/pybind11.h>

#include "gnmr/client.h"

namespace gnmr::python {

// The defaults are ClientOptions'.
struct PyOptions {
  std::string target;
  std::string job_id;
  uint32_t rank = ClientOptions().rank;
  uint32_t world_size = ClientOptions().world_size;
  std::string token;
  double decision_wait_ms = DefaultMs(&ClientOptions::decision_wait);
  size_t max_queued_reports = ClientOptions().max_queued_reports;
  double backoff_initial_ms = DefaultMs(&ClientOptions::backoff_initial);
  double backoff_max_ms = DefaultMs(&ClientOptions::backoff_max);
  std::string admin_token;  // for export_state / import_state only
  bool profile_gpu_overhead = ClientOptions().profile_gpu_overhead;
  std::string local_events_path;  // target "local": events as JSON Lines
  uint32_t pipeline_stage = ClientOptions().pipeline_stage;
  double attach_timeout_ms = DefaultMs(&ClientOptions::attach_timeout);

 private:
  static double DefaultMs(std::chrono::milliseconds ClientOptions::*field) {
    return static_cast<double>((ClientOptions().*field).count());
  }
};

// `v` milliseconds; ValueError naming `what` outside [0, 3600000].
std::chrono::milliseconds Ms(double v, const char* what);

// The ClientOptions `o` stands for, its controller config left default
// (ValueError for a time out of range, checked in field order).
ClientOptions ToClientOptions(const PyOptions& o);

// Binds PyOptions as _gnmr.ClientOptions (keyword-only constructor).
void BindClientOptions(pybind11::module_& m);

}  // namespace gnmr::python
