// A stand-in for gnmrd's Gnmr service over a Unix socket, for client tests
// that need a daemon which misbehaves in a way the real one never does.
//
// - silent: Register answers, the Session stream is accepted and read, but
//   nothing is ever sent on it (a stream gnmrd never attached: the lane a
//   relay dropped). SetSilent(false) makes the next streams attach.
// - otherwise: the stream is attached (GenerationStart first, as gnmrd's
//   Job::Attach does); the report of step s is answered with the decision
//   observing s (lag 1, empty recovery set) unless s is in [junk_from,
//   junk_until). While the newest report is in that window the server sends,
//   every kJunkPeriod, only what cannot answer a due step: a decision of an
//   older generation, a duplicate of the newest decision and a repeated
//   GenerationStart of the current generation.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include <grpcpp/grpcpp.h>

#include "controller/types/decision.h"
#include "gnmr/v1/gnmr.grpc.pb.h"

namespace gnmr::testing {

class FakeSessionServer final : public v1::Gnmr::Service {
 public:
  static constexpr uint64_t kGeneration = 1;
  static constexpr auto kJunkPeriod = std::chrono::milliseconds(20);

  explicit FakeSessionServer(bool silent) : silent_(silent) {}
  ~FakeSessionServer() override {
    if (server_) server_->Shutdown(std::chrono::system_clock::now());
  }

  // Streams opened from now on are attached (false) or not (true).
  void SetSilent(bool silent) { silent_ = silent; }
  // The steps whose reports get no decision.
  void SetJunkWindow(int64_t from, int64_t until) {
    junk_from_ = from;
    junk_until_ = until;
  }
  // How long the server takes to answer a report.
  void SetAnswerDelay(std::chrono::milliseconds d) { answer_delay_ms_ = d.count(); }

  bool Start(const std::string& path) {
    grpc::ServerBuilder b;
    b.AddListeningPort("unix:" + path, grpc::InsecureServerCredentials());
    b.RegisterService(this);
    server_ = b.BuildAndStart();
    return server_ != nullptr;
  }

  uint64_t registers() const { return registers_.load(); }
  uint64_t hellos() const { return hellos_.load(); }

  grpc::Status Register(grpc::ServerContext*, const v1::RegisterRequest* req,
                        v1::RegisterResponse* resp) override {
    const uint64_t n = registers_.fetch_add(1) + 1;
    for (int i = 0; i < req->units_size(); ++i) resp->add_unit_ids(static_cast<uint32_t>(i));
    resp->set_lag(1);
    resp->set_session_id(n);
    resp->set_last_step(-1);
    resp->set_generation(kGeneration);
    return grpc::Status::OK;
  }

  grpc::Status Session(
      grpc::ServerContext*,
      grpc::ServerReaderWriter<v1::ServerMessage, v1::ClientMessage>* stream) override {
    v1::ClientMessage in;
    if (!stream->Read(&in) || !in.has_hello()) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "hello first");
    }
    hellos_.fetch_add(1);
    if (silent_.load()) {
      while (stream->Read(&in)) {
      }
      return grpc::Status::OK;
    }
    std::mutex write_mu;
    std::atomic<bool> done{false};
    std::atomic<int64_t> newest_report{-1};
    v1::ServerMessage newest_decision;  // guarded by write_mu
    auto write = [&](const v1::ServerMessage& m) {
      std::lock_guard<std::mutex> lock(write_mu);
      stream->Write(m);
    };
    write(GenerationStartMsg());
    std::thread junk([&] {
      while (!done.load()) {
        if (InJunkWindow(newest_report.load())) {
          write(DecisionMsg(kGeneration - 1, 1, 0));  // stale
          write(GenerationStartMsg());                // repeated
          v1::ServerMessage dup;
          {
            std::lock_guard<std::mutex> lock(write_mu);
            dup = newest_decision;
          }
          if (dup.has_decision()) write(dup);  // duplicate
        }
        std::this_thread::sleep_for(kJunkPeriod);
      }
    });
    uint64_t sequence = 0;
    while (stream->Read(&in)) {
      if (!in.has_stats()) continue;
      const int64_t step = in.stats().step();
      newest_report.store(step);
      if (InJunkWindow(step)) continue;
      std::this_thread::sleep_for(std::chrono::milliseconds(answer_delay_ms_.load()));
      const v1::ServerMessage d = DecisionMsg(kGeneration, ++sequence, step);
      {
        std::lock_guard<std::mutex> lock(write_mu);
        newest_decision = d;
      }
      write(d);
    }
    done.store(true);
    junk.join();
    return grpc::Status::OK;
  }

 private:
  bool InJunkWindow(int64_t step) const { return step >= junk_from_ && step < junk_until_; }

  static v1::ServerMessage GenerationStartMsg() {
    v1::ServerMessage m;
    m.mutable_generation()->set_generation(kGeneration);
    m.mutable_generation()->set_next_lag(1);
    m.mutable_generation()->set_first_sequence(1);
    return m;
  }

  // The decision observing `step` at lag 1, with an empty recovery set.
  static v1::ServerMessage DecisionMsg(uint64_t generation, uint64_t sequence, int64_t step) {
    v1::ServerMessage m;
    v1::Decision* d = m.mutable_decision();
    d->set_generation(generation);
    d->set_sequence(sequence);
    d->set_observed_step(step);
    d->set_apply_step(step + 1);
    d->set_next_lag(1);
    d->set_digest(DigestOf(step + 1, {}, false));
    return m;
  }

  std::atomic<bool> silent_;
  std::atomic<int64_t> junk_from_{-1};
  std::atomic<int64_t> junk_until_{-1};
  std::atomic<int64_t> answer_delay_ms_{0};
  std::atomic<uint64_t> registers_{0};
  std::atomic<uint64_t> hellos_{0};
  std::unique_ptr<grpc::Server> server_;
};

}  // namespace gnmr::testing
