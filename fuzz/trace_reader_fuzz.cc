// Fuzz target: the replay trace reader (controller/replay/trace_reader.h) and
// `gnmrctl replay` on what it reads (controller/replay/replay.h). The input is
// the trace file's bytes.
//
// Properties: the reader returns steps in increasing order, each with known
// unit ids, each unit at most once and no negative finite sumsq (-inf is a
// signal, like NaN); a trace the reader
// reads to the end replays through the controller without error.
#include <cmath>
#include <cstdint>
#include <string_view>
#include <vector>

#include "controller/replay/replay.h"
#include "controller/replay/trace_reader.h"
#include "fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);

  gnmr::TraceReader reader;
  gnmr::Status s = reader.OpenBuffer(bytes, "fuzz.csv");
  bool read_all = false;
  uint64_t steps = 0;
  if (s.ok()) {
    gnmr::TraceStep step;
    bool got = false;
    bool have_prev = false;
    int64_t prev = 0;
    std::vector<uint8_t> seen;
    while ((s = reader.Next(&step, &got)).ok() && got) {
      FUZZ_CHECK(!have_prev || step.step > prev, "step %lld after %lld",
                 static_cast<long long>(step.step), static_cast<long long>(prev));
      have_prev = true;
      prev = step.step;
      ++steps;
      seen.assign(reader.num_units(), 0);
      for (const gnmr::UnitSample& u : step.samples) {
        FUZZ_CHECK(u.unit_id < reader.num_units(), "unit id %u of %zu", u.unit_id,
                   reader.num_units());
        FUZZ_CHECK(!seen[u.unit_id], "unit %u twice in step", u.unit_id);
        seen[u.unit_id] = 1;
        FUZZ_CHECK(!(u.sumsq < 0) || std::isinf(u.sumsq), "negative sumsq %g", u.sumsq);
      }
    }
    read_all = s.ok();
  }

  // The same bytes through replay, with a short warmup so decisions happen.
  gnmr::TraceReader again;
  if (!again.OpenBuffer(bytes, "fuzz.csv").ok()) return 0;
  gnmr::ReplayOptions options;
  options.config.warmup = 2;
  options.config.short_window = 2;
  options.config.max_o = 2;
  options.config.lock_steps = 3;
  gnmr::NullSink sink;
  gnmr::StatusOr<gnmr::ReplaySummary> summary = gnmr::RunReplay(&again, options, &sink);
  if (read_all) {
    FUZZ_CHECK(summary.ok(), "reader accepted the trace, replay failed: %s",
               summary.status().ToString().c_str());
    FUZZ_CHECK(summary->steps == steps, "replay saw %llu steps, reader %llu",
               static_cast<unsigned long long>(summary->steps),
               static_cast<unsigned long long>(steps));
  }
  return 0;
}
