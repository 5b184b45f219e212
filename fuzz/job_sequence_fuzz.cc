// Fuzz target: a job (daemon/job/job.h) driven by a decoded sequence of
// what its ranks and the admin can send: Register, Session attach/detach,
// StepStats, Acks, deadline ticks on a fake clock, admin calls (config,
// release, export/import). It is what gnmrd's session reactor and services
// do with peer messages, minus gRPC.
//
// Input layout (fuzz_input.h; every read past the end is zero):
//   header: world size (1..4), max_o, lag, warmup, short_window,
//           lock_steps, deadline ms, max open steps
//   then up to kMaxOps operations, one opcode byte each, then its fields
//   (see the switch below). Register requests go through the server's
//   syntactic validation first (request_validation.h), as in gnmrd.
//
// Properties, besides no crash and no sanitizer report: the streams obey
// the generation and sequence rules and every snapshot restores
// (job_harness.h); the job's exported state restores and imports back;
// no decision is ever refused by the controller (decision_failures == 0);
// the recovery set never exceeds the largest max_o the job had.
//
// Time: the job reads the fake clock (JobOptions::clock) that Tick moves
// and OnStats is given, never the real one, so ages, idleness and the
// published view follow the input and a rerun does the same.
//
// Speed (docs/fuzzing.md, "Speed"): run with -entropic=0 (fuzz/CMakeLists.txt,
// scripts/fuzz_long.sh). An input touches ~27,000 coverage features;
// libFuzzer's entropic schedule updates a frequency per feature per input,
// which took ~80% of the time (200 inputs/s of CPU against ~940 without).
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "controller/state_codec.h"
#include "daemon/job/job.h"
#include "daemon/server/request_validation.h"
#include "fuzz/fuzz_check.h"
#include "fuzz/fuzz_input.h"
#include "fuzz/job_harness.h"

namespace gnmr::fuzz {
namespace {

constexpr int kMaxOps = 256;
constexpr const char* kJobId = "fuzz-job";
const char* const kNames[] = {"a", "b", "c", "layers.0.fc1", "layers.1.fc1", "head"};
constexpr int kNumNames = 6;

// The job's time: moved only by the input's deadline ticks. Its wall time
// is a fixed date moved the same way, so a run never reads the machine's
// clock and an input replays exactly.
class InputClock final : public TimeSource {
 public:
  SteadyTime Now() const override { return now; }
  WallTime WallNow() const override {
    return WallTime(std::chrono::seconds(1767225600)) +
           std::chrono::duration_cast<WallTime::duration>(now.time_since_epoch());
  }
  SteadyTime now = SteadyTime(std::chrono::hours(1));
};

struct RankState {
  uint64_t session_id = 0;
  std::shared_ptr<CheckingSink> sink;
};

class Driver {
 public:
  explicit Driver(FuzzInput* in) : in_(*in) {}

  void Run() {
    world_ = static_cast<uint32_t>(in_.Range(1, 4));
    config_.max_o = static_cast<int32_t>(in_.Range(1, 4));
    config_.lag = static_cast<int32_t>(in_.Range(0, 3));
    config_.warmup = static_cast<int32_t>(in_.Range(1, 4));
    config_.short_window = static_cast<int32_t>(in_.Range(1, 4));
    config_.lock_steps = static_cast<int32_t>(in_.Range(1, 5));
    options_.aggregation.deadline = std::chrono::milliseconds(in_.Range(1, 100));
    options_.aggregation.max_open_steps = static_cast<size_t>(in_.Range(1, 8));
    options_.snapshot_every_steps = static_cast<uint32_t>(in_.Range(1, 8));
    options_.steps_kept_for_acks = 16;
    options_.decisions_kept = 8;
    options_.clock = &clock_;
    max_o_seen_ = config_.max_o;

    for (int op = 0; op < kMaxOps && !in_.empty(); ++op) Step();
    if (job_) Finish();
    if (std::getenv("GNMR_FUZZ_VERBOSE") != nullptr) {  // to check a seed does what it says
      std::fprintf(
          stderr, "job %s: %llu decisions, %llu events, %llu snapshots, %llu ack mismatches\n",
          job_ ? "created" : "never created", static_cast<unsigned long long>(listener_.decisions),
          static_cast<unsigned long long>(listener_.events),
          static_cast<unsigned long long>(listener_.snapshots),
          static_cast<unsigned long long>(listener_.mismatches));
    }
  }

 private:
  void Step() {
    switch (in_.Byte() % 10) {
      case 0:
        Register();
        break;
      case 1:
        Attach();
        break;
      case 2:
        Detach();
        break;
      case 3:
      case 4:
        Stats();
        break;
      case 5:
        Ack();
        break;
      case 6:
        Tick();
        break;
      case 7:
        Admin();
        break;
      case 8:
        ExportImport();
        break;
      case 9:
        if (job_) job_->SnapshotNow();
        break;
    }
  }

