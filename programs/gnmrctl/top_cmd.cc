// `gnmrctl top`: a live terminal view of one job, for a login node without
// Grafana: recovery budget, units in recovery with the steps they have left,
// the top units by GNMR with a sparkline of their recent GNMR, ranks and
// their lag, recent events. Refreshes every --interval seconds on the
// alternate screen (plain ANSI, no curses) until q or Ctrl-C; --once, or a
// stdout that is not a terminal, prints one frame without escapes and exits.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <unordered_set>
#include <vector>

#include "common/text.h"
#include "controller/publish/wire_names.h"
#include "programs/gnmrctl/admin_client.h"
#include "programs/gnmrctl/commands.h"
#include "programs/gnmrctl/table.h"
#include "programs/gnmrctl/terminal.h"

namespace gnmr {
namespace cli {
namespace {

using Align = Table::Align;
using Clock = std::chrono::steady_clock;

constexpr size_t kSparkSamples = 30;       // GNMR samples kept per unit
constexpr size_t kTopUnits = 10;           // rows of the top-units table
constexpr uint32_t kEvents = 8;            // rows of the events table
constexpr uint32_t kAllUnitsUpTo = 20000;  // beyond: the top kLargeJobTop + recovery
constexpr uint32_t kLargeJobTop = 2000;
constexpr int kBudgetBarWidth = 20;

// One poll of the daemon.
struct Snapshot {
  v1::JobInfo job;
  std::vector<v1::UnitInfo> units;  // as returned (all, or the top N)
  bool units_truncated = false;
  std::vector<v1::Event> events;
};

// --- the frame ---

// Number of code points (the sparkline's block characters are 3 bytes each).
size_t Columns(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80 ? 1 : 0;
  return n;
}

// `s` cut to `width` code points.
std::string Clip(const std::string& s, size_t width) {
  if (Columns(s) <= width) return s;
  size_t cols = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    if ((static_cast<unsigned char>(s[i]) & 0xC0) != 0x80) {
      if (cols == width) return s.substr(0, i);
      ++cols;
    }
  }
  return s;
}

// ▁▂▃▄▅▆▇█ from 0 to the largest sample (NaN: a space).
std::string Sparkline(const std::deque<double>& samples) {
  static const char* const kBlocks[] = {"\u2581", "\u2582", "\u2583", "\u2584",
                                        "\u2585", "\u2586", "\u2587", "\u2588"};
  double top = 0;
  for (double v : samples) {
    if (std::isfinite(v)) top = std::max(top, v);
  }
  std::string out;
  for (double v : samples) {
    if (!std::isfinite(v)) {
      out += ' ';
      continue;
    }
    const double f = top > 0 ? std::clamp(v / top, 0.0, 1.0) : 0.0;
    out += kBlocks[static_cast<int>(std::lround(f * 7))];
  }
  return out;
}

std::string BudgetBar(int64_t used, int64_t max_o) {
  std::string bar = "[";
  const int filled =
      max_o > 0 ? static_cast<int>(std::min<int64_t>(used, max_o) * kBudgetBarWidth / max_o) : 0;
  bar.append(static_cast<size_t>(filled), '#');
  bar.append(static_cast<size_t>(kBudgetBarWidth - filled), '-');
  return bar + "]";
}

std::string Dash(const std::string& s) { return s.empty() ? "-" : EscapeForLog(s); }

class TopView {
 public:
  TopView(std::string job, std::string target) : job_(std::move(job)), target_(std::move(target)) {}

