#include "tests/soak/soak_run.h"

#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <random>
#include <thread>
#include <tuple>

namespace gnmr::soak {
namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kDecisionTimeout = std::chrono::seconds(30);
// The documented loss window after kill -9 (deploy/README.md): the steps
// since the newest snapshot (at most snapshot_every_steps) plus those
// decided while it was being written; this many are allowed for the write.
constexpr int kWriteSteps = 5;

std::string Temporary() {
  char tmpl[] = "/tmp/gnmr-soak-XXXXXX";
  const char* dir = ::mkdtemp(tmpl);
  return dir != nullptr ? dir : "/tmp/gnmr-soak";
}

double SumOf(const std::map<std::string, double>& samples, const std::string& prefix,
             const std::string& must_contain) {
  double sum = 0;
  for (const auto& [series, value] : samples) {
    if (series.rfind(prefix, 0) == 0 && series.find(must_contain) != std::string::npos) {
      sum += value;
    }
  }
  return sum;
}

}  // namespace

SoakRun::SoakRun(SoakOptions options) : o_(std::move(options)), dir_(Temporary()) {
  job_.world_size = o_.ranks;
  job_.units = o_.units;
  v1::ControllerConfig& c = job_.config;
  c.set_warmup(20);
  c.set_ema_decay(0.95);
  c.set_tau(2.5);
  c.set_tau_delta(1.0);
  c.set_gnmr_floor(1.5);
  c.set_short_window(4);
  c.set_max_o(4);
  c.set_lock_steps(20);
  c.set_lag(1);
  c.set_entry(v1::ENTRY_CLIP);
  c.set_clip_min_scale(0.1);
  GnmrdSettings g;
  g.binary = o_.gnmrd;
  g.dir = dir_;
  g.snapshot_every_steps = o_.snapshot_every_steps;
  gnmrd_ = std::make_unique<GnmrdChild>(g);
  result_.dir = dir_;
}

SoakRun::~SoakRun() {
  bad_.reset();
  ranks_.clear();
  gnmrd_.reset();
  if (!o_.keep_dir) std::system(("rm -rf '" + dir_ + "'").c_str());
}

double SoakRun::Now() const { return std::chrono::duration<double>(Clock::now() - start_).count(); }

void SoakRun::Fail(std::string what) {
  if (result_.failures.size() < 50) result_.failures.push_back(std::move(what));
}

bool SoakRun::RegisterAndAttach(std::vector<SimRank*> ranks,
                                std::vector<v1::RegisterResponse>* out) {
  out->assign(ranks.size(), {});
  std::vector<std::string> errors(ranks.size());
  std::atomic<size_t> next{0};
  std::vector<std::thread> workers;
  for (int w = 0; w < 8; ++w) {
    workers.emplace_back([&] {
      for (size_t i; (i = next++) < ranks.size();) {
        const auto end = Clock::now() + std::chrono::seconds(30);
        grpc::Status s;
        do {
          s = ranks[i]->Register(&(*out)[i]);
          if (s.ok()) break;
          std::this_thread::sleep_for(std::chrono::milliseconds(200));
        } while (Clock::now() < end);
        if (!s.ok()) {
          errors[i] =
              "rank " + std::to_string(ranks[i]->rank()) + " cannot register: " + s.error_message();
          continue;
        }
        ranks[i]->Attach();
      }
    });
  }
  for (std::thread& t : workers) t.join();
  bool ok = true;
  for (const std::string& e : errors) {
    if (!e.empty()) {
      Fail(e);
      ok = false;
    }
  }
  return ok;
}