  uint32_t PickRank() { return static_cast<uint32_t>(in_.Range(0, world_)); }  // may be bad
  uint64_t PickSession(uint32_t rank) {
    if (in_.Byte() % 8 != 0) return ranks_[rank].session_id;
    return in_.Int<uint64_t>();
  }
  int64_t PickStep() {
    const int64_t last = last_step_sent_;
    switch (in_.Byte() % 8) {
      case 0:
        return in_.Int<int64_t>();  // anything a peer may send
      case 1:
        return last - in_.Range(0, 3);
      case 2:
        return last + in_.Range(2, 40);
      default:
        return last + 1;
    }
  }
  std::string PickName() {
    const uint8_t b = in_.Byte();
    if (b % 16 == 15) return in_.String(12);  // rarely: arbitrary bytes
    return kNames[b % kNumNames];
  }

  void Register() {
    v1::RegisterRequest req;
    req.set_job_id(in_.Byte() % 32 == 31 ? in_.String(8) : kJobId);
    req.set_rank(PickRank());
    req.set_world_size(in_.Byte() % 16 == 15 ? in_.Range(0, 6) : world_);
    req.set_client_version("fuzz");
    req.set_instance(in_.Range(0, 3));
    const int n = static_cast<int>(in_.Range(0, 5));
    for (int i = 0; i < n; ++i) {
      v1::UnitSpec* u = req.add_units();
      u->set_name(PickName());
      u->set_numel(in_.Range(0, 1000));
      u->set_dtype(static_cast<v1::DType>(in_.Range(0, 5)));
      if (in_.Byte() % 4 == 0) {
        u->set_shard_count(static_cast<uint32_t>(in_.Range(0, 3)));
        u->set_shard_index(static_cast<uint32_t>(in_.Range(0, 3)));
      }
    }
    if (!ValidateRegister(req).ok()) return;
    if (!job_) {
      StatusOr<std::unique_ptr<Job>> job =
          Job::Create(req.job_id(), req.world_size(), "", config_, options_, &listener_);
      FUZZ_CHECK(job.ok(), "Job::Create: %s", job.status().ToString().c_str());
      job_ = std::move(job).value();
    }
    if (req.job_id() != job_->id()) return;  // another job: the registry's business
    StatusOr<RegisterResult> r = job_->Register(req);
    if (!r.ok()) return;
    FUZZ_CHECK(r->unit_ids.size() == static_cast<size_t>(req.units_size()),
               "%zu unit ids for %d units", r->unit_ids.size(), req.units_size());
    if (req.rank() < ranks_.size()) ranks_[req.rank()].session_id = r->session_id;
  }

  void Attach() {
    if (!job_) return;
    const uint32_t rank = PickRank();
    if (rank >= ranks_.size()) return;
    auto sink = std::make_shared<CheckingSink>();
    if (job_->Attach(rank, PickSession(rank), sink).ok()) {
      ranks_[rank].sink = sink;
      sinks_.push_back(sink);
    }
  }

  void Detach() {
    if (!job_) return;
    const uint32_t rank = PickRank();
    if (rank >= ranks_.size() || !ranks_[rank].sink) return;
    job_->Detach(rank, ranks_[rank].session_id, ranks_[rank].sink.get());
    ranks_[rank].sink.reset();
  }

  void Stats() {
    if (!job_) return;
    const uint32_t rank = PickRank();
    v1::StepStats stats;
    const int64_t step = PickStep();
    stats.set_step(step);
    const int n = static_cast<int>(in_.Range(0, 6));
    const uint8_t drop = in_.Byte();  // sometimes a column is short
    for (int i = 0; i < n; ++i) {
      stats.add_unit_id(static_cast<uint32_t>(in_.Range(0, 7)));
      stats.add_sumsq(in_.Double());
      if (!(drop == 1 && i == 0)) stats.add_amax(in_.Double());
      if (!(drop == 2 && i == 0)) stats.add_nonfinite(in_.Range(0, 2));
      if (!(drop == 3 && i == 0)) stats.add_zeros(in_.Range(0, 2));
    }
    if (in_.Byte() % 4 == 0) {
      v1::ClientOverhead* o = stats.mutable_overhead();
      o->set_stats_seconds(in_.Double());
      o->set_overhead_ratio(in_.Double());
      o->set_stats_gpu_seconds(in_.Double());
      o->set_dropped_reports(in_.Int<uint64_t>());
      o->set_overhead_source(static_cast<v1::OverheadSource>(in_.Range(0, 4)));
      o->set_overhead_step(in_.Int<int64_t>());
    }
    const uint64_t session = rank < ranks_.size() ? PickSession(rank) : in_.Int<uint64_t>();
    if (job_->OnStats(rank, session, stats, stats.ByteSizeLong(), clock_.now).ok() &&
        step > last_step_sent_ && step < std::numeric_limits<int64_t>::max() - 64) {
      last_step_sent_ = step;
    }
  }

