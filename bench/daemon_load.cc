// daemon_load: drives a real gnmrd with many simulated ranks over loopback
// and prints a table: steps/s sustained, unit statistics/s, decision latency
// percentiles and the daemon's peak RSS.
//
// Each simulated rank is one Session stream (gRPC callback API, so 256
// ranks need no 256 threads). All ranks register the same U units (data-
// parallel replicas: the daemon averages them), then the driver sends step
// t from every rank and records when the decision for t arrives at each.
// Latency of a step = last decision arrival - last report sent; it
// includes both directions of loopback transfer, so it is an upper bound of
// the daemon's own "last report in -> decision out" time.
//
// Usage: daemon_load --gnmrd PATH [--ranks 64] [--units 1024] [--steps 500]
//                    [--rate 50] [--window 8] [--trace-dir DIR]
//        --trace-dir: the spawned gnmrd records the job's trace there
//        (docs/replay.md); the counters of its recorder are printed.
//        daemon_load --target unix:/path ...   (an already running gnmrd)
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "common/flag_parser.h"
#include "gnmr/v1/gnmr.grpc.pb.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  std::string gnmrd;
  std::string target;
  int ranks = 64;
  int units = 1024;
  int steps = 500;
  double rate = 50;       // steps/s; 0 = as fast as the window allows
  int window = 8;         // max steps in flight
  std::string trace_dir;  // passed to the spawned gnmrd
};

// Per-step bookkeeping shared by all ranks.
struct StepLog {
  explicit StepLog(int steps) : sent(steps), last_arrival(steps), arrivals(steps) {
    for (auto& a : arrivals) a.store(0);
  }
  std::vector<Clock::time_point> sent;
  std::vector<Clock::time_point> last_arrival;
  std::vector<std::atomic<int>> arrivals;
  std::mutex mu;
  std::condition_variable cv;
  int complete = 0;  // steps whose decision reached every rank
};

class Rank : public grpc::ClientBidiReactor<gnmr::v1::ClientMessage, gnmr::v1::ServerMessage> {
 public:
  Rank(gnmr::v1::Gnmr::Stub* stub, const std::string& job, uint32_t rank, uint64_t session,
       std::vector<uint32_t> ids, StepLog* log, int ranks)
      : ids_(std::move(ids)), log_(log), ranks_(ranks) {
    stub->async()->Session(&ctx_, this);
    gnmr::v1::ClientMessage hello;
    hello.mutable_hello()->set_job_id(job);
    hello.mutable_hello()->set_rank(rank);
    hello.mutable_hello()->set_session_id(session);
    Enqueue(std::move(hello));
    StartRead(&in_);
    StartCall();
  }

  void SendStep(int64_t step) {
    gnmr::v1::ClientMessage m;
    gnmr::v1::StepStats* s = m.mutable_stats();
    s->set_step(step);
    s->mutable_unit_id()->Add(ids_.begin(), ids_.end());
    s->mutable_sumsq()->Reserve(static_cast<int>(ids_.size()));
    for (size_t i = 0; i < ids_.size(); ++i) {
      double v = 1.0 + 0.01 * static_cast<double>((step * 7 + i) % 13);
      if (step > 60 && (step + i) % 997 == 0) v *= 400.0;  // occasional spike
      s->add_sumsq(v);
    }
    Enqueue(std::move(m));
  }

