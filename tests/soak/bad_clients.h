// BadClients: hostile and broken peers mixed into the soak, on a thread of
// their own: bytes that are not the message they claim to be, wrong job and
// admin tokens, hellos naming another rank's session, steps far ahead
// (2^61 - 1) and negative ones, mismatched columns, invalid registrations,
// messages over the size limit, junk jobs registered and abandoned (idle
// expiry removes them) or deleted by an "operator".
//
// Each attack has the statuses gnmrd may answer with; anything else is
// counted as unexpected (with the first few messages kept for the report).
// UNAVAILABLE while the soak has the daemon down for a restart is neither.
// None of them touches the soak's own job except to be refused.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include "gnmr/v1/gnmr.grpc.pb.h"

namespace gnmr::soak {

struct BadClientSettings {
  std::string target;
  std::string main_job;                 // refused, never harmed
  std::string main_job_token;           // its real token (never sent)
  std::string admin_token;              // for the operator's deletes of junk jobs
  std::chrono::milliseconds pause{50};  // between attacks
};

class BadClients {
 public:
  explicit BadClients(BadClientSettings settings);
  ~BadClients();  // Stop()

  void Start();
  void Stop();
  // The daemon is (not) being restarted: UNAVAILABLE is then expected.
  void SetDaemonDown(bool down) { down_ = down; }

  struct Report {
    std::map<std::string, uint64_t> expected;  // attack -> answered as expected
    uint64_t unavailable = 0;                  // daemon down (restart)
    uint64_t unexpected = 0;
    std::vector<std::string> unexpected_samples;
    uint64_t junk_jobs = 0;
  };
  Report report() const;

 private:
  // One attack; records its outcome.
  void RunOnce(uint64_t n);
  void Outcome(const std::string& attack, const grpc::Status& s,
               std::set<grpc::StatusCode> expected);

  grpc::Status GarbageUnary(const std::string& method, size_t bytes);
  grpc::Status RegisterJunk(const std::string& job, v1::RegisterResponse* resp);
  // Opens a Session with `hello`, sends `then`, and returns how it ended.
  grpc::Status SessionWith(const std::string& token, const v1::ClientMessage& hello,
                           const std::vector<v1::ClientMessage>& then);
  grpc::Status DeleteJob(const std::string& job, const std::string& token);

  const BadClientSettings settings_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Gnmr::Stub> gnmr_;
  std::unique_ptr<v1::Admin::Stub> admin_;
  std::unique_ptr<grpc::GenericStub> generic_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> down_{false};
  std::thread thread_;
  mutable std::mutex mu_;
  Report report_;
};

}  // namespace gnmr::soak
