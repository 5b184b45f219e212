#include "examples/gnmr_synth/synth_flags.h"

#include <limits>

#include "common/flag_parser.h"

namespace gnmr::synth {
namespace {

constexpr int64_t kMaxStepArg = std::numeric_limits<int64_t>::max() / 4;

std::vector<std::string> Split(const std::string& s, char sep) {
  std::vector<std::string> parts;
  size_t start = 0;
  for (;;) {
    const size_t i = s.find(sep, start);
    parts.push_back(s.substr(start, i == std::string::npos ? std::string::npos : i - start));
    if (i == std::string::npos) return parts;
    start = i + 1;
  }
}

// The one declaration of the command line: parsing and --help come from it.
struct Parser {
  Flags f;
  int64_t rank = -1, world_size = -1, steps = -1, units = 16;
  FlagParser p{
      "gnmr-synth --target T --job J --rank R --world-size W --steps N\n"
      "                  [--units U] [--spike STEP:UNIT:FACTOR]... [--nan STEP:UNIT]...\n"
      "                  [--step-ms MS] [--decision-wait-ms MS] [--token TOKEN] [--json]\n"
      "                  [--plans-out FILE]",
      "A synthetic trainer rank for GNMR: registers U units (4 per layer: attn.qkv,\n"
      "attn.out, mlp.fc1, mlp.fc2; qkv and fc1 sharded over 2 ranks when W is even),\n"
      "produces noisy per-unit gradients each step, calls Observe/PlanFor/Ack and\n"
      "applies the plan (promote, clip, skip). Run one process per rank."};

  Parser() {
    p.AddString("target", "T", "gnmrd address: unix:/path or host:port", &f.target);
    p.AddString("job", "J", "job id", &f.job);
    p.AddInt("rank", "R", "this rank, 0 <= R < W", 0, 65535, &rank);
    p.AddInt("world-size", "W", "ranks in the job", 1, 65536, &world_size);
    p.AddInt("steps", "N", "steps to run", 0, kMaxStepArg, &steps);
    p.AddInt("units", "U", "units to register (default 16)", 1, 1 << 20, &units);
    p.AddValue("spike", "STEP:UNIT:F",
               "multiply UNIT's gradient by F at STEP (every rank);\n"
               "UNIT is an index or a name; repeatable",
               [this](const std::string& v) {
                 const std::vector<std::string> parts = Split(v, ':');
                 Spike s;
                 if (parts.size() != 3 || !ParseFlagInt(parts[0], 0, kMaxStepArg, &s.step) ||
                     parts[1].empty() || !ParseFlagDouble(parts[2], &s.factor)) {
                   return InvalidArgument("'" + v + "': expected STEP:UNIT:FACTOR, e.g. 120:3:25");
                 }
                 s.unit = parts[1];
                 f.spikes.push_back(s);
                 return Status::Ok();
               });
    p.AddValue(
        "nan", "STEP:UNIT", "put a NaN in UNIT's gradient at STEP; repeatable",
        [this](const std::string& v) {
          const std::vector<std::string> parts = Split(v, ':');
          NanAt n;
          if (parts.size() != 2 || !ParseFlagInt(parts[0], 0, kMaxStepArg, &n.step) ||
              parts[1].empty()) {
            return InvalidArgument("'" + v + "': expected STEP:UNIT, e.g. 200:layers.1.mlp.fc1");
          }
          n.unit = parts[1];
          f.nans.push_back(n);
          return Status::Ok();
        });
    p.AddInt("step-ms", "MS", "pace steps to at least MS milliseconds (default 0)", 0, 3600000,
             &f.step_ms);
    p.AddInt("decision-wait-ms", "MS",
             "PlanFor waits up to MS for a decision that is\ncoming (default 2000)", 0, 3600000,
             &f.decision_wait_ms);
    p.AddString("token", "TOKEN", "job token", &f.token);
    p.AddBool("json", "print one JSON summary object on stdout at the end", &f.json);
    p.AddString("plans-out", "FILE",
                "append one line per step as it is planned:\n"
                "step,has_decision,generation,digest,miss_reason\n"
                "(kept when the process is killed: soak tests\n"
                "compare the ranks' plans)",
                &f.plans_out);
    p.SetEpilog(
        "Exit status: 0 done (also when no daemon answered: fail-open), 1 runtime\n"
        "error, 2 bad command line.\n");
  }
};

}  // namespace

std::string Usage() { return Parser().p.Help(); }

StatusOr<Flags> ParseFlags(const std::vector<std::string>& args) {
  Parser parser;
  GNMR_RETURN_IF_ERROR(parser.p.Parse(args));
  Flags& f = parser.f;
  if (parser.p.help_requested()) {
    f.help = true;
    return f;
  }
  if (f.target.empty()) return InvalidArgument("--target is required");
  if (f.job.empty()) return InvalidArgument("--job is required");
  if (parser.rank < 0) return InvalidArgument("--rank is required");
  if (parser.world_size < 0) return InvalidArgument("--world-size is required");
  if (parser.steps < 0) return InvalidArgument("--steps is required");
  if (parser.rank >= parser.world_size) return InvalidArgument("--rank must be < --world-size");
  f.rank = static_cast<uint32_t>(parser.rank);
  f.world_size = static_cast<uint32_t>(parser.world_size);
  f.steps = parser.steps;
  f.units = static_cast<uint32_t>(parser.units);
  return f;
}

}  // namespace gnmr::synth
