// WireMessage: a message for the ranks' Session streams, serialized once
// when the job makes it. The same immutable object goes to every stream of
// the job, and each stream writes these bytes as they are
// (daemon/server/session_reactor.cc): no stream serializes its own copy, so
// a decision costs one serialization whatever the number of ranks, and all
// ranks receive identical bytes.
#pragma once

#include <memory>
#include <string>
#include <utility>

#include "gnmr/v1/gnmr.pb.h"

namespace gnmr {

struct WireMessage {
  std::shared_ptr<const v1::ServerMessage> message;
  std::string bytes;  // `message`, serialized

  bool is_generation() const { return message->has_generation(); }
};

// Serializes `message` once.
inline std::shared_ptr<const WireMessage> ToWire(std::shared_ptr<const v1::ServerMessage> message) {
  auto wire = std::make_shared<WireMessage>();
  message->SerializeToString(&wire->bytes);
  wire->message = std::move(message);
  return wire;
}

}  // namespace gnmr
