#include "daemon/job/ack_book.h"

#include <cinttypes>
#include <cstdio>

namespace gnmr {
namespace {

std::string Hex(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%016" PRIx64, v);
  return buf;
}

}  // namespace

AckRecord AckRecord::From(uint32_t rank, const v1::Ack& ack) {
  AckRecord r;
  r.rank = rank;
  r.generation = ack.generation();
  r.has_decision = ack.has_decision();
  r.digest = ack.digest();
  r.sequence = ack.sequence();
  r.skip_step = ack.skip_step();
  return r;
}

bool AckRecord::SamePlan(const AckRecord& o) const {
  // Without a decision a rank applies the fallback plan its digest names,
  // whatever generation it knew: a rank that acks a step it ran before it
  // registered (generation 0) applied the same plan as a registered rank
  // that missed the decision.
  if (!has_decision && !o.has_decision) return digest == o.digest && skip_step == o.skip_step;
  return generation == o.generation && has_decision == o.has_decision && digest == o.digest &&
         skip_step == o.skip_step;
}

std::string AckRecord::Describe() const {
  std::string s = "rank " + std::to_string(rank);
  const std::string gen = "generation " + std::to_string(generation);
  if (has_decision) {
    s += " digest " + Hex(digest) + " (decision seq " + std::to_string(sequence) + ", " + gen + ")";
  } else {
    s += " no decision (" + gen + (digest != 0 ? ", digest " + Hex(digest) : "") + ")";
  }
  if (skip_step) s += ", optimizer step skipped";
  return s;
}

std::string AckMismatch::Describe() const {
  std::string s = "step " + std::to_string(step) + ": ";
  if (against_sent) {
    return s + other.Describe() + ", but the daemon sent decision seq " +
           std::to_string(other.sequence) + " with digest " + Hex(sent_digest);
  }
  return s + first.Describe() + ", " + other.Describe();
}

bool AckBook::Add(uint32_t rank, const v1::Ack& ack, AckMismatch* out) {
  const int64_t step = ack.step();
  const AckRecord rec = AckRecord::From(rank, ack);
  auto it = steps_.find(step);
  if (it == steps_.end()) {
    if (steps_kept_ == 0) return false;
    if (steps_.size() >= steps_kept_) {
      if (step < steps_.begin()->first) return false;  // older than the book
      steps_.erase(steps_.begin());
    }
    steps_.emplace(step, Entry{rec, false});
    return false;
  }
  Entry& e = it->second;
  if (e.mismatched || rec.SamePlan(e.first)) return false;
  e.mismatched = true;
  out->step = step;
  out->first = e.first;
  out->other = rec;
  out->against_sent = false;
  return true;
}

bool AckBook::MarkMismatched(int64_t step) {
  auto it = steps_.find(step);
  if (it == steps_.end() || it->second.mismatched) return false;
  it->second.mismatched = true;
  return true;
}

}  // namespace gnmr
