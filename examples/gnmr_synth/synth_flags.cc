#include "examples/gnmr_synth/synth_flags.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <limits>

namespace gnmr::synth {
namespace {

bool ParseInt(const std::string& s, int64_t lo, int64_t hi, int64_t* out) {
  if (s.empty()) return false;
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(s.c_str(), &end, 10);
  if (errno != 0 || *end != '\0' || v < lo || v > hi) return false;
  *out = v;
  return true;
}

bool ParseDouble(const std::string& s, double* out) {
  if (s.empty()) return false;
  errno = 0;
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (errno != 0 || *end != '\0' || !std::isfinite(v)) return false;
  *out = v;
  return true;
}

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

Status Bad(const std::string& flag, const std::string& value, const std::string& want) {
  return InvalidArgument(flag + " '" + value + "': expected " + want);
}

}  // namespace

const char* Usage() {
  return "usage: gnmr-synth --target T --job J --rank R --world-size W --steps N\n"
         "                  [--units U] [--spike STEP:UNIT:FACTOR]... [--nan STEP:UNIT]...\n"
         "                  [--step-ms MS] [--decision-wait-ms MS] [--token TOKEN] [--json]\n"
         "\n"
         "A synthetic trainer rank for GNMR: registers U units (4 per layer: attn.qkv,\n"
         "attn.out, mlp.fc1, mlp.fc2; qkv and fc1 sharded over 2 ranks when W is even),\n"
         "produces noisy per-unit gradients each step, calls Observe/PlanFor/Ack and\n"
         "applies the plan (promote, clip, skip). Run one process per rank.\n"
         "\n"
         "  --target T              gnmrd address: unix:/path or host:port\n"
         "  --job J                 job id\n"
         "  --rank R                this rank, 0 <= R < W\n"
         "  --world-size W          ranks in the job\n"
         "  --steps N               steps to run\n"
         "  --units U               units to register (default 16)\n"
         "  --spike STEP:UNIT:F     multiply UNIT's gradient by F at STEP (every rank);\n"
         "                          UNIT is an index or a name; repeatable\n"
         "  --nan STEP:UNIT         put a NaN in UNIT's gradient at STEP; repeatable\n"
         "  --step-ms MS            pace steps to at least MS milliseconds (default 0)\n"
         "  --decision-wait-ms MS   PlanFor waits up to MS for a decision that is\n"
         "                          coming (default 2000)\n"
         "  --token TOKEN           job token\n"
         "  --json                  print one JSON summary object on stdout at the end\n"
         "  --help                  this text\n"
         "\n"
         "Exit status: 0 done (also when no daemon answered: fail-open), 1 runtime\n"
         "error, 2 bad command line.\n";
}

StatusOr<Flags> ParseFlags(const std::vector<std::string>& args) {
  Flags f;
  bool have_target = false, have_job = false, have_rank = false, have_world = false,
       have_steps = false;
  int64_t v = 0;
  for (size_t i = 0; i < args.size(); ++i) {
    std::string flag = args[i];
    std::string value;
    bool has_value = false;
    const size_t eq = flag.find('=');
    if (flag.rfind("--", 0) == 0 && eq != std::string::npos) {
      value = flag.substr(eq + 1);
      flag = flag.substr(0, eq);
      has_value = true;
    }
    if (flag == "--help" || flag == "-h") {
      f.help = true;
      return f;
    }
    if (flag == "--json") {
      if (has_value) return InvalidArgument("--json takes no value");
      f.json = true;
      continue;
    }
    if (!has_value) {
      if (i + 1 >= args.size()) return InvalidArgument(flag + " needs a value");
      value = args[++i];
    }
    constexpr int64_t kMax = std::numeric_limits<int64_t>::max() / 4;
    if (flag == "--target") {
      f.target = value;
      have_target = !value.empty();
    } else if (flag == "--job") {
      f.job = value;
      have_job = !value.empty();
    } else if (flag == "--rank") {
      if (!ParseInt(value, 0, 65535, &v)) return Bad(flag, value, "an integer in 0..65535");
      f.rank = static_cast<uint32_t>(v);
      have_rank = true;
    } else if (flag == "--world-size") {
      if (!ParseInt(value, 1, 65536, &v)) return Bad(flag, value, "an integer in 1..65536");
      f.world_size = static_cast<uint32_t>(v);
      have_world = true;
    } else if (flag == "--steps") {
      if (!ParseInt(value, 0, kMax, &f.steps)) return Bad(flag, value, "a non-negative integer");
      have_steps = true;
    } else if (flag == "--units") {
      if (!ParseInt(value, 1, 1 << 20, &v)) return Bad(flag, value, "an integer in 1..1048576");
      f.units = static_cast<uint32_t>(v);
    } else if (flag == "--spike") {
      const std::vector<std::string> p = Split(value, ':');
      Spike s;
      if (p.size() != 3 || !ParseInt(p[0], 0, kMax, &s.step) || p[1].empty() ||
          !ParseDouble(p[2], &s.factor)) {
        return Bad(flag, value, "STEP:UNIT:FACTOR, e.g. 120:3:25");
      }
      s.unit = p[1];
      f.spikes.push_back(s);
    } else if (flag == "--nan") {
      const std::vector<std::string> p = Split(value, ':');
      NanAt n;
      if (p.size() != 2 || !ParseInt(p[0], 0, kMax, &n.step) || p[1].empty()) {
        return Bad(flag, value, "STEP:UNIT, e.g. 200:layers.1.mlp.fc1");
      }
      n.unit = p[1];
      f.nans.push_back(n);
    } else if (flag == "--step-ms") {
      if (!ParseInt(value, 0, 3600000, &f.step_ms)) return Bad(flag, value, "milliseconds >= 0");
    } else if (flag == "--decision-wait-ms") {
      if (!ParseInt(value, 0, 3600000, &f.decision_wait_ms)) {
        return Bad(flag, value, "milliseconds >= 0");
      }
    } else if (flag == "--token") {
      f.token = value;
    } else {
      return InvalidArgument("unknown flag '" + flag + "'");
    }
  }
  if (!have_target) return InvalidArgument("--target is required");
  if (!have_job) return InvalidArgument("--job is required");
  if (!have_rank) return InvalidArgument("--rank is required");
  if (!have_world) return InvalidArgument("--world-size is required");
  if (!have_steps) return InvalidArgument("--steps is required");
  if (f.rank >= f.world_size) return InvalidArgument("--rank must be < --world-size");
  return f;
}

}  // namespace gnmr::synth
