// LocalSession: one rank's Session stream at gnmr-relay, carried to gnmrd
// as a lane of the node's stream (node_stream.h).
//
// Design notes
// - The relay reads nothing into the rank's messages: their bytes go up as
//   they are, with the rank's x-gnmr-token on the first, and gnmrd
//   validates them exactly as on the rank's own stream. A message that
//   cannot go up (it would not fit gnmrd's bound as a lane, or gnmrd is
//   not reading) ends this rank's stream alone, with the status saying why
//   (node_stream.h).
// - Down, the bytes gnmrd serialized go to the rank unchanged (one shared
//   copy per node). At most one write is in flight; a rank that falls
//   kMaxQueued messages behind is ended with RESOURCE_EXHAUSTED and
//   reconnects, when gnmrd sends it the generation and recent decisions
//   again: nothing it has not read is lost without its knowing.
// - Lifetime: the LocalLink (held by the node stream as the lane's
//   endpoint) outlives the reactor; OnDone cuts its pointer and deletes the
//   reactor. Finish never starts while a write or a read re-arm is
//   outstanding.
#pragma once

#include <cstddef>
#include <deque>
#include <memory>
#include <string>

#include <grpcpp/grpcpp.h>

#include "common/finish_gate.h"
#include "common/mutex.h"
#include "common/thread_annotations.h"
#include "relay/node_stream.h"

namespace gnmr::relay {

class LocalSession;

class LocalLink final : public LaneEndpoint {
 public:
  static constexpr size_t kMaxQueued = 256;

  explicit LocalLink(LocalSession* session) : session_(session) {}
  void Deliver(std::shared_ptr<const std::string> bytes) override;
  void End(const grpc::Status& why) override;

 private:
  friend class LocalSession;
  void WriteDone();
  void Detach();
  bool BeginRearm();
  void EndRearm();

  // The status Finish starts with, read outside mu_ by whoever Take() (or
  // EndRearm()) returned true to, and by the reactor's OnDone: the gate
  // never changes it once taken, so the read needs no lock, which the
  // analysis cannot know.
  const grpc::Status& TakenStatus() const GNMR_NO_THREAD_SAFETY_ANALYSIS { return gate_.status(); }

  Mutex mu_;
  LocalSession* session_ GNMR_GUARDED_BY(mu_);  // null once the reactor is done
  std::deque<std::shared_ptr<const std::string>> queue_ GNMR_GUARDED_BY(mu_);
  // When Finish may start (common/finish_gate.h).
  FinishGate<grpc::Status> gate_ GNMR_GUARDED_BY(mu_);
};

class LocalSession final : public grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  // `stream`: the node stream its lane opens on (null or ended: the rank's
  // stream ends at once with UNAVAILABLE, as when gnmrd is down).
  LocalSession(grpc::CallbackServerContext* ctx, std::shared_ptr<NodeStream> stream);

  void OnReadDone(bool ok) override;
  void OnWriteDone(bool ok) override;
  void OnCancel() override;
  void OnDone() override;

 private:
  friend class LocalLink;
  void Read();
  void Write(std::shared_ptr<const std::string> bytes);
  void End(const grpc::Status& status);
  // Reacting() starts every reaction, Reacted() ends it: what gRPC orders,
  // told to TSan (common/tsan_annotations.h).
  void Reacting(char* op);
  void Reacted();

  grpc::CallbackServerContext* const ctx_;
  std::shared_ptr<NodeStream> stream_;
  std::shared_ptr<LocalLink> link_;  // also names the lane on stream_
  bool lane_open_ = false;
  std::string token_;  // sent with the first message, then cleared
  grpc::ByteBuffer in_;
  grpc::ByteBuffer out_;
  struct {
    char constructed, read, write, ended;
  } order_ = {};  // sync addresses only
};

}  // namespace gnmr::relay