  // Polls the daemon; false with `error` set when a call failed.
  bool Poll(AdminClient& client, Snapshot* snap, grpc::Status* error) {
    v1::ListJobsResponse jobs;
    grpc::Status g = client.stub().ListJobs(client.Context().get(), v1::ListJobsRequest(), &jobs);
    if (!g.ok()) return *error = g, false;
    bool found = false;
    for (const v1::JobInfo& j : jobs.jobs()) {
      if (j.job_id() == job_) {
        snap->job = j;
        found = true;
      }
    }
    if (!found) {
      *error = grpc::Status(grpc::StatusCode::NOT_FOUND, "no job '" + job_ + "'");
      return false;
    }
    v1::ListUnitsRequest ureq;
    ureq.set_job_id(job_);
    snap->units_truncated = snap->job.units() > kAllUnitsUpTo;
    ureq.set_top(snap->units_truncated ? kLargeJobTop : 0);
    v1::ListUnitsResponse units;
    g = client.stub().ListUnits(client.Context().get(), ureq, &units);
    if (!g.ok()) return *error = g, false;
    snap->units.assign(units.units().begin(), units.units().end());
    if (snap->units_truncated) {
      // Every unit in recovery, also those below the top N (the daemon
      // filters: at most max_o of them).
      ureq.set_top(0);
      ureq.set_state(v1::UNIT_STATE_RECOVERY);
      v1::ListUnitsResponse recovering;
      g = client.stub().ListUnits(client.Context().get(), ureq, &recovering);
      if (!g.ok()) return *error = g, false;
      std::unordered_set<uint32_t> listed;
      for (const v1::UnitInfo& u : snap->units) listed.insert(u.unit_id());
      for (const v1::UnitInfo& u : recovering.units()) {
        if (listed.insert(u.unit_id()).second) snap->units.push_back(u);
      }
    }
    v1::ListEventsRequest ereq;
    ereq.set_job_id(job_);
    ereq.set_since_step(std::numeric_limits<int64_t>::min());
    ereq.set_limit(kEvents);
    v1::ListEventsResponse events;
    g = client.stub().ListEvents(client.Context().get(), ereq, &events);
    if (!g.ok()) return *error = g, false;
    snap->events.assign(events.events().begin(), events.events().end());
    return true;
  }

  // Takes a new snapshot into the histories (GNMR samples, step rate).
  void Record(const Snapshot& snap, Clock::time_point now) {
    const int64_t step = snap.job.last_step();
    if (last_poll_ && step >= 0 && last_step_ >= 0) {
      const double dt = std::chrono::duration<double>(now - *last_poll_).count();
      if (dt > 0) rate_ = static_cast<double>(step - last_step_) / dt;
    }
    last_poll_ = now;
    last_step_ = step;
    // A sample per unit per new decided step (not per refresh: a stalled
    // job's sparkline stays put).
    if (step != sampled_step_) {
      sampled_step_ = step;
      for (const v1::UnitInfo& u : snap.units) {
        std::deque<double>& h = history_[u.name()];
        h.push_back(u.gnmr());
        while (h.size() > kSparkSamples) h.pop_front();
      }
    }
  }