bool SoakRun::AwaitDecision(const std::vector<SimRank*>& ranks, int64_t step) {
  const auto end = Clock::now() + kDecisionTimeout;
  std::unique_lock<std::mutex> lock(progress_.mu);
  for (;;) {
    std::vector<uint32_t> missing, ended;
    lock.unlock();
    for (SimRank* r : ranks) {
      if (r->HasDecisionFor(step)) continue;
      (r->attached() ? missing : ended).push_back(r->rank());
    }
    lock.lock();
    if (missing.empty() && ended.empty()) return true;
    if (!ended.empty() || Clock::now() >= end) {
      std::string what = "step " + std::to_string(step) + ": ";
      if (!ended.empty()) {
        what += std::to_string(ended.size()) + " stream(s) ended unexpectedly (rank " +
                std::to_string(ended[0]) + ": " + ranks_[ended[0]]->last_end().error_message() +
                ")";
      } else {
        what += "no decision within 30 s at " + std::to_string(missing.size()) +
                " rank(s), e.g. rank " + std::to_string(missing[0]);
      }
      Fail(what);
      return false;
    }
    progress_.cv.wait_for(lock, std::chrono::milliseconds(50));
  }
}

void SoakRun::ComparePlans(const std::vector<SimRank*>& ranks, int64_t step) {
  using Key = std::tuple<bool, uint64_t, uint64_t, uint64_t>;  // has, gen, seq, digest
  std::map<Key, std::vector<uint32_t>> groups;
  for (SimRank* r : ranks) {
    const std::optional<HeldDecision> plan = r->PlanFor(step);
    if (plan && plan->recovery > job_.config.max_o()) {
      Fail("step " + std::to_string(step) + ": rank " + std::to_string(r->rank()) + " plans " +
           std::to_string(plan->recovery) + " units in recovery, max_o is " +
           std::to_string(job_.config.max_o()));
    }
    Key k = plan ? Key{true, plan->generation, plan->sequence, plan->digest} : Key{};
    groups[k].push_back(r->rank());
    r->SendAck(step, plan);
  }
  ++result_.plans_compared;
  if (groups.size() > 1) {
    ++result_.plan_mismatches;
    std::string what = "step " + std::to_string(step) + ": ranks planned differently:";
    for (const auto& [k, members] : groups) {
      what += " [" + std::to_string(members.size()) + " rank(s) e.g. " +
              std::to_string(members[0]) + ": " +
              (std::get<0>(k) ? "gen " + std::to_string(std::get<1>(k)) + " seq " +
                                    std::to_string(std::get<2>(k))
                              : std::string("no decision")) +
              "]";
    }
    Fail(what);
  }
}

void SoakRun::Churn(int64_t step) {
  static std::mt19937 rng(4242);
  std::vector<uint32_t> present;
  for (uint32_t r = 0; r < ranks_.size(); ++r) {
    if (away_until_[r] < 0) present.push_back(r);
  }
  std::shuffle(present.begin(), present.end(), rng);
  for (uint32_t i = 0; i < o_.churn_ranks && i < present.size(); ++i) {
    ranks_[present[i]]->Detach();
    away_until_[present[i]] = step + o_.churn_absent_steps;
    ++result_.churns;
  }
}

void SoakRun::AddAckMismatches() {
  // The acks of the last step are on their way: let the daemon read them.
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  result_.ack_mismatches +=
      SumOf(gnmrd_->Scrape(), "gnmr_ack_mismatches_total", "job_id=\"" + job_.job_id + "\"");
}

