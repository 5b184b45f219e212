#include "fuzz/job_harness.h"

#include <google/protobuf/stubs/logging.h>
#include <spdlog/spdlog.h>

#include "controller/state_codec.h"
#include "fuzz/fuzz_check.h"

namespace gnmr::fuzz {

void CheckingSink::SendDecision(std::shared_ptr<const WireMessage> wire) {
  FUZZ_CHECK(wire != nullptr && wire->message != nullptr, "null message");
  const std::shared_ptr<const v1::ServerMessage>& msg = wire->message;
  FUZZ_CHECK(wire->bytes == msg->SerializeAsString(), "serialized bytes differ from the message");
  if (msg->kind_case() == v1::ServerMessage::kGeneration) {
    const uint64_t g = msg->generation().generation();
    FUZZ_CHECK(!started_ || g >= generation_, "generation %llu after %llu",
               static_cast<unsigned long long>(g), static_cast<unsigned long long>(generation_));
    if (!started_ || g != generation_) have_sequence_ = false;
    started_ = true;
    generation_ = g;
    return;
  }
  FUZZ_CHECK(msg->kind_case() == v1::ServerMessage::kDecision, "empty ServerMessage");
  FUZZ_CHECK(started_, "a decision before the stream's GenerationStart");
  const v1::Decision& d = msg->decision();
  FUZZ_CHECK(d.generation() == generation_, "decision of generation %llu in generation %llu",
             static_cast<unsigned long long>(d.generation()),
             static_cast<unsigned long long>(generation_));
  FUZZ_CHECK(!have_sequence_ || d.sequence() > last_sequence_, "sequence %llu after %llu",
             static_cast<unsigned long long>(d.sequence()),
             static_cast<unsigned long long>(last_sequence_));
  have_sequence_ = true;
  last_sequence_ = d.sequence();
  // Denied clips (denied: clip) hold no budget: not counted against max_o.
  size_t held = 0;
  for (const v1::RecoveryEntry& e : d.recovery()) held += e.denied_clip() ? 0 : 1;
  if (held > max_recovery_) max_recovery_ = held;
  if (decisions_.size() < 64) decisions_.push_back(d);
}

void CheckingListener::OnSnapshot(const std::string& job_id, v1::ControllerState state,
                                  const v1::JobMeta& meta) {
  ++snapshots;
  StatusOr<Controller> c = ControllerStateCodec::Restore(state);
  FUZZ_CHECK(c.ok(), "job %s asked to snapshot a state that does not restore: %s", job_id.c_str(),
             c.status().ToString().c_str());
  FUZZ_CHECK(static_cast<size_t>(meta.units_size()) == c->num_units(),
             "snapshot layout has %d units, the state %zu", meta.units_size(), c->num_units());
}

void QuietLogs() {
  spdlog::set_level(spdlog::level::off);
  // protobuf logs each string field with invalid UTF-8 it refuses to parse.
  google::protobuf::SetLogHandler(
      [](google::protobuf::LogLevel, const char*, int, const std::string&) {});
}

}  // namespace gnmr::fuzz
