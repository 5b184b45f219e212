// memory_caps: what clients' requests make a real gnmrd hold, against the
// footprint formula its memory budget reserves (docs/limits.md, "Memory";
// figures in docs/perf.md).
//
// Each scenario starts a fresh gnmrd (Unix socket, metrics on, event log
// and snapshots in a scratch state dir), reads its RSS once idle (the
// baseline of that run), drives it, and prints the peak RSS growth (VmHWM
// minus the baseline) next to what the formula allows. The formula must
// bound the growth; the exit status says whether it did.
//
// Usage: memory_caps --gnmrd PATH [--scenario NAME] [--scale F] [--name-pad N]
// Scenarios (all by default):
//   window     one rank registers U units with short_window W, steps
//   ranks      R ranks register the same U units (replicas), steps
//   manyranks  many ranks, a connection each, few units
//   stalled    R ranks x U units, one rank never reports: open steps pile up
//   queue      U non-finite units, max_o U, a rank that never reads
//   events     U non-finite units, max_o 1: U-1 denial events per step
//   jobs       N small jobs
//   worst      the default config, filled with the worst shapes the default
//              caps admit until memory_budget refuses: peak RSS against the
//              documented worst case
//   inflight   K clients at once send a Register of max_message_bytes
//              (refused by the budget): the transient cost of requests
//   caps       registrations past each cap and past the budget (refusals)
// The shape scenarios raise the caps (a 64 GiB budget) to isolate one job.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "bench/memory_caps_harness.h"
#include "common/flag_parser.h"
#include "daemon/job/resource_caps.h"
#include "daemon/store/event_log.h"

