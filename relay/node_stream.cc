#include "relay/node_stream.h"

#include <algorithm>
#include <utility>

#include <spdlog/spdlog.h>

#include "gnmr/v1/gnmr.pb.h"

namespace gnmr::relay {

NodeStream::NodeStream(const std::shared_ptr<grpc::Channel>& channel)
    : stub_(v1::GnmrRelay::NewStub(channel)) {
  stream_ = stub_->NodeSession(&ctx_);
}

std::shared_ptr<NodeStream> NodeStream::Start(const std::shared_ptr<grpc::Channel>& channel) {
  std::shared_ptr<NodeStream> stream(new NodeStream(channel));
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
    std::lock_guard<std::mutex> lock(mu_);
    ended_ = true;
  }
  cv_.notify_all();
}

bool NodeStream::WaitFinished(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  return cv_.wait_for(lock, timeout, [&] { return writer_exited_ && reader_exited_; });
}

bool NodeStream::Open(std::shared_ptr<LaneEndpoint> endpoint) {
  std::lock_guard<std::mutex> lock(mu_);
  if (ended_) return false;
  const LaneEndpoint* key = endpoint.get();
  lanes_[key].endpoint = std::move(endpoint);
  return true;
}

bool NodeStream::Send(const LaneEndpoint* lane, std::string message, const std::string& token) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = lanes_.find(lane);
    if (ended_ || it == lanes_.end()) return true;  // the lane's end is on its way
    if (pending_bytes_ + message.size() > kMaxPendingBytes) return false;
    Lane& l = it->second;
    if (!l.numbered) {
      l.numbered = true;
      l.id = next_lane_++;
      ids_.emplace(l.id, lane);
    }
    pending_bytes_ += message.size();
    v1::LaneUp& up = pending_.emplace_back();
    up.set_lane(l.id);
    *up.mutable_message() = std::move(message);
    if (!token.empty()) up.set_token(token);
  }
  cv_.notify_all();
  return true;
}

std::shared_ptr<LaneEndpoint> NodeStream::EndLocked(
    std::unordered_map<const LaneEndpoint*, Lane>::iterator it) {
  std::shared_ptr<LaneEndpoint> endpoint = std::move(it->second.endpoint);
  if (it->second.numbered) {
    ids_.erase(it->second.id);
    if (!ended_) {
      v1::LaneUp& up = pending_.emplace_back();
      up.set_lane(it->second.id);
      up.set_end(true);
    }
  }
  lanes_.erase(it);
  return endpoint;
}

void NodeStream::Close(const LaneEndpoint* lane) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = lanes_.find(lane);
    if (it == lanes_.end()) return;
    EndLocked(it);
  }
  cv_.notify_all();
}

bool NodeStream::ended() const {
  std::lock_guard<std::mutex> lock(mu_);
  return ended_;
}

void NodeStream::WriteLoop() {
  v1::NodeClientMessage msg;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return ended_ || !pending_.empty(); });
      if (ended_) break;
      // Everything queued since the last write, up to the size bound.
      size_t bytes = 0;
      size_t taken = 0;
      while (taken < pending_.size() && (bytes < kWriteBytes || taken == 0)) {
        bytes += pending_[taken].message().size();
        *msg.add_lanes() = std::move(pending_[taken++]);
      }
      pending_.erase(pending_.begin(), pending_.begin() + static_cast<ptrdiff_t>(taken));
      pending_bytes_ -= std::min(pending_bytes_, bytes);
    }
    const bool ok = stream_->Write(msg);
    msg.Clear();
    if (!ok) break;  // the stream is over: the reader learns why
  }
  std::lock_guard<std::mutex> lock(mu_);
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
    std::unique_lock<std::mutex> lock(mu_);
    ended_ = true;
    cv_.notify_all();
    cv_.wait(lock, [&] { return writer_exited_; });  // Finish only after the last Write
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
  std::lock_guard<std::mutex> lock(mu_);
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
      std::lock_guard<std::mutex> lock(mu_);
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
      std::lock_guard<std::mutex> lock(mu_);
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
