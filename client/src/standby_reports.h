// StandbyReports: the client's side of reporter election (docs/scale.md,
// "Reporter election"). With `report: one_per_shard` gnmrd tells each rank
// whether it reports (v1::ReporterRole). A rank that stands by still
// computes its statistics (the same-step guard needs them) and keeps its
// newest reports here instead of sending them; when it is elected, it sends
// the ones the job still needs (from_step on) and then reports as usual, so
// a step whose reporter died or fell behind is not lost.
//
// Design notes
// - The reader thread sets the role (SetRole); the writer thread (IoLoop's
//   Pump) asks standby() for each report and TakeWanted() each turn. One
//   small mutex: a role changes rarely, and a report is held by moving a
//   message, never by copying its columns.
// - Each session starts as a reporter (a daemon before election never says
//   otherwise) with nothing sent; the held reports outlive sessions, so a
//   rank elected just after a reconnect still has them.
// - Bounded: the newest `keep` reports (older ones are dropped: the job
//   closed those steps long ago, see the step deadline).
// - What a standby holds back is still accounted for: the newest held
//   report's fingerprint and client figures ride on the rank's next ack
//   (v1::StandbyNote), so gnmrd checks the replicas against each other and
//   shows every rank's overhead (docs/scale.md). The fingerprint goes with
//   every ack; the figures at most every kFiguresEvery (they feed metrics
//   scraped every few seconds, and each costs gnmrd a metrics update per
//   rank: at 16,384 ranks that is not free). Stats seconds are summed
//   until then and taken out of the held reports, so a report sent after
//   an election does not count them twice.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>
#include <vector>

#include "common/mutex.h"
#include "common/thread_annotations.h"
#include "gnmr/v1/gnmr.pb.h"

namespace gnmr {

class StandbyReports {
 public:
  explicit StandbyReports(size_t keep) : keep_(keep == 0 ? 1 : keep) {}

  // Reader thread: the role the daemon gave. Returns true when the rank
  // now reports and holds reports the job wants (the writer should wake).
  bool SetRole(bool standby, int64_t from_step);
  // Writer thread, at the start of a session: reports, nothing sent yet.
  void StartSession();

  bool standby() const;
  // Keeps `stats` (a standby's report) instead of sending it, and notes it
  // for the next ack.
  void Hold(v1::StepStats&& stats);
  static constexpr std::chrono::seconds kFiguresEvery{5};
  // The note for the next ack, if a report was held since the last one
  // was taken; with the figures if kFiguresEvery passed since the last
  // note that carried them (`now`: a steady clock).
  bool TakeNote(std::chrono::steady_clock::time_point now, v1::StandbyNote* out);
  // The held reports the job wants now that this rank reports (steps from
  // the role's from_step on, not sent before in this session), oldest first;
  // they are no longer held.
  std::vector<v1::StepStats> TakeWanted();
  // A report of `step` was written on this session's stream.
  void Sent(int64_t step);

 private:
  const size_t keep_;
  mutable Mutex mu_;
  bool standby_ GNMR_GUARDED_BY(mu_) = false;
  int64_t from_step_ GNMR_GUARDED_BY(mu_) = 0;
  int64_t last_sent_ GNMR_GUARDED_BY(mu_) = -1;          // this session
  std::deque<v1::StepStats> held_ GNMR_GUARDED_BY(mu_);  // oldest first
  bool have_note_ GNMR_GUARDED_BY(mu_) = false;          // a report held since the last note
  int64_t note_step_ GNMR_GUARDED_BY(mu_) = 0;
  uint64_t note_fingerprint_ GNMR_GUARDED_BY(mu_) = 0;
  bool have_figures_ GNMR_GUARDED_BY(mu_) = false;  // held since the last figures sent
  v1::ClientOverhead figures_ GNMR_GUARDED_BY(mu_);
  std::optional<std::chrono::steady_clock::time_point> figures_sent_ GNMR_GUARDED_BY(mu_);
};

}  // namespace gnmr
