// Resource caps and the memory budget of gnmrd (docs/limits.md, "Memory").
//
// A job's memory is a function of its shape: its units (and their names),
// its Delta-GNMR window, its ranks and what each registered, its shards,
// its max_o and its action rules. JobFootprint() is an upper bound of the
// bytes a job of a given shape holds, state and the buffers its traffic
// can fill (open steps, queued and recent decisions, snapshot copies), with
// constants measured on gnmrd (bench/memory_caps, docs/perf.md).
//
// Two kinds of limits, both checked before a Register, a SetConfig, an
// ImportState or a job's creation changes anything, and refused with
// RESOURCE_EXHAUSTED naming the daemon config key:
// - per job (JobCaps): each product a single request could blow up, so
//   that one Register cannot allocate gigabytes (units x window, ranks x
//   units, shards, max_o);
// - per daemon (MemoryBudget, `memory_budget`): the sum of every job's
//   footprint. So the jobs hold at most the budget, whatever their number
//   and shapes; the daemon's memory is that plus its base, the event log's
//   buffer (store::EventLog::MemoryBound) and the requests being served
//   (server/request_gate.h): docs/limits.md gives the worst case.
#pragma once

#include <cstdint>
#include <string>

#include "common/mutex.h"
#include "daemon/aggregator/step_aggregator.h"
#include "gnmr/status.h"

namespace gnmr {

// What a job's memory depends on.
struct JobShape {
  uint64_t units = 0;
  uint64_t name_bytes = 0;  // the units' names, summed
  uint64_t window = 0;      // short_window
  uint64_t rank_units = 0;  // units registered, summed over the ranks (the cap)
  // The ranks' layouts as held: replicas that registered the same entries
  // share one (JobTopology::distinct_layout_entries), so <= rank_units.
  uint64_t layout_entries = 0;
  // Units summed over the ranks that send reports: rank_units with
  // `report: all`; with `one_per_shard` one replica per group, bounded by
  // layout_entries (every group holds at least one distinct layout).
  uint64_t reported_rank_units = 0;
  uint64_t slots = 0;  // shards, summed over the units
  uint64_t ranks = 0;  // ranks registered
  uint64_t max_o = 0;
  uint64_t rule_bytes = 0;  // the compiled action rules (ActionResolver)
};

struct JobCaps {
  uint64_t max_window_cells = uint64_t{1} << 22;  // units x short_window
  uint64_t max_rank_units = uint64_t{1} << 24;    // ranks x units, summed
  uint64_t max_slots = uint64_t{1} << 22;         // shards, summed
  uint64_t max_o = 4096;                          // max_o_limit
  // Report bytes buffered in open steps: past it the oldest open step
  // closes early. The aggregator's limit; the job sets it from there.
  uint64_t max_open_step_bytes = StepAggregator::Options{}.max_open_bytes;
  // Per Session stream (DecisionQueue::Limits::max_bytes), and the job's
  // recent decisions (JobOptions::decision_history_bytes).
  uint64_t max_queued_bytes = uint64_t{4} << 20;
  uint64_t decision_history_bytes = uint64_t{4} << 20;
  // The job's window of recent events in the event log
  // (store::RingMemoryBound; the job library does no I/O of its own).
  uint64_t event_ring_bytes = 0;
};

// RESOURCE_EXHAUSTED naming the first cap `shape` exceeds (and the key).
Status CheckJobCaps(const JobShape& shape, const JobCaps& caps);

// Upper bound of the bytes a job of `shape` holds (docs/limits.md).
uint64_t JobFootprint(const JobShape& shape, const JobCaps& caps);

// Upper bound of one Decision message's bytes with `entries` recovery
// entries (as queued and kept in the job's history).
uint64_t DecisionMessageBytes(uint64_t entries);

// The daemon's memory budget: the sum of the jobs' footprints. Thread-safe.
class MemoryBudget {
 public:
  explicit MemoryBudget(uint64_t limit) : limit_(limit) {}

  // Moves a job's reservation from `old_bytes` to `new_bytes`. Growth past
  // the limit is refused (RESOURCE_EXHAUSTED naming memory_budget and what
  // `what` needs) and changes nothing; shrinking always succeeds.
  Status Resize(const std::string& what, uint64_t old_bytes, uint64_t new_bytes);
  // The same without the check (a job restored at start-up is served even
  // when the budget was lowered since; it is then over the budget).
  void ForceResize(uint64_t old_bytes, uint64_t new_bytes);

  uint64_t used() const;
  uint64_t limit() const { return limit_; }

 private:
  const uint64_t limit_;
  mutable Mutex mu_;
  uint64_t used_ GNMR_GUARDED_BY(mu_) = 0;
};

}  // namespace gnmr
