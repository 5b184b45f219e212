#include "controller/publish/decision_message.h"

#include <optional>
#include <utility>

#include "controller/types/recovery_entry_codec.h"

namespace gnmr {
std::shared_ptr<const v1::ServerMessage> DecisionMessage(const Decision& d, uint64_t generation) {
  auto msg = std::make_shared<v1::ServerMessage>();
  v1::Decision* pd = msg->mutable_decision();
  pd->set_observed_step(d.observed_step);
  pd->set_apply_step(d.apply_step);
  pd->set_sequence(d.sequence);
  for (const RecoveryEntry& e : d.recovery) RecoveryEntryToProto(e, pd->add_recovery());
  for (const Admission& a : d.admitted) pd->add_admitted(a.unit_id);
  for (uint32_t u : d.released) pd->add_released(u);
  pd->set_global_skip(d.global_skip);
  pd->set_digest(d.digest);
  pd->set_config_version(d.config_version);
  pd->set_generation(generation);
  pd->set_next_lag(d.next_lag);
  return msg;
}

std::shared_ptr<const v1::ServerMessage> GenerationStartMessage(
    uint64_t generation, int32_t next_lag, uint64_t first_sequence,
    const std::optional<LiveSwitch>& live, bool rebuilt) {
  auto msg = std::make_shared<v1::ServerMessage>();
  v1::GenerationStart* g = msg->mutable_generation();
  g->set_generation(generation);
  g->set_next_lag(next_lag);
  g->set_first_sequence(first_sequence);
  g->set_rebuilt(rebuilt);
  if (live) {
    g->set_live(true);
    g->set_from_step(live->from_step);
    g->set_decided_through(live->decided_through);
  }
  return msg;
}

bool RebuildLastDecision(const Controller& c, Decision* out) {
  const std::optional<int64_t> observed = c.last_step();
  const std::optional<int64_t> apply = c.last_apply();
  if (!observed || !apply || c.sequence() == 0) return false;
  Decision d;
  d.observed_step = *observed;
  d.apply_step = *apply;
  d.sequence = c.sequence();
  d.config_version = c.config_version();
  c.PublishedSet(&d.recovery);  // denied clips included: the original digest
  d.global_skip = c.last_global_skip();
  d.next_lag = c.next_lag();
  d.digest = DigestOf(d.apply_step, d.recovery, d.global_skip);
  *out = std::move(d);
  return true;
}

}  // namespace gnmr
