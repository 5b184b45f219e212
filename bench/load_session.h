// The simulated ranks of bench/daemon_load: one Session stream per rank,
// multiplexed over a few channels (HTTP/2 connections) and served by
// gRPC's callback threads, so thousands of ranks need neither thousands of
// threads nor thousands of connections. Reports are serialized once per
// step and the same bytes go to every rank (all ranks are data-parallel
// replicas of the same units, so their reports are identical): the load
// generator costs one serialization per step, not one per rank.
//
// Like a real client, each rank acks every decision it receives (unless
// --no-acks): an Ack of the decision's apply step, and a standby's ack
// carries its StandbyNote (the fingerprint of the report it held back,
// equal to the reporter's here, and every 5th step its client figures), so gnmrd reads
// one message per rank per step and runs the replica check as it would.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <vector>

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include "gnmr/v1/gnmr.pb.h"
#include "proto/report_fingerprint.h"

namespace gnmr::bench {

using Clock = std::chrono::steady_clock;

// `m`, serialized into a buffer whose copies share its bytes.
inline grpc::ByteBuffer Serialized(const google::protobuf::Message& m) {
  const std::string bytes = m.SerializeAsString();
  grpc::Slice slice(bytes);
  return grpc::ByteBuffer(&slice, 1);
}

// The report of step `step` for units 0..units-1 (the ids every rank got:
// checked at registration). active_fraction 1: the dense form, as before
// sparse reports (unit_id and sumsq); below 1: the sparse form listing
// about that fraction of the units, chosen per step (docs/statistics.md).
// `fingerprint`: the report's (proto/report_fingerprint.h).
inline grpc::ByteBuffer StepReport(int64_t step, uint32_t units, double active_fraction,
                                   uint64_t* fingerprint) {
  v1::ClientMessage m;
  v1::StepStats* s = m.mutable_stats();
  s->set_step(step);
  const bool sparse = active_fraction < 1.0;
  s->set_sparse(sparse);
  const uint64_t threshold = static_cast<uint64_t>(active_fraction * 1000000.0);
  for (uint32_t i = 0; i < units; ++i) {
    if (sparse) {
      const uint64_t h = (i * 2654435761ull + static_cast<uint64_t>(step) * 40503ull) % 1000003ull;
      if (h >= threshold) continue;
    }
    double v = 1.0 + 0.01 * static_cast<double>((step * 7 + i) % 13);
    if (step > 60 && (step + i) % 997 == 0) v *= 400.0;  // occasional spike
    s->add_unit_id(i);
    s->add_sumsq(v);
    if (sparse) {  // the sparse form carries every column
      s->add_amax(0.1);
      s->add_nonfinite(0);
      s->add_zeros(0);
    }
  }
  *fingerprint = ReportFingerprint(*s);
  return Serialized(m);
}

// Per-step bookkeeping shared by all ranks.
struct StepLog {
  StepLog(int steps, int ranks, bool acks)
      : sent(steps),
        last_arrival(steps),
        arrivals(steps),
        fingerprints(steps),
        ranks(ranks),
        acks(acks) {
    for (auto& a : arrivals) a.store(0);
    for (auto& f : fingerprints) f.store(0);
  }
  std::vector<Clock::time_point> sent;
  std::vector<Clock::time_point> last_arrival;
  std::vector<std::atomic<int>> arrivals;
  std::vector<std::atomic<uint64_t>> fingerprints;  // of each step's report
  const int ranks;
  const bool acks;               // each rank acks each decision
  std::atomic<int> attached{0};  // ranks that received their GenerationStart
  std::atomic<int> standby{0};   // ranks told to stand by (ReporterRole)
  std::mutex mu;
  std::condition_variable cv;
  int complete = 0;  // steps whose decision reached every rank
};

// What one simulated rank knows from what gnmrd sent it.
struct RankView {
  bool attached = false;  // the reading thread only
  std::atomic<bool> standby{false};
};

// Counts one ServerMessage for one rank: attach (its GenerationStart), its
// role (reporter election: no report while standing by) and the arrival of
// a step's decision.
inline void CountMessage(const v1::ServerMessage& msg, RankView* rank, StepLog* log) {
  if (msg.has_role()) {
    const bool standby = msg.role().standby();
    if (rank->standby.exchange(standby) != standby) {
      log->standby.fetch_add(standby ? 1 : -1);
      std::lock_guard<std::mutex> lock(log->mu);
      log->cv.notify_all();
    }
    return;
  }
  if (!msg.has_decision()) {  // a GenerationStart: attached
    if (!rank->attached) {
      rank->attached = true;
      log->attached.fetch_add(1);
      std::lock_guard<std::mutex> lock(log->mu);
      log->cv.notify_all();
    }
    return;
  }
  const int64_t step = msg.decision().observed_step();
  if (step < 0 || step >= static_cast<int64_t>(log->sent.size())) return;
  const auto now = Clock::now();
  if (log->arrivals[step].fetch_add(1) + 1 == log->ranks) {
    std::lock_guard<std::mutex> lock(log->mu);
    log->last_arrival[step] = now;
    log->complete++;
    log->cv.notify_all();
  }
}

// The ack a rank sends for `msg` (a decision; false for anything else, or
// with acks off): a standby's carries its note.
inline bool AckFor(const v1::ServerMessage& msg, bool standby, const StepLog& log,
                   v1::ClientMessage* out) {
  if (!log.acks || !msg.has_decision()) return false;
  const v1::Decision& d = msg.decision();
  v1::Ack* a = out->mutable_ack();
  a->set_step(d.apply_step());
  a->set_sequence(d.sequence());
  a->set_digest(d.digest());
  a->set_has_decision(true);
  a->set_generation(d.generation());
  const int64_t step = d.observed_step();
  if (standby && step >= 0 && step < static_cast<int64_t>(log.fingerprints.size())) {
    v1::StandbyNote* note = a->mutable_standby();
    note->set_step(step);
    note->set_fingerprint(log.fingerprints[step].load(std::memory_order_relaxed));
    // A client sends its figures at most every 5 s (standby_reports.h);
    // here every 5th step, which is as often at 1 step/s and more often
    // above.
    if (step % 5 != 0) return true;
    note->mutable_overhead()->set_stats_seconds(1e-4);
    note->mutable_overhead()->set_overhead_ratio(0.01);
    note->mutable_overhead()->set_overhead_source(v1::OVERHEAD_SOURCE_HOST_WALL);
  }
  return true;
}

// A received buffer's bytes in one piece.
inline std::string Bytes(grpc::ByteBuffer* in) {
  std::vector<grpc::Slice> slices;
  std::string bytes;
  if (!in->Dump(&slices).ok()) return bytes;
  for (const grpc::Slice& s : slices)
    bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  return bytes;
}

// One simulated stream (a rank's Session, or a relay's NodeSession): its
// writes go one at a time from a queue of shared buffers, and each message
// read goes to OnMessage.
class LoadStream : public grpc::ClientBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  void Close() { ctx_.TryCancel(); }
  void Wait() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return done_; });
  }

  void OnWriteDone(bool ok) override {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.pop_front();
    if (ok && !queue_.empty()) {
      StartWrite(&queue_.front());
    } else {
      writing_ = false;
    }
  }
  void OnReadDone(bool ok) override {
    if (!ok) return;
    OnMessage(Bytes(&in_));
    StartRead(&in_);
  }
  void OnDone(const grpc::Status&) override {
    std::lock_guard<std::mutex> lock(mu_);
    done_ = true;
    cv_.notify_all();
  }

 protected:
  // Starts the call of `method` with `first` as its first message; the
  // last thing a subclass's constructor does.
  void Begin(grpc::GenericStub* stub, const char* method, grpc::ByteBuffer first) {
    stub->PrepareBidiStreamingCall(&ctx_, method, grpc::StubOptions(), this);
    Write(std::move(first));
    StartRead(&in_);
    StartCall();
  }
  // Queues `bytes` (shared: no copy).
  void Write(grpc::ByteBuffer bytes) {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(std::move(bytes));
    if (!writing_) {
      writing_ = true;
      StartWrite(&queue_.front());
    }
  }
  virtual void OnMessage(const std::string& bytes) = 0;

 private:
  grpc::ClientContext ctx_;
  grpc::ByteBuffer in_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<grpc::ByteBuffer> queue_;
  bool writing_ = false, done_ = false;
};

class LoadRank : public LoadStream {
 public:
  LoadRank(grpc::GenericStub* stub, const std::string& job, uint32_t rank, uint64_t session,
           StepLog* log)
      : log_(log) {
    v1::ClientMessage hello;
    hello.mutable_hello()->set_job_id(job);
    hello.mutable_hello()->set_rank(rank);
    hello.mutable_hello()->set_session_id(session);
    Begin(stub, "/gnmr.v1.Gnmr/Session", Serialized(hello));
  }

  // Queues `report` (shared bytes: no copy); nothing while the rank stands
  // by (`report: one_per_shard`: another replica of its shard reports).
  void Send(const grpc::ByteBuffer& report) {
    if (view_.standby.load(std::memory_order_relaxed)) return;
    Write(report);
  }

 private:
  void OnMessage(const std::string& bytes) override {
    v1::ServerMessage msg;
    if (!msg.ParseFromString(bytes)) return;
    CountMessage(msg, &view_, log_);
    v1::ClientMessage ack;
    if (AckFor(msg, view_.standby.load(std::memory_order_relaxed), *log_, &ack)) {
      Write(Serialized(ack));
    }
  }

  StepLog* log_;
  RankView view_;
};

}  // namespace gnmr::bench
