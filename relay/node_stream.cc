#include "relay/node_stream.h"

#include <utility>

#include <google/protobuf/io/coded_stream.h>
#include <spdlog/spdlog.h>

#include "gnmr/v1/gnmr.pb.h"

namespace gnmr::relay {

namespace {

// The bytes of `up` as one element of NodeClientMessage.lanes: its tag, its
// length and itself.
size_t FramedSize(const v1::LaneUp& up) {
  const size_t size = up.ByteSizeLong();
  return 1 + google::protobuf::io::CodedOutputStream::VarintSize64(size) + size;
}

}  // namespace

NodeStream::NodeStream(const std::shared_ptr<grpc::Channel>& channel, const Limits& limits)
    : stub_(v1::GnmrRelay::NewStub(channel)), limits_(limits) {
  stream_ = stub_->NodeSession(&ctx_);
}

std::shared_ptr<NodeStream> NodeStream::Start(const std::shared_ptr<grpc::Channel>& channel,
                                              const Limits& limits) {
  std::shared_ptr<NodeStream> stream(new NodeStream(channel, limits));
  // Each thread holds the stream until it returns: whoever lets go of it
  // last (a gRPC thread finishing a rank's stream, often) never waits for
  // them, and a gRPC thread must never wait for gRPC work.
  std::thread([stream] { stream->WriteLoop(); }).detach();
  std::thread([stream] { stream->ReadLoop(); }).detach();
  return stream;
}

void NodeStream::Cancel() {
  ctx_.TryCancel();
  {
    MutexLock lock(mu_);
    ended_ = true;
  }
  cv_.notify_all();
}

bool NodeStream::WaitFinished(std::chrono::milliseconds timeout) {
  MutexLock lock(mu_);
  return cv_.wait_for(lock.native(), timeout,
                      [&]() GNMR_REQUIRES(mu_) { return writer_exited_ && reader_exited_; });
}

bool NodeStream::Open(std::shared_ptr<LaneEndpoint> endpoint) {
  MutexLock lock(mu_);
  if (ended_) return false;
  const LaneEndpoint* key = endpoint.get();
  lanes_[key].endpoint = std::move(endpoint);
  return true;
}

grpc::Status NodeStream::Send(const LaneEndpoint* lane, std::string message,
                              const std::string& token) {
  {
    MutexLock lock(mu_);
    auto it = lanes_.find(lane);
    if (ended_ || it == lanes_.end()) return grpc::Status::OK;  // the lane's end is on its way
    Lane& l = it->second;
    const size_t message_bytes = message.size();
    v1::LaneUp up;
    up.set_lane(l.numbered ? l.id : next_lane_);
    *up.mutable_message() = std::move(message);
    if (!token.empty()) up.set_token(token);
    const size_t bytes = FramedSize(up);
    if (bytes > limits_.max_message_bytes) {
      return grpc::Status(
          grpc::StatusCode::RESOURCE_EXHAUSTED,
          "gnmr-relay: a message of " + std::to_string(message_bytes) + " bytes" +
              (token.empty() ? std::string()
                             : " with its token of " + std::to_string(token.size()) + " bytes") +
              " takes " + std::to_string(bytes) +
              " bytes as a lane of the node stream, over "
              "gnmrd's max_message_bytes (" +
              std::to_string(limits_.max_message_bytes) + "); nothing was sent");
    }
    if (pending_bytes_ + bytes + kMessageCost > limits_.max_pending_bytes) {
      return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                          "gnmr-relay: gnmrd is not reading (" + std::to_string(pending_.size()) +
                              " messages queued for it, " + std::to_string(pending_bytes_) +
                              " bytes counted of the relay's --max-pending-bytes " +
                              std::to_string(limits_.max_pending_bytes) + "); reconnect");
    }
    if (!l.numbered) {  // numbered with its first message queued: ids go up in queue order
      l.numbered = true;
      l.id = next_lane_++;
      ids_.emplace(l.id, lane);
    }
    QueueLocked(std::move(up), bytes);
  }
  cv_.notify_all();
  return grpc::Status::OK;
}

void NodeStream::QueueLocked(v1::LaneUp up, size_t bytes) {
  pending_.push_back({std::move(up), bytes});
  pending_bytes_ += pending_.back().cost();
}

std::shared_ptr<LaneEndpoint> NodeStream::EndLocked(
    std::unordered_map<const LaneEndpoint*, Lane>::iterator it) {
  std::shared_ptr<LaneEndpoint> endpoint = std::move(it->second.endpoint);
  if (it->second.numbered) {
    ids_.erase(it->second.id);
    if (!ended_) {
      v1::LaneUp up;
      up.set_lane(it->second.id);
      up.set_end(true);
      const size_t bytes = FramedSize(up);
      QueueLocked(std::move(up), bytes);
    }
  }
  lanes_.erase(it);
  return endpoint;
}