  // The frame as lines (no escapes).
  std::vector<std::string> Render(const Snapshot& snap, const std::string& error) const {
    const v1::JobInfo& j = snap.job;
    std::vector<std::string> out;
    int connected = 0;
    for (const v1::RankInfo& r : j.ranks()) connected += r.connected() ? 1 : 0;
    char line[512];
    std::snprintf(line, sizeof(line),
                  "gnmrctl top  job %s  step %s  rate %s  ranks %d/%u connected  (%s)",
                  job_.c_str(), FormatStep(j.last_step()).c_str(),
                  rate_ ? (FormatNumber(*rate_, 3) + " steps/s").c_str() : "- steps/s", connected,
                  j.world_size(), target_.c_str());
    out.push_back(line);
    // "denied 5 (3 clipped)" with denied: clip; as before without clips.
    const std::string clipped =
        j.denied_clips() > 0 ? " (" + std::to_string(j.denied_clips()) + " clipped)" : "";
    std::snprintf(line, sizeof(line),
                  "budget %s %u/%d in recovery  admitted %llu  denied %llu%s  recovery %s  "
                  "units %u",
                  BudgetBar(j.in_recovery(), j.max_o()).c_str(), j.in_recovery(), j.max_o(),
                  static_cast<unsigned long long>(j.admissions()),
                  static_cast<unsigned long long>(j.denials()), clipped.c_str(),
                  FormatPercent(j.recovery_fraction()).c_str(), j.units());
    out.push_back(line);
    if (!error.empty()) out.push_back("! " + error);
    out.push_back("");

    // Units in recovery, fewest steps left first.
    std::vector<const v1::UnitInfo*> recovering;
    for (const v1::UnitInfo& u : snap.units) {
      if (u.state() == v1::UNIT_STATE_RECOVERY) recovering.push_back(&u);
    }
    std::stable_sort(
        recovering.begin(), recovering.end(),
        [](const v1::UnitInfo* a, const v1::UnitInfo* b) { return a->until() < b->until(); });
    out.push_back("IN RECOVERY (" + std::to_string(j.in_recovery()) + "/" +
                  std::to_string(j.max_o()) + ")");
    Table rt({{"UNIT"},
              {"ACTION"},
              {"SINCE", Align::kRight},
              {"UNTIL", Align::kRight},
              {"STEPS LEFT", Align::kRight},
              {"GNMR", Align::kRight}});
    for (const v1::UnitInfo* u : recovering) {
      const int64_t left = j.last_step() >= 0 ? std::max<int64_t>(0, u->until() - j.last_step())
                                              : u->until() - u->since();
      rt.AddRow({EscapeForLog(u->name()), ActionText(u->action()), std::to_string(u->since()),
                 std::to_string(u->until()), std::to_string(left), FormatNumber(u->gnmr())});
    }
    Append(&out, rt.rows() > 0 ? rt.Render("  ") : "  none\n");
    out.push_back("");

    // Top units by GNMR (NaN counts as 0), with their sparklines.
    std::vector<const v1::UnitInfo*> top;
    for (const v1::UnitInfo& u : snap.units) top.push_back(&u);
    auto key = [](const v1::UnitInfo* u) { return std::isfinite(u->gnmr()) ? u->gnmr() : 0.0; };
    std::stable_sort(top.begin(), top.end(), [&](const v1::UnitInfo* a, const v1::UnitInfo* b) {
      if (key(a) != key(b)) return key(a) > key(b);
      return a->unit_id() < b->unit_id();
    });
    if (top.size() > kTopUnits) top.resize(kTopUnits);
    out.push_back("TOP UNITS BY GNMR");
    Table tt({{"UNIT"},
              {"STATE"},
              {"GNMR", Align::kRight},
              {"DELTA", Align::kRight},
              {"NORM", Align::kRight},
              {"MU", Align::kRight},
              {"GNMR (last " + std::to_string(kSparkSamples) + " steps)"}});
    for (const v1::UnitInfo* u : top) {
      auto h = history_.find(u->name());
      tt.AddRow({EscapeForLog(u->name()), UnitStateName(u->state()), FormatNumber(u->gnmr()),
                 FormatNumber(u->delta()), FormatNumber(u->norm()), FormatNumber(u->mu()),
                 h == history_.end() ? "" : Sparkline(h->second)});
    }
    Append(&out, tt.rows() > 0 ? tt.Render("  ") : "  no units\n");
    out.push_back("");

    out.push_back("RANKS");
    Table kt({{"RANK", Align::kRight},
              {"CONNECTED"},
              {"LAST STEP", Align::kRight},
              {"LAG", Align::kRight},
              {"LAST SEEN", Align::kRight}});
    std::vector<v1::RankInfo> ranks(j.ranks().begin(), j.ranks().end());
    // The laggards first.
    std::stable_sort(ranks.begin(), ranks.end(), [](const v1::RankInfo& a, const v1::RankInfo& b) {
      if (a.lag_steps() != b.lag_steps()) return a.lag_steps() > b.lag_steps();
      return a.rank() < b.rank();
    });
    for (const v1::RankInfo& r : ranks) {
      kt.AddRow({std::to_string(r.rank()), r.connected() ? "yes" : "no", FormatStep(r.last_step()),
                 std::to_string(r.lag_steps()),
                 FormatDuration(r.last_seen_seconds_ago()) + " ago"});
    }
    Append(&out, kt.rows() > 0 ? kt.Render("  ") : "  no ranks registered\n");
    out.push_back("");

    out.push_back("EVENTS (last " + std::to_string(kEvents) + ")");
    Table et({{"STEP", Align::kRight},
              {"KIND"},
              {"UNIT"},
              {"ACTION"},
              {"TRIGGER"},
              {"GNMR", Align::kRight},
              {"UNTIL", Align::kRight},
              {"DETAIL"}});
    for (const v1::Event& e : snap.events) {
      const bool decided = EventHasStatistics(e.kind());
      const bool acted = EventHasAction(e.kind());
      et.AddRow({FormatStep(e.observed_step()), EventKindName(e.kind()), Dash(e.unit()),
                 acted ? ActionText(e.action()) : "-",
                 e.trigger() == v1::TRIGGER_NONE ? "-" : TriggerText(e.trigger()),
                 decided ? FormatNumber(e.gnmr()) : "-",
                 e.until() > 0 ? std::to_string(e.until()) : "-", Dash(e.detail())});
    }
    Append(&out, et.rows() > 0 ? et.Render("  ") : "  no events\n");
    return out;
  }