  void Close() { ctx_.TryCancel(); }
  void Wait() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return done_; });
  }

  void OnWriteDone(bool ok) override {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.pop_front();
    if (ok && !queue_.empty())
      StartWrite(&queue_.front());
    else
      writing_ = false;
  }
  void OnReadDone(bool ok) override {
    if (!ok) return;
    if (!in_.has_decision()) {  // a GenerationStart: not a step's decision
      StartRead(&in_);
      return;
    }
    const int64_t step = in_.decision().observed_step();
    if (step >= 0 && step < static_cast<int64_t>(log_->sent.size())) {
      const auto now = Clock::now();
      if (log_->arrivals[step].fetch_add(1) + 1 == ranks_) {
        std::lock_guard<std::mutex> lock(log_->mu);
        log_->last_arrival[step] = now;
        log_->complete++;
        log_->cv.notify_all();
      }
    }
    StartRead(&in_);
  }
  void OnDone(const grpc::Status&) override {
    std::lock_guard<std::mutex> lock(mu_);
    done_ = true;
    cv_.notify_all();
  }

 private:
  void Enqueue(gnmr::v1::ClientMessage m) {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(std::move(m));
    if (!writing_ && started_) {
      writing_ = true;
      StartWrite(&queue_.front());
    } else if (!started_) {
      started_ = true;
      writing_ = true;
      StartWrite(&queue_.front());
    }
  }

  grpc::ClientContext ctx_;
  std::vector<uint32_t> ids_;
  StepLog* log_;
  int ranks_;
  gnmr::v1::ServerMessage in_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<gnmr::v1::ClientMessage> queue_;
  bool writing_ = false, started_ = false, done_ = false;
};

// A free loopback TCP port (bound and released; fine for a benchmark).
int FreePort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  close(fd);
  return ntohs(a.sin_port);
}

// GET /metrics from 127.0.0.1:port; "" on failure.
std::string Scrape(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    close(fd);
    return "";
  }
  const std::string req = "GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
  if (write(fd, req.data(), req.size()) < 0) {
    close(fd);
    return "";
  }
  std::string out;
  char buf[65536];
  ssize_t n;
  while ((n = read(fd, buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
  close(fd);
  return out;
}

// Quantile q of a Prometheus histogram in `text`, as the upper bound of the
// bucket holding it (what histogram_quantile would interpolate within).
double HistogramBound(const std::string& text, const std::string& name, double q) {
  std::vector<std::pair<double, double>> buckets;  // le, cumulative count
  size_t pos = 0;
  const std::string prefix = name + "_bucket{";
  while ((pos = text.find(prefix, pos)) != std::string::npos) {
    const size_t le = text.find("le=\"", pos);
    const size_t end = text.find('\n', pos);
    if (le == std::string::npos || le > end) break;
    const std::string bound = text.substr(le + 4, text.find('"', le + 4) - le - 4);
    const double count = std::atof(text.c_str() + text.rfind(' ', end) + 1);
    buckets.emplace_back(bound == "+Inf" ? 1e300 : std::atof(bound.c_str()), count);
    pos = end;
  }
  if (buckets.empty() || buckets.back().second <= 0) return -1;
  const double want = q * buckets.back().second;
  for (const auto& [le, c] : buckets) {
    if (c >= want) return le;
  }
  return -1;
}

// The value of an unlabelled counter or gauge in `text`; -1 if absent.
double MetricValue(const std::string& text, const std::string& name) {
  size_t pos = 0;
  while ((pos = text.find(name + " ", pos)) != std::string::npos) {
    if (pos == 0 || text[pos - 1] == '\n') return std::atof(text.c_str() + pos + name.size() + 1);
    pos += name.size();
  }
  return -1;
}

long PeakRssKb(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::atol(line.c_str() + 6);
  }
  return -1;
}

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i = std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())));
  return v[i];
}

