// `gnmrctl events`: a job's recent events (admissions, releases, denials,
// global skips, config changes, operator releases, imports), one line each; --follow
// keeps polling for new ones until Ctrl-C.
#include <chrono>
#include <csignal>
#include <cstdio>
#include <ctime>
#include <limits>
#include <set>
#include <string>
#include <thread>

#include "common/text.h"
#include "controller/publish/event_json.h"
#include "controller/publish/wire_names.h"
#include "programs/gnmrctl/admin_client.h"
#include "programs/gnmrctl/commands.h"
#include "programs/gnmrctl/table.h"

namespace gnmr {
namespace cli {
namespace {

using Align = Table::Align;

volatile std::sig_atomic_t g_stop = 0;
void OnSignal(int) { g_stop = 1; }

constexpr uint32_t kMaxLimit = 100000;  // the daemon's cap
constexpr uint32_t kFollowPage = 1000;

std::string LocalTime(double unix_seconds) {
  if (!(unix_seconds > 0)) return "-";
  const std::time_t t = static_cast<std::time_t>(unix_seconds);
  std::tm tm{};
  localtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%H:%M:%S", &tm);
  return buf;
}

Table EventTable() {
  return Table({{"TIME"},
                {"STEP", Align::kRight},
                {"KIND"},
                {"UNIT"},
                {"ACTION"},
                {"TRIGGER"},
                {"GNMR", Align::kRight},
                {"DELTA", Align::kRight},
                {"FWD F/S/U", Align::kRight},
                {"UNTIL", Align::kRight},
                {"DETAIL"}});
}

void AddEvent(Table* t, const v1::Event& e) {
  const bool decided = EventHasStatistics(e.kind());
  const bool acted = EventHasAction(e.kind());
  // Unit names and details come from the daemon (and the trainers before
  // it): escaped, so no byte of theirs reaches the terminal raw.
  auto dash = [](const std::string& s) { return s.empty() ? std::string("-") : EscapeForLog(s); };
  t->AddRow({LocalTime(e.time_unix()), FormatStep(e.observed_step()), EventKindName(e.kind()),
             dash(e.unit()), acted ? ActionText(e.action()) : "-",
             e.trigger() == v1::TRIGGER_NONE ? "-" : TriggerText(e.trigger()),
             decided ? FormatNumber(e.gnmr()) : "-", decided ? FormatNumber(e.delta()) : "-",
             ForwardFiguresText(e), e.until() > 0 ? std::to_string(e.until()) : "-",
             dash(e.detail())});
}

// Prints new events as they come; see the loop in EventsCommand.
class EventPrinter {
 public:
  EventPrinter(std::string job, bool json)
      : job_(std::move(job)), json_(json), table_(EventTable()) {}

  // Prints the events of `resp` not printed before (the poll asks from the
  // newest step seen, so events of that step come again).
  void Print(const v1::ListEventsResponse& resp) {
    for (const v1::Event& e : resp.events()) {
      if (e.observed_step() > newest_) {
        newest_ = e.observed_step();
        at_newest_.clear();
      }
      if (e.observed_step() == newest_ && !at_newest_.insert(e.SerializeAsString()).second) {
        continue;
      }
      if (json_) {
        // The event log's own line format (names, not enum numbers), so
        // a script reads `gnmrctl events --json` and the log alike.
        std::string line;
        AppendEventJsonLine(job_, e, &line);
        std::fputs(line.c_str(), stdout);
      } else {
        AddEvent(&table_, e);
      }
    }
    if (!json_ && table_.rows() > 0) {
      std::fputs(table_.RenderNew(!header_printed_).c_str(), stdout);
      header_printed_ = true;
    }
    std::fflush(stdout);
  }
  int64_t newest() const { return newest_; }
  size_t at_newest() const { return at_newest_.size(); }

 private:
  std::string job_;
  bool json_;
  Table table_;
  bool header_printed_ = false;
  int64_t newest_ = std::numeric_limits<int64_t>::min();
  std::set<std::string> at_newest_;
};

}  // namespace

int EventsCommand(int argc, char** argv) {
  AdminCommand cmd("events",
                   "gnmrctl events --job J [--since STEP] [--limit N] [--follow] [options]",
                   "Prints a job's recent events, oldest first, one per line: time,\n"
                   "observed step, kind (admission, release, denial, global_skip,\n"
                   "config_change, admin_release, import, generation, ack_mismatch,\n"
                   "decision_failed, trace_dropped, denied_clip), unit, action, trigger,\n"
                   "GNMR, Delta-GNMR, the forward channel's figures F/S/U of an\n"
                   "admission or denial, whichever rule triggered it (FWD: forward\n"
                   "norm, saturation and underflow ratios; - when not evaluated;\n"
                   "docs/controller.md), the first step no longer\n"
                   "in force (UNTIL) and details. The daemon keeps the newest events of\n"
                   "each job in memory; older ones are in its event log.\n"
                   "With --json, one JSON object per line in the event log's format\n"
                   "(events.jsonl; docs/metrics.md, \"Event log\").");
  cmd.AddJobFlag();
  std::string since_text, limit_text;
  bool follow = false;
  cmd.flags().AddString("since", "STEP", "only events observed at or after STEP", &since_text);
  cmd.flags().AddString("limit", "N", "at most the newest N events (default 1000)", &limit_text);
  cmd.flags().AddBool("follow", "keep printing new events (polls every second) until Ctrl-C",
                      &follow);
  if (auto rc = cmd.Start(argc, argv)) return *rc;
  int64_t since = std::numeric_limits<int64_t>::min();  // events before step 0 too
  if (!since_text.empty()) {
    StatusOr<int64_t> v = ParseIntFlag("since", since_text, std::numeric_limits<int64_t>::min(),
                                       std::numeric_limits<int64_t>::max());
    if (!v.ok()) return cmd.Usage(v.status().message());
    since = *v;
  }
  uint32_t limit = 0;
  if (!limit_text.empty()) {
    StatusOr<int64_t> v = ParseIntFlag("limit", limit_text, 1, kMaxLimit);
    if (!v.ok()) return cmd.Usage(v.status().message());
    limit = static_cast<uint32_t>(*v);
  }

  EventPrinter printer(cmd.job(), cmd.json());
  v1::ListEventsRequest req;
  req.set_job_id(cmd.job());
  req.set_since_step(since);
  req.set_limit(limit);
  if (follow) {
    std::signal(SIGINT, OnSignal);
    std::signal(SIGTERM, OnSignal);
  }
  for (bool first = true; first || !g_stop; first = false) {
    if (!first) {
      for (int i = 0; i < 20 && !g_stop; ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
      if (g_stop) break;
      // From the newest step printed: its events come again (skipped), so
      // ask for enough to get past them.
      if (printer.newest() > since) req.set_since_step(printer.newest());
      req.set_limit(
          static_cast<uint32_t>(std::min<size_t>(kMaxLimit, printer.at_newest() + kFollowPage)));
    }
    v1::ListEventsResponse resp;
    const grpc::Status g = cmd.client().stub().ListEvents(cmd.client().Context().get(), req, &resp);
    if (!g.ok()) return cmd.client().Fail(g);
    printer.Print(resp);
    if (!follow) {
      if (resp.events().empty() && !cmd.json()) std::printf("no events\n");
      break;
    }
  }
  return kExitOk;
}

}  // namespace cli
}  // namespace gnmr
