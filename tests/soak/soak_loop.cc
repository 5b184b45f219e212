// SoakRun::Run: the step loop (soak_run.h describes what it checks).
#include <sys/wait.h>

#include <thread>

#include <grpcpp/grpcpp.h>

#include "tests/soak/soak_run.h"

namespace gnmr::soak {
namespace {

using Clock = std::chrono::steady_clock;

}  // namespace

SoakResult SoakRun::Run() {
  start_ = Clock::now();
  if (!gnmrd_->Start()) {
    Fail("gnmrd did not start (see " + gnmrd_->log_path() + ")");
    return result_;
  }
  for (uint32_t r = 0; r < o_.ranks; ++r) {
    ranks_.push_back(std::make_unique<SimRank>(gnmrd_->target(), &job_, r, &ledger_, &progress_));
  }
  away_until_.assign(o_.ranks, -1);
  std::vector<SimRank*> all;
  for (auto& r : ranks_) all.push_back(r.get());
  std::vector<v1::RegisterResponse> resp;
  if (!RegisterAndAttach(all, &resp)) return result_;
  generation_ = resp[0].generation();

  BadClientSettings b;
  b.target = gnmrd_->target();
  b.main_job = job_.job_id;
  b.main_job_token = job_.token;
  b.admin_token = gnmrd_->settings().admin_token;
  bad_ = std::make_unique<BadClients>(b);
  bad_->Start();

  const double restart_until = o_.duration_s * (1 - o_.quiet_tail);
  double next_restart = o_.restart_every_s > 0 ? o_.restart_every_s : 1e300;
  double next_sample = 0;
  const auto loop_start = Clock::now();
  int64_t step = 0;
  int64_t last_decided = -1;
  int64_t paced = 0;
  while (Now() < o_.duration_s && result_.failures.size() < 20) {
    if (o_.rate > 0) {
      std::this_thread::sleep_until(loop_start +
                                    std::chrono::duration_cast<Clock::duration>(
                                        std::chrono::duration<double>(paced / o_.rate)));
    }
    ++paced;
    if (Now() >= next_sample) {
      TakeSample(Now());
      next_sample += o_.sample_every_s;
    }
    if (gnmrd_->DiedUnexpectedly()) {
      Fail("gnmrd died by itself at step " + std::to_string(step) + " (see " + gnmrd_->log_path() +
           ")");
      break;
    }
    if (Now() >= next_restart && Now() < restart_until) {
      Restart(last_decided);
      next_restart = Now() + o_.restart_every_s;
      if (!result_.failures.empty() && gnmrd_->pid() <= 0) break;
    }
    // Ranks whose absence is over come back (a reconnect: the same
    // instance, so no new generation); others leave.
    std::vector<SimRank*> back;
    for (uint32_t r = 0; r < ranks_.size(); ++r) {
      if (away_until_[r] >= 0 && step >= away_until_[r]) {
        back.push_back(ranks_[r].get());
        away_until_[r] = -1;
      }
    }
    if (!back.empty() && !RegisterAndAttach(back, &resp)) break;
    if (o_.churn_every_steps > 0 && step > 0 && step % o_.churn_every_steps == 0) Churn(step);

    std::vector<SimRank*> present;
    for (uint32_t r = 0; r < ranks_.size(); ++r) {
      if (away_until_[r] < 0) present.push_back(ranks_[r].get());
    }
    for (SimRank* r : present) r->SendStats(step);
    if (!AwaitDecision(present, step)) {
      // Bring every rank back on a fresh stream and go on with the next
      // step; the failure is recorded.
      for (SimRank* r : present) r->Detach();
      if (!RegisterAndAttach(present, &resp)) break;
      ++step;
      continue;
    }
    ComparePlans(present, step + 1);
    result_.steps_decided++;
    last_decided = step;
    ++step;
  }
  result_.elapsed_s = Now();
  TakeSample(Now());
  bad_->Stop();
  result_.bad = bad_->report();
  result_.ledger_conflicts = ledger_.conflicts();
  if (result_.ledger_conflicts > 0) {
    Fail(std::to_string(result_.ledger_conflicts) +
         " decisions differed between ranks under one (generation, sequence)");
  }
  if (result_.bad.unexpected > 0) {
    Fail(std::to_string(result_.bad.unexpected) + " bad-client call(s) got an unexpected answer");
  }
  if (gnmrd_->pid() <= 0) return result_;
  AddAckMismatches();
  if (result_.ack_mismatches > 0) {
    Fail("gnmrd counted " + std::to_string(static_cast<int64_t>(result_.ack_mismatches)) +
         " ack mismatches");
  }
  CheckFlatness();

  // A graceful stop keeps every decided step: restart and look.
  for (auto& r : ranks_) r->Detach();
  const int status = gnmrd_->Stop();
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    Fail("gnmrd's final SIGTERM: wait status " + std::to_string(status));
  }
  if (!gnmrd_->Start()) {
    Fail("gnmrd did not start on the soak's state dir");
    return result_;
  }
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  auto admin = v1::Admin::NewStub(
      grpc::CreateCustomChannel(gnmrd_->target(), grpc::InsecureChannelCredentials(), args));
  grpc::ClientContext ctx;
  v1::ListJobsResponse jobs;
  const grpc::Status s = admin->ListJobs(&ctx, {}, &jobs);
  bool found = false;
  for (const v1::JobInfo& j : jobs.jobs()) {
    if (j.job_id() != job_.job_id) continue;
    found = true;
    if (j.last_step() != last_decided) {
      Fail("after the final graceful stop the job restored at step " +
           std::to_string(j.last_step()) + ", not " + std::to_string(last_decided));
    }
  }
  if (!s.ok() || !found) Fail("the soak job was not restored after the final graceful stop");
  gnmrd_->Stop();
  return result_;
}

}  // namespace gnmr::soak