void SoakRun::Restart(int64_t last_decided) {
  AddAckMismatches();
  bad_->SetDaemonDown(true);
  gnmrd_->KillHard();
  const auto end = Clock::now() + std::chrono::seconds(15);
  for (auto& r : ranks_) {
    while (r->attached() && Clock::now() < end) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the trainers go on
  if (!gnmrd_->Start()) {
    Fail("gnmrd did not come back after kill -9 (see " + gnmrd_->log_path() + ")");
    return;
  }
  ++result_.restarts;
  std::vector<SimRank*> all;
  for (auto& r : ranks_) all.push_back(r.get());
  std::fill(away_until_.begin(), away_until_.end(), -1);
  std::vector<v1::RegisterResponse> resp;
  if (!RegisterAndAttach(all, &resp)) return;
  const int64_t restored = resp[0].last_step();
  const uint64_t generation = resp[0].generation();
  for (const v1::RegisterResponse& r : resp) {
    if (r.last_step() != restored || r.generation() != generation) {
      Fail("restart: ranks got different Register answers");
      break;
    }
  }
  if (generation <= generation_) {
    Fail("restart: generation " + std::to_string(generation) + " is not above " +
         std::to_string(generation_));
  }
  const int lost = static_cast<int>(last_decided - restored);
  result_.max_lost_steps = std::max(result_.max_lost_steps, lost);
  if (lost > static_cast<int>(o_.snapshot_every_steps) + kWriteSteps) {
    Fail("restart: the restored job is at step " + std::to_string(restored) + ", " +
         std::to_string(lost) + " decided steps lost (window: snapshot_every_steps " +
         std::to_string(o_.snapshot_every_steps) + " + " + std::to_string(kWriteSteps) +
         " decided while a snapshot is written)");
  }
  // Every rank gets the rebuilt decision first: exactly one it had before.
  const auto wait_end = Clock::now() + std::chrono::seconds(15);
  std::optional<HeldDecision> rebuilt;
  for (auto& r : ranks_) {
    while (!(rebuilt = r->FirstOfGeneration()) && Clock::now() < wait_end) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  if (!rebuilt || rebuilt->generation != generation || rebuilt->observed != restored) {
    Fail("restart: no rebuilt decision of step " + std::to_string(restored));
  } else {
    const std::optional<HeldDecision> before = ledger_.Find(generation_, rebuilt->sequence);
    if (!before || before->digest != rebuilt->digest || before->apply != rebuilt->apply) {
      Fail("restart: the rebuilt decision (seq " + std::to_string(rebuilt->sequence) +
           ") is not the one sent before the crash");
    }
  }
  generation_ = generation;
  bad_->SetDaemonDown(false);
}

void SoakRun::TakeSample(double t) {
  Sample s;
  s.t = t;
  s.incarnation = result_.restarts + 1;
  s.process = gnmrd_->Figures();
  s.state_bytes = gnmrd_->StateBytes(&s.job_dirs);
  const std::map<std::string, double> m = gnmrd_->Scrape();
  auto it = m.find("gnmr_jobs");
  if (it != m.end()) s.jobs = it->second;
  s.steps = result_.steps_decided;
  result_.samples.push_back(s);
}

void SoakRun::CheckFlatness() {
  // The restart-free tail, after a warm-up: its first sample is the base.
  const double tail = o_.duration_s * (1 - o_.quiet_tail);
  const double warm = std::min(30.0, o_.duration_s * o_.quiet_tail / 3);
  const Sample* base = nullptr;
  const Sample* last = nullptr;
  for (const Sample& s : result_.samples) {
    if (s.incarnation != result_.restarts + 1 || s.t < tail + warm || s.process.rss_kb < 0) {
      continue;
    }
    if (base == nullptr) base = &s;
    last = &s;
  }
  if (base == nullptr || base == last) {
    Fail("too few samples in the restart-free tail to judge memory and fds");
    return;
  }
  const long rss_bound = base->process.rss_kb * 5 / 4 + 16 * 1024;
  if (last->process.rss_kb > rss_bound) {
    Fail("RSS grew in the restart-free tail: " + std::to_string(base->process.rss_kb / 1024) +
         " MB at " + std::to_string(static_cast<int>(base->t)) + " s -> " +
         std::to_string(last->process.rss_kb / 1024) + " MB at the end (bound " +
         std::to_string(rss_bound / 1024) + " MB)");
  }
  if (last->process.fds > base->process.fds + 16) {
    Fail("open fds grew in the restart-free tail: " + std::to_string(base->process.fds) + " -> " +
         std::to_string(last->process.fds));
  }
  for (const Sample& s : result_.samples) {
    if (s.state_bytes > (uint64_t{32} << 20) || s.job_dirs > 400) {
      Fail("state dir not bounded: " + std::to_string(s.state_bytes) + " bytes, " +
           std::to_string(s.job_dirs) + " job dirs at " + std::to_string(static_cast<int>(s.t)) +
           " s");
      break;
    }
  }
}

}  // namespace gnmr::soak