 private:
  static void Append(std::vector<std::string>* out, const std::string& text) {
    size_t start = 0;
    for (size_t nl; (nl = text.find('\n', start)) != std::string::npos; start = nl + 1) {
      out->push_back(text.substr(start, nl - start));
    }
  }

  std::string job_, target_;
  std::optional<Clock::time_point> last_poll_;
  int64_t last_step_ = -1;
  int64_t sampled_step_ = std::numeric_limits<int64_t>::min();
  std::optional<double> rate_;
  std::map<std::string, std::deque<double>> history_;
};

std::string ErrorText(const AdminClient& client, const grpc::Status& g) {
  if (g.error_code() == grpc::StatusCode::UNAVAILABLE ||
      g.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
    return "cannot reach gnmrd at " + client.target() + ": " + g.error_message() + " (retrying)";
  }
  return std::string(StatusCodeName(CodeOf(g))) + ": " + g.error_message();
}

}  // namespace

int TopCommand(int argc, char** argv) {
  AdminCommand cmd("top", "gnmrctl top --job J [--interval S] [--once] [options]",
                   "A live view of one job, refreshed every --interval seconds: step,\n"
                   "step rate, ranks connected, the recovery budget (units in recovery /\n"
                   "max_o), the units in recovery with the steps they have left, the top\n"
                   "units by GNMR with a sparkline of their last 30 GNMR samples (kept by\n"
                   "gnmrctl while it runs), the ranks with their lag, and the last events.\n"
                   "q or Ctrl-C quits. With --once, or when stdout is not a terminal, prints\n"
                   "one frame without escape sequences and exits.");
  cmd.AddJobFlag();
  std::string interval_text = "1";
  bool once = false;
  cmd.flags().AddString("interval", "S", "seconds between refreshes (default 1)", &interval_text);
  cmd.flags().AddBool("once", "print one frame and exit", &once);
  if (auto rc = cmd.Start(argc, argv)) return *rc;
  char* end = nullptr;
  const double interval = std::strtod(interval_text.c_str(), &end);
  if (interval_text.empty() || *end != '\0' || !(interval >= 0.1) || interval > 3600) {
    return cmd.Usage("--interval '" + interval_text + "': expected seconds in [0.1, 3600]");
  }
  if (cmd.json()) return cmd.Usage("--json is not supported (see gnmrctl jobs/units --json)");

  AdminClient& client = cmd.client();
  TopView view(cmd.job(), client.target());
  Snapshot snap;
  grpc::Status error;
  // The first poll decides: an unknown job or an unreachable daemon is an
  // error (exit 1) before the screen is taken.
  if (!view.Poll(client, &snap, &error)) return client.Fail(error);
  view.Record(snap, Clock::now());

  if (once || !::isatty(STDOUT_FILENO)) {
    std::string frame;
    for (const std::string& l : view.Render(snap, "")) frame += l + "\n";
    std::fputs(frame.c_str(), stdout);
    return kExitOk;
  }

  Terminal terminal;
  std::string error_text;
  for (;;) {
    const auto [cols, rows] = Terminal::Size();
    std::vector<std::string> lines = view.Render(snap, error_text);
    if (lines.size() > static_cast<size_t>(rows)) lines.resize(static_cast<size_t>(rows));
    std::string frame = Terminal::ClearFrame();
    for (size_t i = 0; i < lines.size(); ++i) {
      frame += Clip(lines[i], static_cast<size_t>(cols));
      if (i + 1 < lines.size()) frame += "\r\n";
    }
    Terminal::Write(frame);
    const auto next = Clock::now() + std::chrono::microseconds(std::llround(interval * 1e6));
    if (terminal.WaitForQuit(next - Clock::now())) break;
    Snapshot fresh;
    if (view.Poll(client, &fresh, &error)) {
      snap = std::move(fresh);
      view.Record(snap, Clock::now());
      error_text.clear();
    } else {
      error_text = ErrorText(client, error);  // keep the last frame, show why
    }
  }
  return kExitOk;
}

}  // namespace cli
}  // namespace gnmr
