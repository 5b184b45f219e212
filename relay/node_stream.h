// NodeStream: gnmr-relay's stream to gnmrd (GnmrRelay.NodeSession), which
// carries the Session of each of this node's ranks as a lane
// (proto/gnmr/v1/relay.proto, docs/relay.md).
//
// Design notes
// - A writer thread and a reader thread per stream (gRPC's sync API): a
//   node has a handful of ranks, and two threads keep the order plain.
// - Up: what the ranks send is queued as LaneUps; the writer sends all that
//   was queued since its last write in one NodeClientMessage (up to
//   kWriteBytes), so the acks of a node's ranks for a step reach gnmrd in
//   one or two messages, not one per rank.
// - gnmrd's bound: a NodeClientMessage over gnmrd's max_message_bytes ends
//   the whole node stream, every lane on it. So a rank message that would
//   not fit once framed as a lane, token included, is refused with its
//   rank's stream alone (RESOURCE_EXHAUSTED, with the sizes), and a write
//   takes a lane only if the message stays within the bound.
// - Lane ids: a lane is numbered when its first message is queued, under
//   the queue's lock, so ids go up in the order gnmrd reads them whatever
//   the order in which the ranks opened their streams; a lane closed
//   before its first message never reaches gnmrd. Each numbered lane gets
//   exactly one `end` up: when its rank's stream ends, or in answer to
//   gnmrd's LaneEnd (gnmrd drops the lane's late messages until then).
// - Down: each LaneDelivery must parse as a ServerMessage (anything else
//   from gnmrd ends the stream: a relay forwards nothing it cannot read),
//   and its bytes, shared, go to every lane it lists, unchanged.
// - When the stream ends (gnmrd restarts, the network fails, the relay
//   stops) every lane ends with that status, UNAVAILABLE when gnmrd gave
//   none, and the ranks reconnect as they do when gnmrd is gone: the
//   client library fails open meanwhile. The next rank stream to open
//   starts a new NodeStream.
// - Endpoints are called on the reader thread and must not block.
// - Lifetime: the two threads hold the stream (Start) and end with it, so
//   letting go of a NodeStream never waits, on a gRPC thread least of all
//   (one that waited there for the threads deadlocked: they needed gRPC's
//   executor to see their cancellation). Cancel ends a stream on purpose.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "common/mutex.h"
#include "common/thread_annotations.h"
#include "gnmr/v1/relay.grpc.pb.h"

namespace gnmr::relay {

// The relay's side of one rank's Session stream.
class LaneEndpoint {
 public:
  virtual ~LaneEndpoint() = default;
  // One ServerMessage's bytes, as gnmrd serialized them.
  virtual void Deliver(std::shared_ptr<const std::string> bytes) = 0;
  // gnmrd (or the node stream) ended the lane.
  virtual void End(const grpc::Status& why) = 0;
};

class NodeStream {
 public:
  static constexpr size_t kWriteBytes = 4u << 20;  // a write's soft size bound
  // What a message waiting for the writer costs besides its bytes: its
  // LaneUp (48 B), its place in the queue and its string (~110 B in all).
  // An empty message costs this much too.
  static constexpr size_t kMessageCost = 128;

  struct Limits {
    size_t max_message_bytes = 64u << 20;  // gnmrd's bound on what it reads
    // What may wait for the writer, each message counting its bytes and
    // kMessageCost: past it gnmrd is not reading, and the rank that sends
    // more is ended (it reconnects) rather than the relay growing.
    size_t max_pending_bytes = 256u << 20;
  };

  // Opens the stream and starts its two threads, which hold it until the
  // stream ends.
  static std::shared_ptr<NodeStream> Start(const std::shared_ptr<grpc::Channel>& channel,
                                           const Limits& limits);
  NodeStream(const NodeStream&) = delete;
  NodeStream& operator=(const NodeStream&) = delete;

  // Ends the stream (its lanes end with it) without waiting.
  void Cancel();
  // Waits up to `timeout` for both threads to be done; never on a gRPC
  // thread.
  bool WaitFinished(std::chrono::milliseconds timeout);

  // A new lane for `endpoint`, which names it in the calls below; false
  // once the stream has ended. The lane gets its id with its first message.
  bool Open(std::shared_ptr<LaneEndpoint> endpoint);
  // One ClientMessage of the lane's rank; `token` goes with its first.
  // Not OK (and not queued) when it cannot go up: RESOURCE_EXHAUSTED when
  // the message, framed as a lane with the token, would not fit gnmrd's
  // bound, or when max_pending_bytes are already waiting. The rank's stream
  // then ends with that status.
  grpc::Status Send(const LaneEndpoint* lane, std::string message, const std::string& token);
  // The rank's stream ended: gnmrd is told (if it heard of the lane), and
  // the lane's deliveries stop.
  void Close(const LaneEndpoint* lane);

  bool ended() const;

 private:
  NodeStream(const std::shared_ptr<grpc::Channel>& channel, const Limits& limits);
  void WriteLoop();
  void ReadLoop();
  void Handle(const v1::NodeServerMessage& msg);

  grpc::ClientContext ctx_;
  std::unique_ptr<v1::GnmrRelay::Stub> stub_;
  std::unique_ptr<grpc::ClientReaderWriter<v1::NodeClientMessage, v1::NodeServerMessage>> stream_;
  struct Lane {
    std::shared_ptr<LaneEndpoint> endpoint;
    bool numbered = false;  // its first message is queued
    uint32_t id = 0;        // then its id on the wire
  };
  // A LaneUp waiting for the writer, with its bytes in a NodeClientMessage.
  struct Pending {
    v1::LaneUp up;
    size_t bytes = 0;
    size_t cost() const { return bytes + kMessageCost; }
  };
  // Queues `up` for the writer.
  void QueueLocked(v1::LaneUp up, size_t bytes) GNMR_REQUIRES(mu_);
  // Queues the lane's `end` for gnmrd (if it heard of the lane) and
  // forgets the lane; returns its endpoint.
  std::shared_ptr<LaneEndpoint> EndLocked(
      std::unordered_map<const LaneEndpoint*, Lane>::iterator it) GNMR_REQUIRES(mu_);

  const Limits limits_;
  mutable Mutex mu_;
  std::condition_variable cv_;
  std::unordered_map<const LaneEndpoint*, Lane> lanes_ GNMR_GUARDED_BY(mu_);  // the open lanes
  // The numbered ones, by id.
  std::unordered_map<uint32_t, const LaneEndpoint*> ids_ GNMR_GUARDED_BY(mu_);
  std::deque<Pending> pending_ GNMR_GUARDED_BY(mu_);
  size_t pending_bytes_ GNMR_GUARDED_BY(mu_) = 0;  // the sum of pending_'s cost()
  uint32_t next_lane_ GNMR_GUARDED_BY(mu_) = 0;
  bool ended_ GNMR_GUARDED_BY(mu_) = false;  // no new lanes, nothing more written
  bool writer_exited_ GNMR_GUARDED_BY(mu_) = false;
  bool reader_exited_ GNMR_GUARDED_BY(mu_) = false;
};

}  // namespace gnmr::relay
