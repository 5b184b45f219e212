// `gnmrctl replay`: offline replay of a recorded trace through the GNMR
// controller (see controller/replay/replay.h for the output format), and
// what-if tables over config variants (controller/replay/what_if.h).
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "common/flag_parser.h"
#include "controller/config_yaml.h"
#include "controller/replay/replay.h"
#include "controller/replay/what_if.h"
#include "programs/gnmrctl/commands.h"
#include "programs/gnmrctl/output_file.h"
#include "programs/gnmrctl/table.h"

namespace gnmr {
namespace cli {
namespace {

constexpr char kUsage[] =
    "gnmrctl replay --trace TRACE.csv [--config CONFIG.yaml] "
    "[--set key=value ...] [--variant key=value[,key=value...] ...] [--table] "
    "[--out FILE]";

constexpr char kDescriptionHead[] =
    "Feeds a recorded trace through the GNMR controller, exactly as gnmrd\n"
    "would, and writes one JSON line per decision that admits, releases or\n"
    "denies anything:\n"
    "  {\"observed_step\", \"apply_step\", \"admitted\": [{\"unit\", \"action\",\n"
    "   \"until\", \"trigger\", \"gnmr\", \"delta\"}], \"released\": [...],\n"
    "   \"denied\": [...], \"in_recovery\": [...], \"global_skip\"}\n"
    "`until` is the first step no longer in force; `trigger` is nonfinite,\n"
    "gnmr, delta, a forward channel rule (forward, saturation, underflow,\n"
    "block_saturation, dead_blocks, scale_clamps, relative_error) or a\n"
    "backward channel rule (backward, backward_saturation,\n"
    "backward_underflow). An admission the forward channel evaluated also\n"
    "carries its figures \"fwd_ratio\", \"saturation_ratio\",\n"
    "\"underflow_ratio\"; one the backward channel evaluated \"bwd_ratio\".\n"
    "A summary goes to stderr at the end.\n"
    "\n"
    "What-if: with --variant (or --table) it prints a table instead, one row\n"
    "per config: `base` (--config and --set) first, then each variant, a\n"
    "list of key=value overrides applied on top of the base, e.g.\n"
    "  --variant tau=3 --variant tau=4 --variant 'tau=3,max_o=2'\n"
    "Columns: admissions (all, and by trigger: nonfinite, gnmr, delta),\n"
    "denials, releases, global skips, recovery fraction (unit-steps in\n"
    "recovery / unit-steps observed) and peak units in recovery. The trace\n"
    "is read once for all variants.\n"
    "\n"
    "Trace: CSV with header step,unit,sumsq and optional columns\n"
    "amax,nonfinite,zeros,numel and fwd_sumsq,fwd_amax,fwd_saturated,\n"
    "fwd_zeros,fwd_numel,fwd_order (forward channel) and fwd_blocks,\n"
    "fwd_saturated_blocks,fwd_dead_blocks,fwd_scale_clamps (block columns)\n"
    "and fwd_source_numel,fwd_underflow,fwd_error_sumsq,fwd_source_sumsq\n"
    "(source columns) and bwd_sumsq,bwd_saturated,bwd_zeros,bwd_numel,\n"
    "bwd_order (backward channel), in any order; the rows of a step are contiguous and steps "
    "increase;\n"
    "sumsq may be nan or inf.\n"
    "\n";
constexpr char kDescriptionTail[] =
    "\n"
    "\n"
    "Exit codes: 0 success; 2 bad arguments or input (one line\n"
    "'gnmrctl: FILE:LINE: problem' on stderr); 1 other failures.";

// A one-line progress report on stderr, about once a second, only when
// stderr is a terminal.
class ProgressLine {
 public:
  explicit ProgressLine(bool enabled) : enabled_(enabled), start_(Clock::now()), last_(start_) {}