namespace {

using gnmr::JobCaps;
using gnmr::JobFootprint;
using gnmr::JobShape;
using gnmr::bench::Config;
using gnmr::bench::g_name_pad;
using gnmr::bench::Gnmrd;
using gnmr::bench::Mib;
using gnmr::bench::RegisterOf;
using gnmr::bench::SimRank;
using gnmr::bench::Sleep;
using gnmr::bench::UnitName;
namespace v1 = gnmr::v1;

uint64_t NameBytes(int units) {
  uint64_t n = 0;
  for (int u = 0; u < units; ++u) n += UnitName(u).size();
  return n;
}

// The caps of a gnmrd with the default config.
JobCaps DefaultCaps() {
  JobCaps caps;
  caps.event_ring_bytes = gnmr::store::RingMemoryBound(gnmr::store::EventLogOptions{});
  return caps;
}

JobShape Shape(int units, int window, int ranks, int max_o) {
  JobShape s;
  s.units = units;
  s.name_bytes = NameBytes(units);
  s.window = window;
  s.rank_units = static_cast<uint64_t>(units) * ranks;
  s.layout_entries = units;              // replicas registering the same units share one layout
  s.reported_rank_units = s.rank_units;  // report: all (the default)
  s.slots = units;
  s.ranks = ranks;
  s.max_o = max_o;
  return s;
}

uint64_t Footprint(int units, int window, int ranks, int max_o) {
  return JobFootprint(Shape(units, window, ranks, max_o), DefaultCaps());
}

// The daemon-wide term besides the jobs: events waiting for the writer.
uint64_t EventLogTerm() { return gnmr::store::EventLog::MemoryBound({}); }

int failures = 0;

// `jobs`: the footprints of the jobs created (what memory_budget reserves);
// the growth may use those and the event log's term.
void Row(const char* scenario, const std::string& what, uint64_t base, uint64_t growth,
         uint64_t jobs) {
  const uint64_t allowed = jobs + EventLogTerm();
  const bool ok = growth <= allowed;
  if (!ok) ++failures;
  std::printf("| %s | %s | %.0f | %.1f | %.1f | %.1f | %.2f | %s |\n", scenario, what.c_str(),
              Mib(base), Mib(growth), Mib(jobs), Mib(allowed),
              static_cast<double>(growth) / static_cast<double>(allowed), ok ? "ok" : "OVER");
  std::fflush(stdout);
}

void Report(const char* scenario, const std::string& what, const Gnmrd& d, uint64_t jobs) {
  Row(scenario, what, d.base(), d.PeakGrowth(), jobs);
}

const char* kRaised =
    "memory_budget: 64GiB\nmax_window_cells_per_job: 17179869184\n"
    "max_rank_units_per_job: 17179869184\nmax_o_limit: 16777216\n";

// `ranks` ranks of job `job` on connections of their own, registered and
// streaming (the last `stalled` of them never report; with read = false
// they never read either).
std::vector<std::unique_ptr<SimRank>> StartRanks(Gnmrd& d, const std::string& job, int ranks,
                                                 int units, const v1::ControllerConfig& c,
                                                 bool read = true) {
  std::vector<std::unique_ptr<SimRank>> rs;
  for (int k = 0; k < ranks; ++k) {
    rs.push_back(std::make_unique<SimRank>(d.Connect(k), job, k, ranks));
    const grpc::Status s = rs.back()->Register(units, &c);
    if (!s.ok()) {
      throw std::runtime_error(job + " rank " + std::to_string(k) + ": " + s.error_message());
    }
    rs.back()->Open(read || k == 0);
  }
  return rs;
}

// Every rank but the last `silent` reports `steps` steps of `value`, one
// step at a time once rank 0 has its decision (unless silent > 0).
void Drive(std::vector<std::unique_ptr<SimRank>>& rs, int steps, double value, int silent = 0) {
  for (int t = 0; t < steps; ++t) {
    for (size_t k = 0; k + silent < rs.size(); ++k) rs[k]->Send(t, value);
    if (silent == 0) rs[0]->WaitDecisions(t + 1);
  }
}

void Window(const std::string& bin, int units, int window, int steps) {
  Gnmrd d(bin, kRaised);
  auto rs = StartRanks(d, "w", 1, units, Config(window, 4));
  Drive(rs, steps, 1.0);
  Sleep(2000);  // snapshots written
  Report("window", std::to_string(units) + " units x window " + std::to_string(window), d,
         Footprint(units, window, 1, 4));
}

void Ranks(const std::string& bin, const char* name, int ranks, int units, int steps) {
  Gnmrd d(bin, kRaised);
  auto rs = StartRanks(d, "r", ranks, units, Config(4, 4));
  Drive(rs, steps, 1.0);
  Sleep(500);
  Report(name,
         std::to_string(ranks) + " ranks (a connection each) x " + std::to_string(units) + " units",
         d, Footprint(units, 4, ranks, 4));
}

void Stalled(const std::string& bin, int ranks, int units, int steps) {
  Gnmrd d(bin, kRaised);
  auto rs = StartRanks(d, "s", ranks, units, Config(4, 4));
  Drive(rs, steps, 1.0, /*silent=*/1);
  Sleep(2000);
  Report("stalled",
         std::to_string(ranks) + " ranks x " + std::to_string(units) + " units, " +
             std::to_string(steps) + " steps, 1 rank silent",
         d, Footprint(units, 4, ranks, 4));
}

void Queue(const std::string& bin, int units, int steps) {
  Gnmrd d(bin, kRaised);
  auto rs = StartRanks(d, "q", 2, units, Config(4, units), /*read=*/false);
  Drive(rs, steps, NAN);
  Sleep(500);
  Report("queue",
         std::to_string(units) + " units in recovery (max_o " + std::to_string(units) + "), " +
             std::to_string(steps) + " steps, 1 rank never reads",
         d, Footprint(units, 4, 2, units));
}

void Events(const std::string& bin, int units, int steps) {
  Gnmrd d(bin, kRaised);
  auto rs = StartRanks(d, "e", 1, units, Config(4, 1));
  Drive(rs, steps, NAN);
  Sleep(1000);
  Report("events",
         std::to_string(units) + " non-finite units, max_o 1, " + std::to_string(steps) +
             " steps (" + std::to_string(static_cast<int64_t>(units - 1) * steps) + " denials)",
         d, Footprint(units, 4, 1, 1));
}

void Jobs(const std::string& bin, int jobs, int units, int steps) {
  Gnmrd d(bin, kRaised);
  std::vector<std::unique_ptr<SimRank>> all;
  for (int j = 0; j < jobs; ++j) {
    auto rs = StartRanks(d, "job" + std::to_string(j), 1, units, Config(4, 4));
    Drive(rs, steps, 1.0);
    for (auto& r : rs) all.push_back(std::move(r));
  }
  Sleep(1000);
  Report("jobs", std::to_string(jobs) + " jobs x " + std::to_string(units) + " units", d,
         jobs * Footprint(units, 4, 1, 4));
}

// K Registers of ~`bytes` each, at once, for jobs the budget refuses: what
// requests in flight cost (they are parsed before anything can refuse them).
void Inflight(const std::string& bin, int clients, int units) {
  Gnmrd d(bin, "memory_budget: 64MiB\n");
  const v1::ControllerConfig c = Config(4, 4);
  const size_t bytes = RegisterOf("inflight-0", 0, 1, units, &c).ByteSizeLong();
  std::vector<std::thread> threads;
  std::atomic<int> refused{0};
  for (int k = 0; k < clients; ++k) {
    threads.emplace_back([&, k] {
      SimRank r(d.Connect(k), "inflight-" + std::to_string(k), 0, 1);
      if (r.Register(units, &c).error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED) ++refused;
    });
  }
  for (std::thread& t : threads) t.join();
  Sleep(300);
  const uint64_t growth = d.PeakGrowth();
  std::printf(
      "| inflight | %d Registers of %.1f MiB at once (%d refused) | %.0f | %.1f | - | - "
      "| %.1f x the bytes | |\n",
      clients, Mib(bytes), refused.load(), Mib(d.base()), Mib(growth),
      static_cast<double>(growth) / static_cast<double>(clients * bytes));
  std::fflush(stdout);
}

// The default config (but the scratch paths), filled with the worst shapes
// its caps admit until memory_budget refuses a job.
void Worst(const std::string& bin, double scale) {
  Gnmrd d(bin, "");
  std::vector<std::unique_ptr<SimRank>> all;
  uint64_t reserved = 0;
  auto keep = [&](std::vector<std::unique_ptr<SimRank>> rs) {
    for (auto& r : rs) all.push_back(std::move(r));
  };
  // units x short_window at the cap (2^22 cells, the largest window),
  // stepping until the window is full and snapshotted.
  const int wide = std::max(16, static_cast<int>(4096 * scale));
  auto w = StartRanks(d, "worst-window", 1, wide, Config(1024, 4));
  Drive(w, 1024 + 60, 1.0);
  keep(std::move(w));
  reserved += Footprint(wide, 1024, 1, 4);
  // 16 ranks of 16384 units, one silent: open steps to max_open_step_bytes.
  const int units = std::max(16, static_cast<int>(16384 * scale));
  auto s = StartRanks(d, "worst-stalled", 16, units, Config(4, 4));
  Drive(s, 200, 1.0, /*silent=*/1);
  keep(std::move(s));
  reserved += Footprint(units, 4, 16, 4);
  // max_o at the cap, every unit in recovery, a rank that never reads.
  auto q = StartRanks(d, "worst-queue", 2, 4096, Config(4, 4096), /*read=*/false);
  Drive(q, 300, NAN);
  keep(std::move(q));
  reserved += Footprint(4096, 4, 2, 4096);
  // A flood of denial events.
  auto e = StartRanks(d, "worst-events", 1, 4000, Config(4, 1));
  Drive(e, 40, NAN);
  keep(std::move(e));
  reserved += Footprint(4000, 4, 1, 1);
  // Then jobs of 65536 units, and of 16, until the budget refuses.
  int big = 0, small = 0;
  const v1::ControllerConfig c = Config(4, 4);
  for (const int n : {std::max(16, static_cast<int>(65536 * scale)), 16}) {
    for (int j = 0;; ++j) {
      const std::string job = "worst-fill-" + std::to_string(n) + "-" + std::to_string(j);
      auto r = std::make_unique<SimRank>(d.Connect(j % 64), job, 0, 1);
      const grpc::Status st = r->Register(n, &c);
      if (!st.ok()) {
        std::printf("(%s refused: %s)\n", job.c_str(), st.error_message().c_str());
        break;
      }
      r->Open(true);
      r->Send(0, 1.0);
      r->Send(1, 1.0);
      reserved += Footprint(n, 4, 1, 4);
      (n == 16 ? small : big)++;
      all.push_back(std::move(r));
    }
  }
  Sleep(2000);  // snapshots and event files written
  const uint64_t budget = uint64_t{1} << 30;
  std::printf("(worst: %d + %d fill jobs; formula reserved %.0f MiB of the 1024 MiB budget)\n", big,
              small, Mib(reserved));
  Row("worst",
      "default caps, filled until memory_budget refused (4 worst shapes + " + std::to_string(big) +
          " x 65536 units + " + std::to_string(small) + " x 16 units)",
      d.base(), d.PeakGrowth(), reserved);
  // docs/limits.md: base + budget + event log + 10 x the requests in flight.
  const uint64_t documented = d.base() + budget + EventLogTerm() + 10 * (uint64_t{64} << 20);
  std::printf("(worst: peak RSS %.0f MiB; the documented bound with this baseline %.0f MiB)\n",
              Mib(d.Peak()), Mib(documented));
  if (d.Peak() > documented) ++failures;
}

// Past each cap, and past the budget: the refusal and its message.
// (The default config, but max_rank_units_per_job and memory_budget lowered
// to reach them quickly.)
void Caps(const std::string& bin) {
  Gnmrd d(bin, "max_rank_units_per_job: 100000\nmemory_budget: 256MiB\n");
  std::printf("\n| request | result | message |\n| --- | --- | --- |\n");
  auto try_register = [&](const char* what, const std::string& job, uint32_t rank, uint32_t world,
                          int units, int window, int max_o) {
    SimRank r(d.channel(), job, rank, world);
    const v1::ControllerConfig c = Config(window, max_o);
    const grpc::Status s = r.Register(units, &c);
    std::printf("| %s | %s | %s |\n", what,
                s.ok() ? "OK"
                : s.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED
                    ? "RESOURCE_EXHAUSTED"
                    : std::to_string(s.error_code()).c_str(),
                s.error_message().c_str());
  };
  try_register("20000 units x window 1024", "a", 0, 1, 20000, 1024, 4);
  try_register("max_o 100000", "b", 0, 1, 10, 4, 100000);
  try_register("rank 0: 60000 units", "r", 0, 2, 60000, 4, 4);
  try_register("rank 1: the same 60000 units", "r", 1, 2, 60000, 4, 4);
  try_register("another job of 90000 units", "c", 0, 1, 90000, 4, 4);
  std::printf("(RSS growth %.1f MiB)\n", Mib(d.PeakGrowth()));
}

void Run(const std::string& bin, const std::string& scenario, double scale) {
  auto n = [scale](int v) { return std::max(1, static_cast<int>(v * scale)); };
  auto run = [&](const char* name) { return scenario == "all" || scenario == name; };
  std::printf(
      "formula terms: event log %.1f MiB, a job's event ring %.0f KiB, an empty job "
      "%.2f MiB\n\n",
      Mib(EventLogTerm()), gnmr::store::RingMemoryBound({}) / 1024.0, Mib(Footprint(0, 4, 0, 4)));
  std::printf(
      "| scenario | shape | baseline RSS MiB | peak growth MiB | footprints MiB | + event log "
      "MiB | growth / bound | |\n| --- | --- | --- | --- | --- | --- | --- | --- |\n");
  // Steps: the window full, then a snapshot (every 50 steps) of it.
  if (run("window")) Window(bin, n(4096), 1024, 1024 + 60);
  if (run("window")) Window(bin, n(262144), 4, 60);
  if (run("ranks")) Ranks(bin, "ranks", 64, n(16384), 5);
  if (run("manyranks")) Ranks(bin, "manyranks", n(2000), 16, 5);
  if (run("stalled")) Stalled(bin, 16, n(16384), 80);
  if (run("queue")) Queue(bin, n(4096), 300);
  if (run("events")) Events(bin, n(2000), 40);
  if (run("jobs")) Jobs(bin, n(200), 64, 3);
  if (run("worst")) Worst(bin, scale);
  if (run("inflight")) Inflight(bin, 1, n(1000000));
  if (run("inflight")) Inflight(bin, 4, n(1000000));
  if (run("caps")) Caps(bin);
}

}  // namespace

