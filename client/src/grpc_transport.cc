// The gRPC transport (transport.h): IoLoop for the Session stream, the
// Admin calls of state_transfer.cc for checkpoints; and the registry of the
// local transport's factory.
#include <atomic>
#include <utility>

#include "client/src/io_loop.h"
#include "client/src/state_transfer.h"
#include "client/src/transport.h"

namespace gnmr {
namespace {

class GrpcTransport final : public Transport {
 public:
  explicit GrpcTransport(const ClientOptions& options) : options_(options) {}
  ~GrpcTransport() override { Stop(); }

  Status CheckUnit(const std::string&, uint32_t, uint32_t) const override {
    return Status::Ok();  // the daemon combines shards
  }

  Status Start(TransportWiring w) override {
    io_ = std::make_unique<IoLoop>(options_, std::move(w.request), w.outbox, w.shared, w.gpu);
    io_->Start();
    return Status::Ok();
  }

  void Stop() override {
    if (io_) io_->Stop();
  }

  StatusOr<std::string> ExportState(std::chrono::milliseconds timeout) override {
    return ExportStateRpc(options_, timeout);
  }
  StatusOr<uint64_t> ImportState(const std::string& state,
                                 std::chrono::milliseconds timeout) override {
    return ImportStateRpc(options_, state, timeout);
  }

 private:
  const ClientOptions& options_;  // the client's, which outlives this
  std::unique_ptr<IoLoop> io_;
};

std::atomic<LocalTransportFactory> g_local_factory{nullptr};

}  // namespace

std::unique_ptr<Transport> NewGrpcTransport(const ClientOptions& options) {
  return std::make_unique<GrpcTransport>(options);
}

void SetLocalTransportFactory(LocalTransportFactory factory) {
  g_local_factory.store(factory, std::memory_order_release);
}

LocalTransportFactory GetLocalTransportFactory() {
  return g_local_factory.load(std::memory_order_acquire);
}

}  // namespace gnmr