void NodeStream::Close(const LaneEndpoint* lane) {
  {
    MutexLock lock(mu_);
    auto it = lanes_.find(lane);
    if (it == lanes_.end()) return;
    EndLocked(it);
  }
  cv_.notify_all();
}

bool NodeStream::ended() const {
  MutexLock lock(mu_);
  return ended_;
}

void NodeStream::WriteLoop() {
  v1::NodeClientMessage msg;
  for (;;) {
    {
      MutexLock lock(mu_);
      cv_.wait(lock.native(), [&]() GNMR_REQUIRES(mu_) { return ended_ || !pending_.empty(); });
      if (ended_) break;
      // Everything queued since the last write, up to the soft bound and
      // never past gnmrd's (Send let in only lanes that fit alone).
      size_t bytes = 0;
      while (!pending_.empty()) {
        Pending& next = pending_.front();
        if (bytes > 0 && (bytes >= kWriteBytes || bytes + next.bytes > limits_.max_message_bytes))
          break;
        bytes += next.bytes;
        pending_bytes_ -= next.cost();
        *msg.add_lanes() = std::move(next.up);
        pending_.pop_front();
      }
    }
    const bool ok = stream_->Write(msg);
    msg.Clear();
    if (!ok) break;  // the stream is over: the reader learns why
  }
  MutexLock lock(mu_);
  writer_exited_ = true;
  cv_.notify_all();
}

void NodeStream::ReadLoop() {
  v1::NodeServerMessage msg;
  while (stream_->Read(&msg)) {
    Handle(msg);
    msg.Clear();
  }
  std::vector<std::shared_ptr<LaneEndpoint>> lanes;
  {
    MutexLock lock(mu_);
    ended_ = true;
    cv_.notify_all();
    cv_.wait(lock.native(), [&]() GNMR_REQUIRES(mu_) {
      return writer_exited_;
    });  // Finish only after the last Write
    for (auto& [key, lane] : lanes_) lanes.push_back(std::move(lane.endpoint));
    lanes_.clear();
    ids_.clear();
    pending_.clear();
    pending_bytes_ = 0;
  }
  grpc::Status status = stream_->Finish();
  if (status.ok() || status.error_code() == grpc::StatusCode::CANCELLED) {
    status = grpc::Status(grpc::StatusCode::UNAVAILABLE,
                          "gnmr-relay: the stream to gnmrd ended" +
                              (status.ok() ? std::string() : ": " + status.error_message()));
  } else {
    spdlog::warn("stream to gnmrd ended: {} ({}); its {} ranks reconnect", status.error_message(),
                 static_cast<int>(status.error_code()), lanes.size());
  }
  for (const std::shared_ptr<LaneEndpoint>& endpoint : lanes) endpoint->End(status);
  MutexLock lock(mu_);
  reader_exited_ = true;
  cv_.notify_all();
}

void NodeStream::Handle(const v1::NodeServerMessage& msg) {
  for (const v1::LaneDelivery& d : msg.deliveries()) {
    v1::ServerMessage check;
    if (!check.ParseFromString(d.message())) {
      spdlog::error("gnmrd sent a lane delivery that is not a ServerMessage; ending the stream");
      ctx_.TryCancel();
      return;
    }
    auto bytes = std::make_shared<const std::string>(d.message());
    std::vector<std::shared_ptr<LaneEndpoint>> to;
    {
      MutexLock lock(mu_);
      for (uint32_t id : d.lanes()) {
        auto it = ids_.find(id);
        if (it != ids_.end()) to.push_back(lanes_.at(it->second).endpoint);
      }
    }
    for (const std::shared_ptr<LaneEndpoint>& endpoint : to) endpoint->Deliver(bytes);
  }
  for (const v1::LaneEnd& end : msg.ends()) {
    std::shared_ptr<LaneEndpoint> endpoint;
    {
      MutexLock lock(mu_);
      auto id = ids_.find(end.lane());
      if (id == ids_.end()) continue;  // closed meanwhile: its `end` is already queued
      // The `end` answers gnmrd, which drops the lane's late messages until
      // it comes.
      endpoint = EndLocked(lanes_.find(id->second));
    }
    cv_.notify_all();
    const int code = end.code();
    endpoint->End(grpc::Status(
        code >= 0 && code <= 16 ? static_cast<grpc::StatusCode>(code) : grpc::StatusCode::UNKNOWN,
        end.message()));
  }
}

}  // namespace gnmr::relay
