#include "daemon/job/resource_caps.h"

#include <algorithm>

#include "daemon/aggregator/step_aggregator.h"
#include "daemon/job/job_options.h"

namespace gnmr {
namespace {

// Measured upper bounds (bench/memory_caps, docs/limits.md "Memory"):
// per unit, the controller's and the layout's records, the name maps, the
// aggregator's arrays, the decision scratch (every unit a candidate) and
// the snapshot's copies; each name is held four times (controller, layout,
// their name maps) plus up to three snapshot copies.
constexpr uint64_t kJobBase = 256u << 10;  // job, aggregator, acks, metrics
constexpr uint64_t kPerUnit = 1600;
constexpr uint64_t kPerNameByte = 20;
// A window cell: 8 B in the controller, in the state of a pending snapshot,
// in the one being written and in its frame, and in an imported state's
// bytes (kept until the next decision).
constexpr uint64_t kPerWindowCell = 40;
constexpr uint64_t kPerLayoutEntry = 32;       // in registration and in unit id order
constexpr uint64_t kPerReportedRankUnit = 64;  // a report being read and parsed
constexpr uint64_t kPerSlot = 64;              // combination accumulator, numel
// Session, stream (its gRPC state and, with a connection per rank, the
// connection's), metrics series: ~43 KiB measured with a connection each
// (bench/memory_caps `manyranks`), ~19 KiB on shared connections.
constexpr uint64_t kPerRank = 48u << 10;
constexpr uint64_t kPerMaxO = 4u << 10;       // entry, unit metric series
constexpr uint64_t kReportBytesPerUnit = 80;  // one unit of one open report, forward columns too
// The aggregator's and the job's own defaults, read from them (not copied):
// the open steps a job holds (one over the limit before the oldest closes)
// and the decisions it keeps for a rank that reconnects.
const uint64_t kOpenSteps = StepAggregator::Options{}.max_open_steps + 1;
const uint64_t kDecisionsKept = JobOptions{}.decisions_kept;
constexpr uint64_t kQueuedMessages = 256;  // DecisionQueue::Limits (daemon/server, above)

// "78.4 MiB": refusals near the limit must not read "needs 78, has 78".
std::string Mib(uint64_t bytes) {
  const uint64_t tenths = (bytes * 10 + (1u << 19)) >> 20;
  return std::to_string(tenths / 10) + "." + std::to_string(tenths % 10) + " MiB";
}

Status Exhausted(const std::string& what, uint64_t value, const char* key, uint64_t cap) {
  return Status(StatusCode::kResourceExhausted, what + " " + std::to_string(value) + " exceeds " +
                                                    key + " (" + std::to_string(cap) + ")");
}

}  // namespace

Status CheckJobCaps(const JobShape& s, const JobCaps& caps) {
  if (s.max_o > caps.max_o) return Exhausted("max_o", s.max_o, "max_o_limit", caps.max_o);
  if (s.units * s.window > caps.max_window_cells) {
    return Exhausted("units x short_window = " + std::to_string(s.units) + " x " +
                         std::to_string(s.window) + " =",
                     s.units * s.window, "max_window_cells_per_job", caps.max_window_cells);
  }
  if (s.rank_units > caps.max_rank_units) {
    return Exhausted("units registered over all ranks", s.rank_units, "max_rank_units_per_job",
                     caps.max_rank_units);
  }
  if (s.slots > caps.max_slots) {
    return Exhausted("shards over all units", s.slots, "max_slots_per_job", caps.max_slots);
  }
  return Status::Ok();
}

uint64_t DecisionMessageBytes(uint64_t entries) { return 128 + 48 * entries; }

uint64_t JobFootprint(const JobShape& s, const JobCaps& caps) {
  // Decisions: every recovery entry of a decision, and every rank's
  // in-flight one; queued ones are a suffix of the job's messages (bytes
  // bound per stream), recent ones in the job's history.
  const uint64_t decision = DecisionMessageBytes(s.max_o);
  const uint64_t queued = std::min(caps.max_queued_bytes + decision, kQueuedMessages * decision);
  const uint64_t history =
      std::min(caps.decision_history_bytes + decision, kDecisionsKept * decision);
  const uint64_t open_steps =
      std::min(caps.max_open_step_bytes, kOpenSteps * s.reported_rank_units * kReportBytesPerUnit);
  return kJobBase + s.units * kPerUnit + s.name_bytes * kPerNameByte +
         s.units * s.window * kPerWindowCell + s.layout_entries * kPerLayoutEntry +
         s.reported_rank_units * kPerReportedRankUnit + s.slots * kPerSlot +
         s.ranks * (kPerRank + decision) + s.max_o * kPerMaxO + s.rule_bytes + open_steps + queued +
         history + caps.event_ring_bytes;
}

Status MemoryBudget::Resize(const std::string& what, uint64_t old_bytes, uint64_t new_bytes) {
  MutexLock lock(mu_);
  const uint64_t others = used_ - std::min(used_, old_bytes);
  if (new_bytes > old_bytes && others + new_bytes > limit_) {
    return Status(StatusCode::kResourceExhausted,
                  what + " would need " + Mib(new_bytes) + ", and memory_budget (" + Mib(limit_) +
                      ") has " + Mib(limit_ - std::min(limit_, others)) +
                      " left for it (docs/limits.md)");
  }
  used_ = others + new_bytes;
  return Status::Ok();
}

void MemoryBudget::ForceResize(uint64_t old_bytes, uint64_t new_bytes) {
  MutexLock lock(mu_);
  used_ = used_ - std::min(used_, old_bytes) + new_bytes;
}

uint64_t MemoryBudget::used() const {
  MutexLock lock(mu_);
  return used_;
}

}  // namespace gnmr
