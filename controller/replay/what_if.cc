#include "controller/replay/what_if.h"

#include <utility>

namespace gnmr {

StatusOr<std::vector<std::string>> SplitVariant(std::string_view spec) {
  std::vector<std::string> parts;
  int depth = 0;
  char quote = 0;
  size_t start = 0;
  auto take = [&](size_t end) -> Status {
    std::string_view part = spec.substr(start, end - start);
    while (!part.empty() && part.front() == ' ') part.remove_prefix(1);
    while (!part.empty() && part.back() == ' ') part.remove_suffix(1);
    if (part.empty()) {
      return InvalidArgument("--variant '" + std::string(spec) +
                             "': empty override (write key=value[,key=value...])");
    }
    parts.emplace_back(part);
    start = end + 1;
    return Status::Ok();
  };
  for (size_t i = 0; i < spec.size(); ++i) {
    const char c = spec[i];
    if (quote != 0) {
      if (c == quote) quote = 0;
    } else if (c == '"' || c == '\'') {
      quote = c;
    } else if (c == '[' || c == '{') {
      ++depth;
    } else if (c == ']' || c == '}') {
      if (--depth < 0) break;
    } else if (c == ',' && depth == 0) {
      GNMR_RETURN_IF_ERROR(take(i));
    }
  }
  if (depth != 0 || quote != 0) {
    return InvalidArgument("--variant '" + std::string(spec) + "': unbalanced " +
                           (quote != 0 ? "quote" : "brackets"));
  }
  GNMR_RETURN_IF_ERROR(take(spec.size()));
  return parts;
}

StatusOr<WhatIfSummary> RunWhatIf(TraceReader* reader, const std::vector<WhatIfVariant>& variants,
                                  const std::function<void(const ReplayProgress&)>& on_step) {
  std::vector<Controller> controllers;
  controllers.reserve(variants.size());
  for (const WhatIfVariant& v : variants) {
    StatusOr<Controller> c = Controller::Create(v.config);
    if (!c.ok()) return InvalidArgument(v.label + ": " + c.status().message());
    controllers.push_back(std::move(c.value()));
  }
  WhatIfSummary summary;
  summary.trace = reader->name();
  TraceStep step;
  Decision decision;
  for (;;) {
    bool got = false;
    GNMR_RETURN_IF_ERROR(reader->Next(&step, &got));
    if (!got) break;
    for (Controller& c : controllers) {
      GNMR_RETURN_IF_ERROR(ObserveTraceStep(*reader, step, &c, &decision));
    }
    if (summary.steps == 0) summary.first_step = step.step;
    summary.last_step = step.step;
    ++summary.steps;
    if (on_step) {
      on_step({summary.steps, reader->rows(), reader->bytes_consumed(), reader->total_bytes()});
    }
  }
  summary.units = reader->num_units();
  for (size_t i = 0; i < variants.size(); ++i) {
    summary.results.push_back({variants[i].label, controllers[i].stats()});
  }
  return summary;
}

}  // namespace gnmr