  void Update(const ReplayProgress& p) {
    if (!enabled_ || p.rows - checked_rows_ < 65536) return;
    checked_rows_ = p.rows;
    const Clock::time_point now = Clock::now();
    if (now - last_ < std::chrono::seconds(1)) return;
    last_ = now;
    const double secs = std::chrono::duration<double>(now - start_).count();
    std::fprintf(stderr, "\rreplay: %llu steps, %llu rows",
                 static_cast<unsigned long long>(p.steps), static_cast<unsigned long long>(p.rows));
    if (p.total_bytes > 0) {
      std::fprintf(stderr, ", %.0f%%", 100.0 * p.bytes / p.total_bytes);
    }
    std::fprintf(stderr, ", %.2f M rows/s\033[K", secs > 0 ? p.rows / secs / 1e6 : 0.0);
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

// The what-if table: one row per variant, the numbers of ControllerStats.
std::string FormatWhatIfTable(const WhatIfSummary& s) {
  Table t({{"variant"},
           {"admissions", Table::Align::kRight},
           {"nonfinite", Table::Align::kRight},
           {"gnmr", Table::Align::kRight},
           {"delta", Table::Align::kRight},
           {"denials", Table::Align::kRight},
           {"releases", Table::Align::kRight},
           {"global skips", Table::Align::kRight},
           {"recovery fraction", Table::Align::kRight},
           {"peak in recovery", Table::Align::kRight}});
  for (const WhatIfResult& r : s.results) {
    const ControllerStats& st = r.stats;
    const auto& by = st.admissions_by_trigger;
    t.AddRow({r.label, std::to_string(st.admissions()),
              std::to_string(by[static_cast<int>(Trigger::kNonFinite)]),
              std::to_string(by[static_cast<int>(Trigger::kGnmr)]),
              std::to_string(by[static_cast<int>(Trigger::kDelta)]), std::to_string(st.denials),
              std::to_string(st.releases), std::to_string(st.global_skips),
              FormatPercent(st.recovery_fraction()), std::to_string(st.peak_in_recovery)});
  }
  return t.Render();
}

int ExitCodeFor(const Status& s) {
  switch (s.code()) {
    case StatusCode::kInvalidArgument:
    case StatusCode::kNotFound:
      return kExitUsage;
    default:
      return kExitFailure;
  }
}

// Prints the failure; its exit code.
int Failed(const Status& s) {
  PrintError(s.message());
  return ExitCodeFor(s);
}

struct ReplayFlags {
  std::string trace, config_path, out_path;
  std::vector<std::string> sets, variants;
  bool quiet = false, table = false;
};

void AddReplayFlags(FlagParser* flags, ReplayFlags* f) {
  flags->AddString("trace", "TRACE.csv", "the trace to replay (required)", &f->trace);
  flags->AddString("config", "CONFIG.yaml", "controller config (YAML); defaults when absent",
                   &f->config_path);
  flags->AddRepeated("set", "KEY=VALUE",
                     "override one config key after --config, e.g.\n"
                     "--set max_o=2 or --set 'actions=[{pattern: \"*.fc1\", "
                     "action: clip}]'",
                     &f->sets);
  flags->AddRepeated("variant", "KEY=VALUE[,...]",
                     "a what-if row: overrides on top of the base,\n"
                     "e.g. --variant tau=3 --variant 'tau=3,max_o=2'",
                     &f->variants);
  flags->AddBool("table", "print the what-if table (base only without --variant)", &f->table);
  flags->AddString("out", "FILE", "write the decisions (or the table) there instead of stdout",
                   &f->out_path);
  flags->AddBool("quiet", "no summary and no progress on stderr", &f->quiet);
}

// --config, then each --set; kExitOk or the exit code of what failed
// (printed).
int LoadBaseConfig(const ReplayFlags& f, ControllerConfig* config) {
  if (!f.config_path.empty()) {
    StatusOr<ControllerConfig> loaded = LoadControllerConfigFile(f.config_path);
    if (!loaded.ok()) return Failed(loaded.status());
    *config = loaded.value();
  }
  for (const std::string& assignment : f.sets) {
    Status s = ApplyOverride(config, assignment);
    if (!s.ok()) {
      PrintError(s.message());
      return kExitUsage;
    }
  }
  return kExitOk;
}

// The what-if rows, `base` first (none without --variant and --table);
// kExitOk or kExitUsage (printed).
int BuildVariants(const ReplayFlags& f, const ControllerConfig& base,
                  std::vector<WhatIfVariant>* what_if) {
  if (f.table || !f.variants.empty()) what_if->push_back({"base", base});
  for (const std::string& spec : f.variants) {
    StatusOr<std::vector<std::string>> parts = SplitVariant(spec);
    if (!parts.ok()) {
      PrintError(parts.status().message());
      return kExitUsage;
    }
    WhatIfVariant v{spec, base};
    for (const std::string& assignment : parts.value()) {
      Status s = ApplyOverride(&v.config, assignment);
      if (!s.ok()) {
        std::string message = s.message();
        if (message.rfind("--set ", 0) == 0) message.erase(0, 6);
        PrintError("--variant '" + spec + "': " + message);
        return kExitUsage;
      }
    }
    what_if->push_back(std::move(v));
  }
  return kExitOk;
}

int WriteWhatIfTable(TraceReader* reader, const std::vector<WhatIfVariant>& what_if, bool quiet,
                     OutputFile* output, FileSink* sink, ProgressLine* progress) {
  StatusOr<WhatIfSummary> summary =
      RunWhatIf(reader, what_if, [progress](const ReplayProgress& p) { progress->Update(p); });
  progress->Clear();
  Status s;
  if (summary.ok()) s = sink->Write(FormatWhatIfTable(summary.value()));
  if (summary.ok() && s.ok()) s = output->Commit();
  if (!summary.ok() || !s.ok()) return Failed(summary.ok() ? s : summary.status());
  if (!quiet) {
    std::fprintf(stderr, "what-if %s: %llu steps (%lld..%lld), %llu units, %zu config(s)\n",
                 summary->trace.c_str(), static_cast<unsigned long long>(summary->steps),
                 static_cast<long long>(summary->first_step),
                 static_cast<long long>(summary->last_step),
                 static_cast<unsigned long long>(summary->units), summary->results.size());
  }
  return kExitOk;
}

int WriteDecisions(TraceReader* reader, const ControllerConfig& config, const ReplayFlags& f,
                   OutputFile* output, FileSink* sink, ProgressLine* progress) {
  ReplayOptions options;
  options.config = config;
  options.on_step = [progress](const ReplayProgress& p) { progress->Update(p); };
  StatusOr<ReplaySummary> summary = RunReplay(reader, options, sink);
  progress->Clear();
  Status s;
  if (summary.ok()) s = output->Commit();
  if (!summary.ok() || !s.ok()) return Failed(summary.ok() ? s : summary.status());
  if (!f.quiet) {
    std::string text = FormatReplaySummary(summary.value());
    if (!f.out_path.empty() && f.out_path != "-") {
      text.insert(text.size() - 1, " to " + f.out_path);
    }
    std::fputs(text.c_str(), stderr);
  }
  return kExitOk;
}

}  // namespace

int ReplayCommand(int argc, char** argv) {
  ReplayFlags f;
  FlagParser flags(kUsage, kDescriptionHead +
                               ConfigKeysHelp("Config keys (YAML file and --set)",
                                              "replaced as a whole by --set") +
                               kDescriptionTail);
  AddReplayFlags(&flags, &f);
  Status s = flags.Parse(argc, argv);
  if (!s.ok()) {
    PrintError("replay: " + s.message() + " (see gnmrctl replay --help)");
    return kExitUsage;
  }
  if (flags.help_requested()) {
    std::fputs(flags.Help().c_str(), stdout);
    return kExitOk;
  }
  if (f.trace.empty()) {
    PrintError("replay: --trace is required (see gnmrctl replay --help)");
    return kExitUsage;
  }
  ControllerConfig config;
  if (int rc = LoadBaseConfig(f, &config); rc != kExitOk) return rc;
  // What-if variants: validated before the trace is opened.
  std::vector<WhatIfVariant> what_if;
  if (int rc = BuildVariants(f, config, &what_if); rc != kExitOk) return rc;

  TraceReader reader;
  s = reader.OpenFile(f.trace);
  if (!s.ok()) return Failed(s);
  OutputFile output;
  s = output.Open(f.out_path);
  if (!s.ok()) return Failed(s);
  FileSink sink(output.file(), output.name());
  ProgressLine progress(!f.quiet && ::isatty(STDERR_FILENO) == 1);
  if (!what_if.empty()) {
    return WriteWhatIfTable(&reader, what_if, f.quiet, &output, &sink, &progress);
  }
  return WriteDecisions(&reader, config, f, &output, &sink, &progress);
}

}  // namespace cli
}  // namespace gnmr