int main(int argc, char** argv) {
  std::string bin, scenario = "all";
  double scale = 1.0;
  int64_t name_pad = g_name_pad;
  gnmr::FlagParser p("memory_caps --gnmrd PATH [--scenario NAME] [--scale F] [--name-pad N]",
                     "gnmrd's memory against its caps and budget (docs/limits.md), each\n"
                     "scenario against a real gnmrd; prints a table.");
  p.AddString("gnmrd", "PATH", "the gnmrd binary (required)", &bin);
  p.AddValue("scenario", "NAME",
             "window|ranks|manyranks|stalled|queue|events|jobs|worst|\n"
             "inflight|caps|all (default all)",
             [&scenario](const std::string& v) {
               for (const char* known : {"window", "ranks", "manyranks", "stalled", "queue",
                                         "events", "jobs", "worst", "inflight", "caps", "all"}) {
                 if (v == known) {
                   scenario = v;
                   return gnmr::Status::Ok();
                 }
               }
               return gnmr::InvalidArgument("unknown scenario '" + v + "'");
             });
  p.AddDouble("scale", "F", "multiply each scenario's size by F (default 1)", &scale);
  p.AddInt("name-pad", "N", "pad unit names to N bytes", 0, 1 << 20, &name_pad);
  const gnmr::Status s = p.Parse(argc - 1, argv + 1);
  if (p.help_requested()) {
    std::fputs(p.Help().c_str(), stdout);
    return 0;
  }
  if (!s.ok() || bin.empty()) {
    std::fprintf(stderr, "memory_caps: %s\n%s",
                 s.ok() ? "--gnmrd is required" : s.message().c_str(), p.Help().c_str());
    return 2;
  }
  g_name_pad = static_cast<int>(name_pad);
  try {
    Run(bin, scenario, scale);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "memory_caps: %s\n", e.what());
    return 1;
  }
  return failures == 0 ? 0 : 1;
}
