// `gnmrctl replay`: offline replay of a recorded trace through the GNMR
// controller (see controller/replay/replay.h for the output format).
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "controller/config_yaml.h"
#include "controller/replay/replay.h"
#include "tools/gnmrctl/commands.h"
#include "tools/gnmrctl/flags.h"
#include "tools/gnmrctl/output_file.h"

namespace gnmr {
namespace cli {
namespace {

constexpr char kUsage[] =
    "gnmrctl replay --trace TRACE.csv [--config CONFIG.yaml] "
    "[--set key=value ...] [--out DECISIONS.jsonl]";

constexpr char kDescription[] =
    "Feeds a recorded trace through the GNMR controller, exactly as gnmrd\n"
    "would, and writes one JSON line per decision that admits, releases or\n"
    "denies anything:\n"
    "  {\"observed_step\", \"apply_step\", \"admitted\": [{\"unit\", \"action\",\n"
    "   \"until\", \"trigger\", \"gnmr\", \"delta\"}], \"released\": [...],\n"
    "   \"denied\": [...], \"in_recovery\": [...], \"global_skip\"}\n"
    "`until` is the first step no longer in force; `trigger` is nonfinite,\n"
    "gnmr or delta. A summary goes to stderr at the end.\n"
    "\n"
    "Trace: CSV with header step,unit,sumsq and optional columns\n"
    "amax,nonfinite,zeros,numel, in any order; the rows of a step are\n"
    "contiguous and steps increase; sumsq may be nan or inf.\n"
    "\n"
    "Config keys (YAML file and --set): warmup, ema_decay, tau, tau_delta,\n"
    "gnmr_floor, short_window, max_o, lock_steps, lag, entry, clip_min_scale,\n"
    "actions (a list of {pattern, action, clip_min_scale}).\n"
    "\n"
    "Exit codes: 0 success; 2 bad arguments or input (one line\n"
    "'gnmrctl: FILE:LINE: problem' on stderr); 1 other failures.";

// A one-line progress report on stderr, about once a second, only when
// stderr is a terminal.
class ProgressLine {
 public:
  explicit ProgressLine(bool enabled)
      : enabled_(enabled), start_(Clock::now()), last_(start_) {}

  void Update(const ReplayProgress& p) {
    if (!enabled_ || p.rows - checked_rows_ < 65536) return;
    checked_rows_ = p.rows;
    const Clock::time_point now = Clock::now();
    if (now - last_ < std::chrono::seconds(1)) return;
    last_ = now;
    const double secs = std::chrono::duration<double>(now - start_).count();
    std::fprintf(stderr, "\rreplay: %llu steps, %llu rows",
                 static_cast<unsigned long long>(p.steps),
                 static_cast<unsigned long long>(p.rows));
    if (p.total_bytes > 0) {
      std::fprintf(stderr, ", %.0f%%", 100.0 * p.bytes / p.total_bytes);
    }
    std::fprintf(stderr, ", %.2f M rows/s\033[K",
                 secs > 0 ? p.rows / secs / 1e6 : 0.0);
    std::fflush(stderr);
    shown_ = true;
  }
  void Clear() {
    if (shown_) std::fputs("\r\033[K", stderr);
    shown_ = false;
  }

 private:
  using Clock = std::chrono::steady_clock;
  bool enabled_;
  bool shown_ = false;
  uint64_t checked_rows_ = 0;
  Clock::time_point start_, last_;
};

int ExitCodeFor(const Status& s) {
  switch (s.code()) {
    case StatusCode::kInvalidArgument:
    case StatusCode::kNotFound:
      return kExitUsage;
    default:
      return kExitFailure;
  }
}

}  // namespace

int ReplayCommand(int argc, char** argv) {
  std::string trace, config_path, out_path;
  std::vector<std::string> sets;
  bool quiet = false;
  FlagParser flags(kUsage, kDescription);
  flags.AddString("trace", "TRACE.csv", "the trace to replay (required)",
                  &trace);
  flags.AddString("config", "CONFIG.yaml",
                  "controller config (YAML); defaults when absent", &config_path);
  flags.AddRepeated("set", "KEY=VALUE",
                    "override one config key after --config, e.g.\n"
                    "--set max_o=2 or --set 'actions=[{pattern: \"*.fc1\", "
                    "action: clip}]'",
                    &sets);
  flags.AddString("out", "DECISIONS.jsonl",
                  "write the decisions there instead of stdout", &out_path);
  flags.AddBool("quiet", "no summary and no progress on stderr", &quiet);

  Status s = flags.Parse(argc, argv);
  if (!s.ok()) {
    PrintError("replay: " + s.message() + " (see gnmrctl replay --help)");
    return kExitUsage;
  }
  if (flags.help_requested()) {
    std::fputs(flags.Help().c_str(), stdout);
    return kExitOk;
  }
  if (trace.empty()) {
    PrintError("replay: --trace is required (see gnmrctl replay --help)");
    return kExitUsage;
  }

  ControllerConfig config;
  if (!config_path.empty()) {
    StatusOr<ControllerConfig> loaded = LoadControllerConfigFile(config_path);
    if (!loaded.ok()) {
      PrintError(loaded.status().message());
      return ExitCodeFor(loaded.status());
    }
    config = loaded.value();
  }
  for (const std::string& assignment : sets) {
    s = ApplyOverride(&config, assignment);
    if (!s.ok()) {
      PrintError(s.message());
      return kExitUsage;
    }
  }

  TraceReader reader;
  s = reader.OpenFile(trace);
  if (!s.ok()) {
    PrintError(s.message());
    return ExitCodeFor(s);
  }
  OutputFile output;
  s = output.Open(out_path);
  if (!s.ok()) {
    PrintError(s.message());
    return ExitCodeFor(s);
  }
  FileSink sink(output.file(), output.name());
  ProgressLine progress(!quiet && ::isatty(STDERR_FILENO) == 1);
  ReplayOptions options;
  options.config = config;
  options.on_step = [&progress](const ReplayProgress& p) {
    progress.Update(p);
  };
  StatusOr<ReplaySummary> summary = RunReplay(&reader, options, &sink);
  progress.Clear();
  if (summary.ok()) s = output.Commit();
  if (!summary.ok() || !s.ok()) {
    const Status& err = summary.ok() ? s : summary.status();
    PrintError(err.message());
    return ExitCodeFor(err);
  }
  if (!quiet) {
    std::string text = FormatReplaySummary(summary.value());
    if (!out_path.empty() && out_path != "-") {
      text.insert(text.size() - 1, " to " + out_path);
    }
    std::fputs(text.c_str(), stderr);
  }
  return kExitOk;
}

}  // namespace cli
}  // namespace gnmr
