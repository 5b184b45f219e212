// The harness of bench/memory_caps: a gnmrd child process whose RSS is
// read from /proc, and simulated ranks that register and stream over gRPC.
#pragma once

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "gnmr/v1/gnmr.grpc.pb.h"

namespace gnmr::bench {

namespace v1 = gnmr::v1;

inline double Mib(uint64_t bytes) { return static_cast<double>(bytes) / (1 << 20); }

// VmRSS or VmHWM of `pid`, in bytes.
inline uint64_t ProcBytes(pid_t pid, const char* field) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field, 0) == 0) {
      std::istringstream s(line.substr(std::strlen(field) + 1));
      uint64_t kb = 0;
      s >> kb;
      return kb << 10;
    }
  }
  return 0;
}

inline void Sleep(int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

class Gnmrd {
 public:
  Gnmrd(const std::string& binary, const std::string& extra_yaml) {
    dir_ = "/tmp/gnmr-memcaps-" + std::to_string(::getpid()) + "-" + std::to_string(count_++);
    (void)std::system(("rm -rf " + dir_ + " && mkdir -p " + dir_).c_str());
    socket_ = dir_ + "/gnmrd.sock";
    std::ofstream(dir_ + "/gnmrd.yaml") << "listen: unix:" << socket_ << "\n"
                                        << "state_dir: " << dir_ << "/state\n"
                                        << "metrics: {listen: '127.0.0.1:0'}\n"
                                        << "log_level: error\n"
                                        << "step_deadline_ms: 3600000\n"
                                        << extra_yaml;
    pid_ = fork();
    if (pid_ == 0) {
      prctl(PR_SET_PDEATHSIG, SIGTERM);  // never outlives the bench
      const std::string config = "--config=" + dir_ + "/gnmrd.yaml";
      execl(binary.c_str(), binary.c_str(), config.c_str(), nullptr);
      std::perror("exec gnmrd");
      _exit(127);
    }
    channel_ = Connect(0);
    if (!channel_->WaitForConnected(std::chrono::system_clock::now() + std::chrono::seconds(20))) {
      std::fprintf(stderr, "memory_caps: gnmrd did not come up\n");
      std::exit(1);
    }
    Sleep(300);
    base_ = ProcBytes(pid_, "VmRSS:");
  }
  ~Gnmrd() {
    kill(pid_, SIGTERM);
    int status = 0;
    waitpid(pid_, &status, 0);
    (void)std::system(("rm -rf " + dir_).c_str());
  }
  std::shared_ptr<grpc::Channel> channel() { return channel_; }
  // A channel on a connection of its own (as each trainer process has).
  std::shared_ptr<grpc::Channel> Connect(int n) const {
    grpc::ChannelArguments args;
    args.SetInt("gnmr.bench.connection", n);
    args.SetMaxSendMessageSize(-1);
    args.SetMaxReceiveMessageSize(-1);
    return grpc::CreateCustomChannel("unix:" + socket_, grpc::InsecureChannelCredentials(), args);
  }
  uint64_t base() const { return base_; }
  uint64_t Peak() const { return ProcBytes(pid_, "VmHWM:"); }
  uint64_t PeakGrowth() const { return Peak() - base_; }

 private:
  static inline int count_ = 0;
  std::string dir_, socket_;
  pid_t pid_ = 0;
  std::shared_ptr<grpc::Channel> channel_;
  uint64_t base_ = 0;
};

inline int g_name_pad = 0;  // extra name bytes (long names: --name-pad 220)

inline std::string UnitName(int u) {
  return "model.layers." + std::to_string(u / 8) + ".block" + std::string(g_name_pad, 'x') +
         ".unit" + std::to_string(u % 8);
}

inline v1::ControllerConfig Config(int window, int max_o) {
  v1::ControllerConfig c;
  c.set_warmup(5);
  c.set_ema_decay(0.98);
  c.set_tau(6);
  c.set_tau_delta(4);
  c.set_gnmr_floor(1.5);
  c.set_short_window(window);
  c.set_max_o(max_o);
  c.set_lock_steps(1000000);
  c.set_lag(1);
  c.set_entry(v1::ENTRY_CLIP);
  c.set_clip_min_scale(0.01);
  return c;
}

inline v1::RegisterRequest RegisterOf(const std::string& job, uint32_t rank, uint32_t world,
                                      int units, const v1::ControllerConfig* config) {
  v1::RegisterRequest req;
  req.set_job_id(job);
  req.set_rank(rank);
  req.set_world_size(world);
  for (int u = 0; u < units; ++u) {
    v1::UnitSpec* s = req.add_units();
    s->set_name(UnitName(u));
    s->set_numel(1 << 20);
    s->set_dtype(v1::DTYPE_BF16);
  }
  if (config) *req.mutable_config() = *config;
  return req;
}

// One rank over the wire: Register, a Session stream, a reader thread
// unless it is to stall.
class SimRank {
 public:
  SimRank(std::shared_ptr<grpc::Channel> ch, std::string job, uint32_t rank, uint32_t world)
      : stub_(v1::Gnmr::NewStub(ch)), job_(std::move(job)), rank_(rank), world_(world) {}
  ~SimRank() {
    if (!stream_) return;
    stream_->WritesDone();
    ctx_.TryCancel();
    if (reader_.joinable()) reader_.join();
    stream_->Finish();
  }
  grpc::Status Register(int units, const v1::ControllerConfig* config) {
    grpc::ClientContext ctx;
    v1::RegisterResponse resp;
    grpc::Status s = stub_->Register(&ctx, RegisterOf(job_, rank_, world_, units, config), &resp);
    ids_.assign(resp.unit_ids().begin(), resp.unit_ids().end());
    session_ = resp.session_id();
    return s;
  }
  void Open(bool read) {
    stream_ = stub_->Session(&ctx_);
    v1::ClientMessage hello;
    hello.mutable_hello()->set_job_id(job_);
    hello.mutable_hello()->set_rank(rank_);
    hello.mutable_hello()->set_session_id(session_);
    stream_->Write(hello);
    if (read) {
      reader_ = std::thread([this] {
        v1::ServerMessage m;
        while (stream_->Read(&m)) decisions_++;
      });
    }
  }
  void Send(int64_t step, double sumsq) {
    v1::ClientMessage m;
    v1::StepStats* s = m.mutable_stats();
    s->set_step(step);
    for (uint32_t id : ids_) {
      s->add_unit_id(id);
      s->add_sumsq(sumsq);
    }
    stream_->Write(m);
  }
  int decisions() const { return decisions_.load(); }
  void WaitDecisions(int n) const {
    while (decisions() < n) Sleep(5);
  }

 private:
  std::unique_ptr<v1::Gnmr::Stub> stub_;
  std::string job_;
  uint32_t rank_, world_;
  uint64_t session_ = 0;
  std::vector<uint32_t> ids_;
  grpc::ClientContext ctx_;
  std::unique_ptr<grpc::ClientReaderWriter<v1::ClientMessage, v1::ServerMessage>> stream_;
  std::thread reader_;
  std::atomic<int> decisions_{0};
};

}  // namespace gnmr::bench
