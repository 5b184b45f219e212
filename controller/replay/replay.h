// Offline replay: feed a recorded trace through the GNMR controller and
// write its decisions as JSON Lines (`gnmrctl replay`).
//
// Replay runs exactly the controller the daemon runs, so a config can be
// tuned offline on a trace of a real job. One line per decision that admits,
// releases or denies anything (Decision::HasChanges), with unit names:
//
//   {"observed_step":120,"apply_step":121,
//    "admitted":[{"unit":"layers.3.mlp.fc1","action":"promote","until":141,
//                 "trigger":"gnmr","gnmr":4.12,"delta":2.9}],
//    "released":[],"denied":[],"in_recovery":["layers.3.mlp.fc1"],
//    "global_skip":false}
//
// With `denied: clip`, the denials clipped on their step are also listed as
// "denied_clipped":[...] after "denied" (only when there are any); they
// are not in "in_recovery" (they hold no budget).
// An admission whose sample the forward channel evaluated (forward columns,
// past the channel's warmup) also carries its figures after "delta":
// "fwd_ratio" (F), "saturation_ratio" (S) and "underflow_ratio" (U), as its
// rules compared them with their thresholds (docs/controller.md, "Forward
// channel"); they are left out when all three are 0. One the backward
// channel evaluated also carries "bwd_ratio" (B) after them.
// `until` is the first step no longer in force. Numbers are written in
// their shortest round-trip form; `gnmr` and `delta` are null for a
// non-finite trigger (they were not evaluated) or a non-finite value.
#pragma once

#include <cstdint>
#include <cstdio>
#include <functional>
#include <ostream>
#include <string>
#include <string_view>

#include "controller/controller.h"
#include "controller/replay/trace_reader.h"
#include "gnmr/status.h"

namespace gnmr {

// Where the JSON Lines go. Writes come in blocks of tens of KiB.
class ByteSink {
 public:
  virtual ~ByteSink() = default;
  virtual Status Write(std::string_view bytes) = 0;
  virtual Status Flush() { return Status::Ok(); }
};

class FileSink : public ByteSink {
 public:
  // Does not take ownership of `f`; `name` is used in error messages.
  FileSink(std::FILE* f, std::string name) : f_(f), name_(std::move(name)) {}
  Status Write(std::string_view bytes) override;
  Status Flush() override;

 private:
  std::FILE* f_;
  std::string name_;
};

class OstreamSink : public ByteSink {
 public:
  explicit OstreamSink(std::ostream& os) : os_(os) {}
  Status Write(std::string_view bytes) override;

 private:
  std::ostream& os_;
};

class NullSink : public ByteSink {
 public:
  Status Write(std::string_view bytes) override {
    bytes_ += bytes.size();
    return Status::Ok();
  }
  uint64_t bytes() const { return bytes_; }

 private:
  uint64_t bytes_ = 0;
};

struct ReplayProgress {
  uint64_t steps = 0;
  uint64_t rows = 0;
  uint64_t bytes = 0;        // trace bytes consumed
  uint64_t total_bytes = 0;  // 0 if unknown
};

struct ReplayOptions {
  ControllerConfig config;
  // Called after every step (optional); the caller throttles its output.
  std::function<void(const ReplayProgress&)> on_step;
};

struct ReplaySummary {
  std::string trace;  // the trace's name
  uint64_t steps = 0;
  uint64_t units = 0;
  int64_t first_step = -1;
  int64_t last_step = -1;
  uint64_t decisions_written = 0;
  ControllerStats stats;  // the controller's counters at the end
};

// Replays every step of `reader` (already opened) into a fresh controller,
// writing decisions to `out`. Trace errors come back as "FILE:LINE: ...".
StatusOr<ReplaySummary> RunReplay(TraceReader* reader, const ReplayOptions& options, ByteSink* out);

// Feeds one step of `reader` to `controller`: registers the units the step
// names first (in the reader's first-appearance order, so the controller's
// ids equal the reader's), then observes it. Errors as "FILE:LINE: ...".
Status ObserveTraceStep(const TraceReader& reader, const TraceStep& step, Controller* controller,
                        Decision* out);

// Appends one decision as a JSON object and a newline; names come from
// `controller`, which produced the decision.
void AppendDecisionJson(const Decision& d, const Controller& controller, std::string* out);

// A human-readable summary, several lines, each ending in a newline.
std::string FormatReplaySummary(const ReplaySummary& s);

}  // namespace gnmr