// Parses the command line into `o`; 0 to run, else the exit code (help 0,
// bad command line 2).
int ParseOptions(int argc, char** argv, Options* o, bool* run) {
  int64_t ranks = o->ranks, units = o->units, steps = o->steps, window = o->window;
  gnmr::FlagParser p(
      "daemon_load (--gnmrd PATH | --target T) [--ranks N] [--units N] [--steps N]\n"
      "                   [--rate STEPS_PER_S] [--window N] [--trace-dir DIR]",
      "Load generator for gnmrd: N ranks of one job report every unit each step;\n"
      "prints decision latency (client side and gnmrd's histogram) and gnmrd's RSS.");
  p.AddString("gnmrd", "PATH", "start this gnmrd binary (in a temporary state dir)", &o->gnmrd);
  p.AddString("target", "T", "or use a running gnmrd at T", &o->target);
  p.AddInt("ranks", "N", "ranks (default 64)", 1, 1 << 20, &ranks);
  p.AddInt("units", "N", "units per rank (default 1024)", 1, 1 << 22, &units);
  p.AddInt("steps", "N", "steps (default 500)", 1, 1 << 30, &steps);
  p.AddDouble("rate", "STEPS_PER_S",
              "steps per second; 0 = as fast as the window allows\n"
              "(default 50)",
              &o->rate);
  p.AddInt("window", "N", "most steps in flight (default 8)", 1, 1 << 20, &window);
  p.AddString("trace-dir", "DIR", "record traces there (the spawned gnmrd's --trace-dir)",
              &o->trace_dir);
  *run = false;
  const gnmr::Status s = p.Parse(argc - 1, argv + 1);
  if (p.help_requested()) {
    std::fputs(p.Help().c_str(), stdout);
    return 0;
  }
  std::string error = s.ok() ? "" : s.message();
  if (error.empty() && o->gnmrd.empty() == o->target.empty()) {
    error = "give exactly one of --gnmrd, --target";
  }
  if (error.empty() && !o->trace_dir.empty() && o->gnmrd.empty()) {
    error = "--trace-dir needs --gnmrd";
  }
  if (error.empty() && !(o->rate >= 0)) error = "--rate must be >= 0";
  if (!error.empty()) {
    std::fprintf(stderr, "daemon_load: %s\n%s", error.c_str(), p.Help().c_str());
    return 2;
  }
  o->ranks = static_cast<int>(ranks);
  o->units = static_cast<int>(units);
  o->steps = static_cast<int>(steps);
  o->window = static_cast<int>(window);
  *run = true;
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  bool run = false;
  const int rc = ParseOptions(argc, argv, &o, &run);
  if (!run) return rc;

  pid_t child = -1;
  std::string state_dir;
  int metrics_port = 0;
  if (!o.gnmrd.empty()) {
    char tmpl[] = "/tmp/gnmr-load-XXXXXX";
    state_dir = mkdtemp(tmpl);
    o.target = "unix:" + state_dir + "/gnmrd.sock";
    metrics_port = FreePort();
    const std::string metrics = "127.0.0.1:" + std::to_string(metrics_port);
    child = fork();
    if (child == 0) {
      std::vector<const char*> args = {o.gnmrd.c_str(), "--listen",        o.target.c_str(),
                                       "--state-dir",   state_dir.c_str(), "--metrics",
                                       metrics.c_str(), "--log-level",     "warn"};
      if (!o.trace_dir.empty()) {
        args.push_back("--trace-dir");
        args.push_back(o.trace_dir.c_str());
      }
      args.push_back(nullptr);
      execv(o.gnmrd.c_str(), const_cast<char* const*>(args.data()));
      std::perror("exec gnmrd");
      _exit(127);
    }
  }
  auto channel = grpc::CreateChannel(o.target, grpc::InsecureChannelCredentials());
  if (!channel->WaitForConnected(std::chrono::system_clock::now() + std::chrono::seconds(10))) {
    std::fprintf(stderr, "daemon_load: cannot reach gnmrd at %s\n", o.target.c_str());
    if (child > 0) kill(child, SIGKILL);
    return 1;
  }
  auto stub = gnmr::v1::Gnmr::NewStub(channel);

  StepLog log(o.steps);
  std::vector<std::unique_ptr<Rank>> ranks;
  const std::string job = "load";
  for (int r = 0; r < o.ranks; ++r) {
    gnmr::v1::RegisterRequest req;
    req.set_job_id(job);
    req.set_rank(static_cast<uint32_t>(r));
    req.set_world_size(static_cast<uint32_t>(o.ranks));
    req.set_client_version("daemon_load");
    for (int u = 0; u < o.units; ++u) {
      auto* s = req.add_units();
      s->set_name("layers." + std::to_string(u / 8) + ".unit" + std::to_string(u % 8));
      s->set_numel(1 << 20);
      s->set_dtype(gnmr::v1::DTYPE_BF16);
      s->set_shard_count(1);
    }
    grpc::ClientContext ctx;
    gnmr::v1::RegisterResponse resp;
    grpc::Status st = stub->Register(&ctx, req, &resp);
    if (!st.ok()) {
      std::fprintf(stderr, "daemon_load: Register: %s\n", st.error_message().c_str());
      if (child > 0) kill(child, SIGKILL);
      return 1;
    }
    ranks.push_back(std::make_unique<Rank>(
        stub.get(), job, static_cast<uint32_t>(r), resp.session_id(),
        std::vector<uint32_t>(resp.unit_ids().begin(), resp.unit_ids().end()), &log, o.ranks));
  }

  const auto start = Clock::now();
  const auto period =
      o.rate > 0 ? std::chrono::duration<double>(1.0 / o.rate) : std::chrono::duration<double>(0);
  for (int t = 0; t < o.steps; ++t) {
    if (o.rate > 0) {
      std::this_thread::sleep_until(start +
                                    std::chrono::duration_cast<Clock::duration>(period * t));
    }
    {
      std::unique_lock<std::mutex> lock(log.mu);
      log.cv.wait(lock, [&] { return t - log.complete < o.window; });
    }
    for (auto& r : ranks) r->SendStep(t);
    log.sent[t] = Clock::now();
    if (t % 100 == 99) std::fprintf(stderr, "  ... %d steps sent\n", t + 1);
  }
  {
    std::unique_lock<std::mutex> lock(log.mu);
    if (!log.cv.wait_for(lock, std::chrono::seconds(30), [&] { return log.complete == o.steps; })) {
      std::fprintf(stderr, "daemon_load: only %d of %d steps decided\n", log.complete, o.steps);
    }
  }
  const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  std::vector<double> lat;
  for (int t = 0; t < o.steps; ++t) {
    if (log.arrivals[t].load() == o.ranks) {
      lat.push_back(std::chrono::duration<double>(log.last_arrival[t] - log.sent[t]).count() * 1e3);
    }
  }
  const long rss = child > 0 ? PeakRssKb(child) : -1;
  const std::string scraped = metrics_port > 0 ? Scrape(metrics_port) : "";
  const double server_p50 = HistogramBound(scraped, "gnmr_decision_latency_seconds", 0.5);
  const double server_p99 = HistogramBound(scraped, "gnmr_decision_latency_seconds", 0.99);
  for (auto& r : ranks) r->Close();
  for (auto& r : ranks) r->Wait();
  if (child > 0) {
    kill(child, SIGTERM);
    int status = 0;
    waitpid(child, &status, 0);
  }
  const double steps_per_s = static_cast<double>(lat.size()) / elapsed;
  std::printf(
      "| ranks | units | steps decided | steps/s | unit stats/s | latency p50 | p99 | max | gnmrd "
      "peak RSS |\n");
  std::printf("| --- | --- | --- | --- | --- | --- | --- | --- | --- |\n");
  std::printf("| %d | %d | %zu/%d | %.1f | %.2f M | %.2f ms | %.2f ms | %.2f ms | %s |\n", o.ranks,
              o.units, lat.size(), o.steps, steps_per_s, steps_per_s * o.ranks * o.units / 1e6,
              Percentile(lat, 0.5), Percentile(lat, 0.99), Percentile(lat, 1.0),
              rss > 0 ? (std::to_string(rss / 1024) + " MB").c_str() : "n/a");
  if (server_p99 > 0) {
    std::printf(
        "\ngnmrd's own decision latency (last report in -> decision out, histogram "
        "bucket bounds): p50 <= %.2f ms, p99 <= %.2f ms\n",
        server_p50 * 1e3, server_p99 * 1e3);
  }
  if (!o.trace_dir.empty()) {
    std::printf(
        "\ntrace recording: %.0f steps written, %.0f dropped, %.0f failed, %.1f MB "
        "(at the last scrape, before the stop)\n",
        MetricValue(scraped, "gnmr_trace_steps_written_total"),
        MetricValue(scraped, "gnmr_trace_steps_dropped_total"),
        MetricValue(scraped, "gnmr_trace_steps_failed_total"),
        MetricValue(scraped, "gnmr_trace_bytes_written_total") / 1e6);
  }
  if (!state_dir.empty()) std::system(("rm -rf " + state_dir).c_str());
  return lat.size() == static_cast<size_t>(o.steps) ? 0 : 1;
}
