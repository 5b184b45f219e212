// RoundCache: the bytes of a node stream's most common write, serialized
// once for every node stream of the daemon (node_session.h).
//
// A decision's broadcast sends one message to every lane of every node.
// Relays number their lanes from 0 in the order their ranks attach, so most
// nodes' writes for a round are the same bytes: one delivery of that
// message to lanes {0, ..., 7}. The cache keeps the last such write (the
// message, the sorted lanes, the bytes); a node whose write is the same
// shares its bytes instead of building and serializing its own copy. The
// message is held, so its address cannot be reused while it is the key.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/mutex.h"
#include "common/thread_annotations.h"
#include "daemon/job/wire_message.h"
#include "gnmr/v1/relay.pb.h"

namespace gnmr {

class RoundCache {
 public:
  // The serialized NodeServerMessage delivering `msg` to `lanes` (sorted).
  std::shared_ptr<const std::string> Get(const std::shared_ptr<const WireMessage>& msg,
                                         const std::vector<uint32_t>& lanes) {
    MutexLock lock(mu_);
    if (msg_ == msg && lanes_ == lanes) return bytes_;
    v1::NodeServerMessage out;
    v1::LaneDelivery* d = out.add_deliveries();
    d->set_message(msg->bytes);
    for (uint32_t lane : lanes) d->add_lanes(lane);
    auto bytes = std::make_shared<std::string>();
    out.SerializeToString(bytes.get());
    msg_ = msg;
    lanes_ = lanes;
    bytes_ = std::move(bytes);
    return bytes_;
  }

 private:
  Mutex mu_;
  std::shared_ptr<const WireMessage> msg_ GNMR_GUARDED_BY(mu_);
  std::vector<uint32_t> lanes_ GNMR_GUARDED_BY(mu_);
  std::shared_ptr<const std::string> bytes_ GNMR_GUARDED_BY(mu_);
};

}  // namespace gnmr
