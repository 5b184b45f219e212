// Command line of gnmr-synth. The interface is stable (users script it):
//
//   gnmr-synth --target T --job J --rank R --world-size W --steps N
//              [--units U] [--spike STEP:UNIT:FACTOR]... [--nan STEP:UNIT]...
//              [--step-ms MS] [--decision-wait-ms MS] [--token TOKEN] [--json]
//              [--plans-out FILE]
//
// UNIT is a unit index or a unit name; names are resolved against the
// model layout (synth_model.h) after parsing.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "gnmr/status.h"

namespace gnmr::synth {

struct Spike {
  int64_t step = 0;
  std::string unit;  // index or name, resolved later
  double factor = 1.0;
};

struct NanAt {
  int64_t step = 0;
  std::string unit;
};

struct Flags {
  std::string target;
  std::string job;
  uint32_t rank = 0;
  uint32_t world_size = 1;
  int64_t steps = 0;
  uint32_t units = 16;
  std::vector<Spike> spikes;
  std::vector<NanAt> nans;
  int64_t step_ms = 0;
  int64_t decision_wait_ms = 2000;
  std::string token;
  bool json = false;
  std::string plans_out;  // one line per planned step, flushed as it goes
  bool help = false;
};

// Parses argv (without argv[0]). InvalidArgument names the flag at fault.
StatusOr<Flags> ParseFlags(const std::vector<std::string>& args);

// The --help text, generated from the same declarations as the parser.
std::string Usage();

}  // namespace gnmr::synth
