#include "client/src/standby_reports.h"

#include <utility>

namespace gnmr {

bool StandbyReports::SetRole(bool standby, int64_t from_step) {
  std::lock_guard<std::mutex> lock(mu_);
  standby_ = standby;
  from_step_ = from_step;
  return !standby_ && !held_.empty();
}

void StandbyReports::StartSession() {
  std::lock_guard<std::mutex> lock(mu_);
  standby_ = false;
  from_step_ = 0;
  last_sent_ = -1;
}

bool StandbyReports::standby() const {
  std::lock_guard<std::mutex> lock(mu_);
  return standby_;
}

void StandbyReports::Hold(v1::StepStats&& stats) {
  std::lock_guard<std::mutex> lock(mu_);
  // A step at or before a held one (a trainer that went back to a
  // checkpoint) makes the held ones of that step and later void.
  while (!held_.empty() && held_.back().step() >= stats.step()) held_.pop_back();
  held_.push_back(std::move(stats));
  while (held_.size() > keep_) held_.pop_front();
}

std::vector<v1::StepStats> StandbyReports::TakeWanted() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<v1::StepStats> out;
  if (standby_ || held_.empty()) return out;
  for (v1::StepStats& s : held_) {
    if (s.step() >= from_step_ && s.step() > last_sent_) out.push_back(std::move(s));
  }
  held_.clear();
  return out;
}

void StandbyReports::Sent(int64_t step) {
  std::lock_guard<std::mutex> lock(mu_);
  if (step > last_sent_) last_sent_ = step;
}

}  // namespace gnmr
