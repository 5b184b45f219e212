// SoakRun: the soak test's driver (docs/perf.md, "gnmrd soak"). Many simulated
// ranks of one data-parallel job step in lock step against the real gnmrd
// while it is killed with -9 and restarted, ranks drop out and come back,
// and bad clients (bad_clients.h) hammer it; gnmrd's memory and file
// descriptors are sampled from outside.
//
// Each step t: every rank in the job sends its statistics of t, the driver
// waits until each has the decision of t, then every rank works out its
// plan for t + 1 and acks it. What is checked (Result::failures lists every
// violation):
// - plans: for every step, every rank that planned it holds the same
//   decision (generation, sequence, digest); no plan has more than max_o
//   units in recovery; no two ranks ever received different decisions
//   under one (generation, sequence) (the ledger); gnmrd counted no ack
//   mismatch (gnmr_ack_mismatches_total, summed over its incarnations);
// - restarts: the restored job lost at most the documented window of
//   decided steps (snapshot_every_steps, plus the few decided while the
//   newest snapshot was being written), and its
//   rebuilt decision is exactly one the ranks had received (same sequence,
//   digest and apply step);
// - liveness: no step stalls (every decision reaches every rank), gnmrd
//   never dies by itself, bad clients get only the statuses they should,
//   and the final graceful stop exits 0 and restores every decided step;
// - resources: in the restart-free tail of the run, resident memory and
//   open file descriptors stay flat (bounds in Flatness()), and the state
//   dir stays bounded (idle expiry, event-log rotation).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tests/soak/bad_clients.h"
#include "tests/soak/gnmrd_child.h"
#include "tests/soak/sim_rank.h"

namespace gnmr::soak {

struct SoakOptions {
  std::string gnmrd;
  double duration_s = 600;
  uint32_t ranks = 256;
  uint32_t units = 1024;
  double rate = 10;             // steps/s; 0: as fast as decisions come
  double restart_every_s = 90;  // kill -9 period; 0: never
  int churn_every_steps = 50;   // ranks leave and come back
  uint32_t churn_ranks = 8;
  int churn_absent_steps = 3;
  double quiet_tail = 0.34;  // last fraction of the run: no restarts
  double sample_every_s = 5;
  uint32_t snapshot_every_steps = 20;
  bool keep_dir = false;
};

struct Sample {
  double t = 0;         // seconds since start
  int incarnation = 0;  // 1 + restarts so far
  ProcessFigures process;
  uint64_t state_bytes = 0;
  int job_dirs = 0;
  double jobs = -1;   // gnmr_jobs
  int64_t steps = 0;  // decided so far
};

struct SoakResult {
  std::vector<Sample> samples;
  int64_t steps_decided = 0;
  int restarts = 0;
  int churns = 0;  // rank departures
  uint64_t plans_compared = 0;
  uint64_t plan_mismatches = 0;
  int max_lost_steps = 0;
  double ack_mismatches = 0;  // gnmrd's counter, all incarnations
  uint64_t ledger_conflicts = 0;
  BadClients::Report bad;
  double elapsed_s = 0;
  std::string dir;
  std::vector<std::string> failures;
};

class SoakRun {
 public:
  explicit SoakRun(SoakOptions options);
  ~SoakRun();
  // Runs the whole soak; Result::failures is empty when it passed.
  SoakResult Run();

 private:
  void Fail(std::string what);
  bool RegisterAndAttach(std::vector<SimRank*> ranks, std::vector<v1::RegisterResponse>* out);
  // Waits until each of `ranks` has the decision of `step`; false on
  // timeout (failure recorded).
  bool AwaitDecision(const std::vector<SimRank*>& ranks, int64_t step);
  void ComparePlans(const std::vector<SimRank*>& ranks, int64_t step);
  void Restart(int64_t last_decided);
  void Churn(int64_t step);
  void TakeSample(double t);
  void AddAckMismatches();
  void CheckFlatness();
  double Now() const;

  const SoakOptions o_;
  std::string dir_;
  JobSpec job_;
  DecisionLedger ledger_;
  Progress progress_;
  std::unique_ptr<GnmrdChild> gnmrd_;
  std::unique_ptr<BadClients> bad_;
  std::vector<std::unique_ptr<SimRank>> ranks_;
  std::vector<int64_t> away_until_;  // churned rank: back at this step (-1: in)
  std::chrono::steady_clock::time_point start_;
  SoakResult result_;
  uint64_t generation_ = 0;
};

}  // namespace gnmr::soak
