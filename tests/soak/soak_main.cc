// gnmr_soak: the soak test of gnmrd (docs/perf.md, "gnmrd soak"; soak_run.h says
// what it does and checks). Prints a report; exit 0 if every check passed,
// 1 if one failed, 2 on a bad command line. The gnmrd is the build's
// unless --gnmrd or $GNMRD_PATH names another.
//
//   gnmr_soak [--gnmrd PATH] [--duration 600] [--ranks 256]
//             [--units 1024] [--rate 10] [--restart-every 90] [--churn-every 50]
//             [--churn-ranks 8] [--quiet-tail 0.34] [--snapshot-every 20] [--keep]
#include <cstdio>
#include <cstdlib>
#include <string>

#include "tests/daemon/gnmrd_process.h"
#include "tests/soak/soak_run.h"

namespace {

using gnmr::soak::SoakOptions;
using gnmr::soak::SoakResult;

int Usage(const std::string& problem) {
  std::fprintf(stderr,
               "gnmr_soak: %s\nusage: gnmr_soak [--gnmrd PATH] [--duration S] [--ranks N] "
               "[--units N] [--rate STEPS_PER_S] [--restart-every S] [--churn-every STEPS] "
               "[--churn-ranks N] [--quiet-tail FRACTION] [--snapshot-every N] [--keep]\n",
               problem.c_str());
  return 2;
}

void PrintReport(const SoakOptions& o, const SoakResult& r) {
  std::printf("## gnmr_soak: %u ranks x %u units, %.0f s, rate %.0f steps/s\n\n", o.ranks, o.units,
              o.duration_s, o.rate);
  std::printf(
      "| t (s) | gnmrd run | RSS (MB) | peak RSS (MB) | fds | threads | jobs | job dirs "
      "| state (KB) | steps decided |\n");
  std::printf("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n");
  for (const gnmr::soak::Sample& s : r.samples) {
    std::printf("| %.0f | %d | %.1f | %.1f | %d | %d | %.0f | %d | %llu | %lld |\n", s.t,
                s.incarnation, s.process.rss_kb / 1024.0, s.process.hwm_kb / 1024.0, s.process.fds,
                s.process.threads, s.jobs, s.job_dirs,
                static_cast<unsigned long long>(s.state_bytes / 1024),
                static_cast<long long>(s.steps));
  }
  std::printf(
      "\nsteps decided: %lld in %.0f s (%.1f steps/s); gnmrd kill -9 restarts: %d; "
      "rank departures (churn): %d\n",
      static_cast<long long>(r.steps_decided), r.elapsed_s,
      r.elapsed_s > 0 ? r.steps_decided / r.elapsed_s : 0.0, r.restarts, r.churns);
  std::printf(
      "plans compared: %llu steps, differing: %llu; ledger conflicts: %llu; gnmrd ack "
      "mismatches: %.0f\n",
      static_cast<unsigned long long>(r.plans_compared),
      static_cast<unsigned long long>(r.plan_mismatches),
      static_cast<unsigned long long>(r.ledger_conflicts), r.ack_mismatches);
  std::printf(
      "most decided steps lost by a kill -9: %d (window: snapshot_every_steps %u, plus "
      "those decided during a snapshot write)\n",
      r.max_lost_steps, o.snapshot_every_steps);
  uint64_t answered = 0;
  for (const auto& [attack, n] : r.bad.expected) answered += n;
  std::printf(
      "bad clients: %llu calls answered as expected, %llu while gnmrd was down, %llu "
      "unexpected; %llu junk jobs\n",
      static_cast<unsigned long long>(answered), static_cast<unsigned long long>(r.bad.unavailable),
      static_cast<unsigned long long>(r.bad.unexpected),
      static_cast<unsigned long long>(r.bad.junk_jobs));
  for (const auto& [attack, n] : r.bad.expected) {
    std::printf("  %-20s %llu\n", attack.c_str(), static_cast<unsigned long long>(n));
  }
  for (const std::string& u : r.bad.unexpected_samples)
    std::printf("  unexpected: %s\n", u.c_str());
  if (r.failures.empty()) {
    std::printf("\nPASS\n");
  } else {
    std::printf("\nFAIL (%zu):\n", r.failures.size());
    for (const std::string& f : r.failures) std::printf("  - %s\n", f.c_str());
    std::printf("state dir and gnmrd log: %s%s\n", r.dir.c_str(), " (kept with --keep)");
  }
}

}  // namespace

int main(int argc, char** argv) {
  SoakOptions o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--keep") {
      o.keep_dir = true;
      continue;
    }
    if (a == "--help" || a == "-h") return Usage("the soak test of gnmrd"), 0;
    if (i + 1 >= argc) return Usage("missing value for " + a);
    const std::string v = argv[++i];
    const double x = std::atof(v.c_str());
    if (a == "--gnmrd")
      o.gnmrd = v;
    else if (a == "--duration")
      o.duration_s = x;
    else if (a == "--ranks")
      o.ranks = static_cast<uint32_t>(x);
    else if (a == "--units")
      o.units = static_cast<uint32_t>(x);
    else if (a == "--rate")
      o.rate = x;
    else if (a == "--restart-every")
      o.restart_every_s = x;
    else if (a == "--churn-every")
      o.churn_every_steps = static_cast<int>(x);
    else if (a == "--churn-ranks")
      o.churn_ranks = static_cast<uint32_t>(x);
    else if (a == "--quiet-tail")
      o.quiet_tail = x;
    else if (a == "--snapshot-every")
      o.snapshot_every_steps = static_cast<uint32_t>(x);
    else if (a == "--sample-every")
      o.sample_every_s = x;
    else
      return Usage("unknown option " + a);
  }
  if (o.gnmrd.empty()) o.gnmrd = gnmr::testing::GnmrdPath();
  if (o.ranks < 1 || o.units < 1 || o.duration_s <= 0 || o.quiet_tail <= 0 || o.quiet_tail >= 1 ||
      o.snapshot_every_steps < 1) {
    return Usage("bad sizes");
  }
  SoakResult r;
  {
    gnmr::soak::SoakRun run(o);
    r = run.Run();
  }
  PrintReport(o, r);
  std::fflush(stdout);
  return r.failures.empty() ? 0 : 1;
}
