#include "client/src/standby_reports.h"

#include <utility>

#include "proto/report_fingerprint.h"

namespace gnmr {

bool StandbyReports::SetRole(bool standby, int64_t from_step) {
  MutexLock lock(mu_);
  standby_ = standby;
  from_step_ = from_step;
  return !standby_ && !held_.empty();
}

void StandbyReports::StartSession() {
  MutexLock lock(mu_);
  standby_ = false;
  from_step_ = 0;
  last_sent_ = -1;
}

bool StandbyReports::standby() const {
  MutexLock lock(mu_);
  return standby_;
}

void StandbyReports::Hold(v1::StepStats&& stats) {
  const uint64_t fingerprint = ReportFingerprint(stats);
  v1::ClientOverhead* figures = stats.mutable_overhead();
  MutexLock lock(mu_);
  note_step_ = stats.step();
  note_fingerprint_ = fingerprint;
  have_note_ = true;
  const double seconds = have_figures_ ? figures_.stats_seconds() : 0.0;
  const double gpu_seconds = have_figures_ ? figures_.stats_gpu_seconds() : 0.0;
  figures_ = *figures;  // the newest ratio and cumulative counts
  figures_.set_stats_seconds(seconds + figures->stats_seconds());
  figures_.set_stats_gpu_seconds(gpu_seconds + figures->stats_gpu_seconds());
  have_figures_ = true;
  figures->set_stats_seconds(0.0);  // counted by a note
  figures->set_stats_gpu_seconds(0.0);
  // A step at or before a held one (a trainer that went back to a
  // checkpoint) makes the held ones of that step and later void.
  while (!held_.empty() && held_.back().step() >= stats.step()) held_.pop_back();
  held_.push_back(std::move(stats));
  while (held_.size() > keep_) held_.pop_front();
}

bool StandbyReports::TakeNote(std::chrono::steady_clock::time_point now, v1::StandbyNote* out) {
  MutexLock lock(mu_);
  if (!have_note_) return false;
  out->set_step(note_step_);
  out->set_fingerprint(note_fingerprint_);
  out->clear_overhead();
  have_note_ = false;
  if (have_figures_ && (!figures_sent_ || now - *figures_sent_ >= kFiguresEvery)) {
    out->mutable_overhead()->Swap(&figures_);
    figures_.Clear();
    have_figures_ = false;
    figures_sent_ = now;
  }
  return true;
}

std::vector<v1::StepStats> StandbyReports::TakeWanted() {
  MutexLock lock(mu_);
  std::vector<v1::StepStats> out;
  if (standby_ || held_.empty()) return out;
  for (v1::StepStats& s : held_) {
    if (s.step() >= from_step_ && s.step() > last_sent_) out.push_back(std::move(s));
  }
  held_.clear();
  return out;
}

void StandbyReports::Sent(int64_t step) {
  MutexLock lock(mu_);
  if (step > last_sent_) last_sent_ = step;
}

}  // namespace gnmr