  void Ack() {
    if (!job_) return;
    const uint32_t rank = PickRank();
    v1::Ack ack;
    ack.set_step(PickStep());
    // Mostly a decision some stream received, as a client would ack it.
    const std::vector<v1::Decision>* got =
        rank < ranks_.size() && ranks_[rank].sink ? &ranks_[rank].sink->decisions() : nullptr;
    if (got && !got->empty() && in_.Byte() % 4 != 0) {
      const v1::Decision& d = (*got)[in_.Range(0, static_cast<int64_t>(got->size()) - 1)];
      ack.set_has_decision(true);
      ack.set_sequence(d.sequence());
      ack.set_digest(d.digest());
      ack.set_generation(d.generation());
      ack.set_skip_step(d.global_skip());
    } else {
      ack.set_has_decision(in_.Bool());
      ack.set_sequence(in_.Range(0, 8));
      ack.set_digest(in_.Int<uint64_t>());
      ack.set_generation(in_.Range(0, 4));
      ack.set_skip_step(in_.Bool());
    }
    const uint64_t session = rank < ranks_.size() ? PickSession(rank) : in_.Int<uint64_t>();
    (void)job_->OnAck(rank, session, ack);
  }

  void Tick() {
    if (!job_) return;
    clock_.now += std::chrono::milliseconds(in_.Range(0, 250));
    job_->Tick(clock_.now);
  }

  void Admin() {
    if (!job_) return;
    switch (in_.Byte() % 4) {
      case 0: {
        ControllerConfig c = job_->config();
        c.max_o = static_cast<int32_t>(in_.Range(0, 5));
        c.lag = static_cast<int32_t>(in_.Range(0, 3));
        c.short_window = static_cast<int32_t>(in_.Range(1, 5));
        c.lock_steps = static_cast<int32_t>(in_.Range(0, 5));
        c.tau = in_.Double();
        if (in_.Bool())
          c.actions = {ActionRule{PickName(), static_cast<Action>(in_.Range(0, 3)), in_.Double()}};
        if (job_->SetConfig(c).ok()) max_o_seen_ = std::max(max_o_seen_, c.max_o);
        break;
      }
      case 1:
        (void)job_->ReleaseUnit(PickName());
        break;
      case 2:
        (void)job_->Info(clock_.now);
        break;
      case 3: {
        // One byte, as before the query had more fields (so the corpus
        // keeps its meaning); the other fields follow from it.
        UnitQuery q;
        q.top = static_cast<uint32_t>(in_.Range(0, 4));
        q.limit = q.top % 3;
        q.offset = q.top / 2;
        q.state = static_cast<v1::UnitState>(q.top % 4);
        if (q.top % 2 == 1) q.pattern = "*a*";
        const UnitPage page = job_->Units(q);
        FUZZ_CHECK(page.units.size() <= page.matched, "a page of %zu units, %u matched",
                   page.units.size(), page.matched);
        FUZZ_CHECK(q.limit == 0 || page.units.size() <= q.limit, "a page of %zu units, limit %u",
                   page.units.size(), q.limit);
        break;
      }
    }
  }

  // The job's own state always restores and imports back; an edited copy
  // (what `gnmrctl import` of a hand-made file sends) is all-or-nothing.
  void ExportImport() {
    if (!job_) return;
    v1::ControllerState state = job_->ExportState();
    FUZZ_CHECK(ControllerStateCodec::Restore(state).ok(), "exported state does not restore");
    if (in_.Bool()) {
      state.set_last_step(in_.Int<int64_t>());
      state.set_has_last_step(in_.Bool());
      state.set_last_apply(in_.Int<int64_t>());
      state.set_has_last_apply(in_.Bool());
      state.set_sequence(in_.Int<uint64_t>());
      if (state.units_size() > 0 && in_.Bool()) state.mutable_units(0)->set_name(in_.String(12));
      const v1::ControllerState before = job_->ExportState();
      if (!job_->ImportState(state).ok()) {
        FUZZ_CHECK(job_->ExportState().SerializeAsString() == before.SerializeAsString(),
                   "a refused import changed the job");
      }
      return;
    }
    Status s = job_->ImportState(state);
    FUZZ_CHECK(s.ok(), "the job's own state does not import: %s", s.ToString().c_str());
  }

  void Finish() {
    FUZZ_CHECK(listener_.decision_failures == 0, "the controller refused %llu closed steps",
               static_cast<unsigned long long>(listener_.decision_failures));
    for (const auto& sink : sinks_) {
      FUZZ_CHECK(sink->max_recovery() <= static_cast<size_t>(max_o_seen_),
                 "recovery set of %zu units, max_o was at most %d", sink->max_recovery(),
                 max_o_seen_);
    }
  }

  FuzzInput& in_;
  uint32_t world_ = 1;
  ControllerConfig config_;
  JobOptions options_;
  int32_t max_o_seen_ = 0;
  // The job's clock (options_.clock): declared before the job, which reads it.
  InputClock clock_;
  CheckingListener listener_;
  std::unique_ptr<Job> job_;
  std::vector<RankState> ranks_ = std::vector<RankState>(5);
  std::vector<std::shared_ptr<CheckingSink>> sinks_;
  int64_t last_step_sent_ = -1;
};

}  // namespace
}  // namespace gnmr::fuzz

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  gnmr::fuzz::QuietLogs();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  gnmr::fuzz::FuzzInput in(data, size);
  gnmr::fuzz::Driver(&in).Run();
  return 0;
}
