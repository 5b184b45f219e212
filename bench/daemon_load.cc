// daemon_load: drives a real gnmrd with many simulated ranks and prints a
// table: steps/s sustained, decision latency at the clients and in gnmrd
// (its histogram), gnmrd's CPU time per step and its memory.
//
// All ranks register the same U units (data-parallel replicas: the daemon
// averages them); the driver sends step t from every rank and records when
// the decision for t arrives at each. Client-side latency of a step = last
// decision arrival - last report sent: it includes both directions of the
// transfer, so it bounds the daemon's own "last report in -> decision out"
// (gnmr_decision_latency_seconds, read as histogram bucket bounds).
//
// Many ranks cheaply (load_session.h): each rank is a Session stream, the
// streams share --channels connections and gRPC's callback threads, and a
// step's report is serialized once and its bytes sent by every rank.
// --active-fraction F < 1 sends the sparse form listing ~F of the units.
// --tp N shards every unit N ways (rank r holds shard r % N: ranks r and
// r + N are data-parallel replicas); --report one_per_shard sets the job's
// `report` key (docs/scale.md) and the ranks stand by when told to.
// --ranks-per-stream K carries K consecutive ranks as the lanes of one
// relay stream (load_node.h), as gnmr-relay does per node (docs/relay.md).
//
// Memory: gnmrd's RSS before any rank registers, after every rank
// registered, and after every rank attached its Session stream give the
// bytes per registered rank and per attached stream.
//
// Usage: daemon_load --gnmrd PATH [--ranks 64] [--units 1024] [--steps 500]
//                    [--rate 50] [--window 8] [--channels 4]
//                    [--active-fraction 1] [--tp 1] [--report all]
//                    [--ranks-per-stream 1] [--trace-dir DIR]
//        --trace-dir: the spawned gnmrd records the job's trace there
//        (docs/replay.md); the counters of its recorder are printed.
//        daemon_load --target unix:/path ...   (an already running gnmrd:
//        no CPU, memory or histogram figures)
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "bench/load_node.h"
#include "bench/load_probe.h"
#include "bench/load_session.h"
#include "common/flag_parser.h"
#include "controller/types/config_codec.h"
#include "gnmr/v1/gnmr.grpc.pb.h"

namespace {

using gnmr::bench::Clock;

struct Options {
  std::string gnmrd;
  std::string target;
  int ranks = 64;
  int units = 1024;
  int steps = 500;
  double rate = 50;          // steps/s; 0 = as fast as the window allows
  int window = 8;            // max steps in flight
  int channels = 4;          // connections the ranks' streams share
  int ranks_per_stream = 1;  // > 1: ranks carried as lanes of relay streams
  double active_fraction = 1.0;
  int tp = 1;                  // shards per unit
  std::string report = "all";  // the job's `report` key
  bool acks = true;            // each rank acks each decision
  std::string trace_dir;       // passed to the spawned gnmrd
  std::string memory_budget;   // passed to the spawned gnmrd
};

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i = std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())));
  return v[i];
}

// Parses the command line into `o`; 0 to run, else the exit code (help 0,
// bad command line 2).
int ParseOptions(int argc, char** argv, Options* o, bool* run) {
  int64_t ranks = o->ranks, units = o->units, steps = o->steps, window = o->window,
          channels = o->channels, tp = o->tp, per_stream = o->ranks_per_stream;
  gnmr::FlagParser p(
      "daemon_load (--gnmrd PATH | --target T) [--ranks N] [--units N] [--steps N]\n"
      "                   [--rate STEPS_PER_S] [--window N] [--channels N]\n"
      "                   [--active-fraction F] [--tp N] [--report all|one_per_shard]\n"
      "                   [--ranks-per-stream K] [--no-acks] [--trace-dir DIR]",
      "Load generator for gnmrd: N ranks of one job report each step; prints decision\n"
      "latency (client side and gnmrd's histogram), gnmrd's CPU per step and its RSS.");
  p.AddString("gnmrd", "PATH", "start this gnmrd binary (in a temporary state dir)", &o->gnmrd);
  p.AddString("target", "T", "or use a running gnmrd at T", &o->target);
  p.AddInt("ranks", "N", "ranks (default 64)", 1, 65536, &ranks);
  p.AddInt("units", "N", "units per rank (default 1024)", 1, 1 << 22, &units);
  p.AddInt("steps", "N", "steps (default 500)", 1, 1 << 30, &steps);
  p.AddDouble("rate", "STEPS_PER_S",
              "steps per second; 0 = as fast as the window allows\n"
              "(default 50)",
              &o->rate);
  p.AddInt("window", "N", "most steps in flight (default 8)", 1, 1 << 20, &window);
  p.AddInt("channels", "N", "connections shared by the ranks' streams (default 4)", 1, 1024,
           &channels);
  p.AddDouble("active-fraction", "F",
              "fraction of the units each report lists, in (0, 1]; below 1\n"
              "the sparse form (default 1: dense)",
              &o->active_fraction);
  p.AddInt("tp", "N", "shards per unit; rank r holds shard r % N (default 1)", 1, 4096, &tp);
  p.AddString("report", "MODE",
              "the job's report key: all | one_per_shard (default all;\n"
              "docs/scale.md)",
              &o->report);
  p.AddInt("ranks-per-stream", "K",
           "ranks per stream: K > 1 carries K ranks as the lanes of\n"
           "one relay stream, as gnmr-relay does per node (default 1)",
           1, 1024, &per_stream);
  bool no_acks = false;
  p.AddBool("no-acks",
            "ranks do not ack decisions (as this bench before 2026-12-05;\n"
            "a real client acks every step)",
            &no_acks);
  p.AddString("memory-budget", "BYTES",
              "the spawned gnmrd's --memory-budget (e.g. 4GiB; default\n"
              "gnmrd's own)",
              &o->memory_budget);
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
  if (error.empty() && o->report != "all" && o->report != "one_per_shard") {
    error = "--report must be all or one_per_shard";
  }
  if (error.empty() && ranks % tp != 0) error = "--ranks must be a multiple of --tp";
  if (error.empty() && ranks % per_stream != 0) {
    error = "--ranks must be a multiple of --ranks-per-stream";
  }
  if (error.empty() && !(o->active_fraction > 0 && o->active_fraction <= 1)) {
    error = "--active-fraction must be in (0, 1]";
  }
  if (!error.empty()) {
    std::fprintf(stderr, "daemon_load: %s\n%s", error.c_str(), p.Help().c_str());
    return 2;
  }
  o->ranks = static_cast<int>(ranks);
  o->units = static_cast<int>(units);
  o->tp = static_cast<int>(tp);
  o->steps = static_cast<int>(steps);
  o->window = static_cast<int>(window);
  o->channels = static_cast<int>(channels);
  o->ranks_per_stream = static_cast<int>(per_stream);
  o->acks = !no_acks;
  *run = true;
  return 0;
}

// Starts gnmrd in a temporary state dir; its pid, or -1.
pid_t SpawnGnmrd(const Options& o, const std::string& state_dir, const std::string& metrics) {
  const pid_t child = fork();
  if (child == 0) {
    std::vector<const char*> args = {o.gnmrd.c_str(), "--listen",        o.target.c_str(),
                                     "--state-dir",   state_dir.c_str(), "--metrics",
                                     metrics.c_str(), "--log-level",     "warn"};
    if (!o.memory_budget.empty()) {
      args.push_back("--memory-budget");
      args.push_back(o.memory_budget.c_str());
    }
    if (!o.trace_dir.empty()) {
      args.push_back("--trace-dir");
      args.push_back(o.trace_dir.c_str());
    }
    args.push_back(nullptr);
    execv(o.gnmrd.c_str(), const_cast<char* const*>(args.data()));
    std::perror("exec gnmrd");
    _exit(127);
  }
  return child;
}

// Registers ranks [first, ranks) step `stride` over `stub`; false on an
// error (printed). Every rank must get unit ids 0..units-1 in order: the
// shared report bytes name them.
bool RegisterRanks(gnmr::v1::Gnmr::Stub* stub, const Options& o, int first, int stride,
                   std::vector<uint64_t>* sessions) {
  gnmr::v1::RegisterRequest req;
  req.set_job_id("load");
  req.set_world_size(static_cast<uint32_t>(o.ranks));
  req.set_client_version("daemon_load");
  req.set_can_stand_by(true);  // LoadRank follows its ReporterRole
  gnmr::ControllerConfig config;
  config.report = o.report == "all" ? gnmr::ReportMode::kAll : gnmr::ReportMode::kOnePerShard;
  gnmr::ConfigToProto(config, req.mutable_config());
  for (int u = 0; u < o.units; ++u) {
    auto* s = req.add_units();
    s->set_name("layers." + std::to_string(u / 8) + ".unit" + std::to_string(u % 8));
    s->set_numel(1 << 20);
    s->set_dtype(gnmr::v1::DTYPE_BF16);
    s->set_shard_count(static_cast<uint32_t>(o.tp));
  }
  for (int r = first; r < o.ranks; r += stride) {
    req.set_rank(static_cast<uint32_t>(r));
    for (auto& u : *req.mutable_units()) u.set_shard_index(static_cast<uint32_t>(r % o.tp));
    grpc::ClientContext ctx;
    gnmr::v1::RegisterResponse resp;
    grpc::Status st = stub->Register(&ctx, req, &resp);
    if (!st.ok()) {
      std::fprintf(stderr, "daemon_load: Register rank %d: %s\n", r, st.error_message().c_str());
      return false;
    }
    for (int u = 0; u < resp.unit_ids_size(); ++u) {
      if (resp.unit_ids(u) != static_cast<uint32_t>(u)) {
        std::fprintf(stderr, "daemon_load: rank %d got unit id %u for unit %d\n", r,
                     resp.unit_ids(u), u);
        return false;
      }
    }
    (*sessions)[r] = resp.session_id();
  }
  return true;
}

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

std::string Kb(long kb) { return kb > 0 ? std::to_string(kb / 1024) + " MB" : "n/a"; }

}  // namespace

int main(int argc, char** argv) {
  Options o;
  bool run = false;
  const int rc = ParseOptions(argc, argv, &o, &run);
  if (!run) return rc;
  const double load_before = gnmr::bench::LoadAverage();

  pid_t child = -1;
  std::string state_dir;
  int metrics_port = 0;
  if (!o.gnmrd.empty()) {
    char tmpl[] = "/tmp/gnmr-load-XXXXXX";
    state_dir = mkdtemp(tmpl);
    o.target = "unix:" + state_dir + "/gnmrd.sock";
    metrics_port = gnmr::bench::FreePort();
    child = SpawnGnmrd(o, state_dir, "127.0.0.1:" + std::to_string(metrics_port));
  }
  auto fail = [&](const char* why) {
    std::fprintf(stderr, "daemon_load: %s\n", why);
    if (child > 0) kill(child, SIGKILL);
    return 1;
  };
  // One connection per channel: a local subchannel pool keeps channels with
  // the same target from sharing one.
  std::vector<std::shared_ptr<grpc::Channel>> channels;
  for (int c = 0; c < o.channels; ++c) {
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    args.SetInt("gnmr.daemon_load.channel", c);
    args.SetMaxReceiveMessageSize(-1);
    channels.push_back(
        grpc::CreateCustomChannel(o.target, grpc::InsecureChannelCredentials(), args));
    if (!channels.back()->WaitForConnected(std::chrono::system_clock::now() +
                                           std::chrono::seconds(10))) {
      return fail(("cannot reach gnmrd at " + o.target).c_str());
    }
  }
  const long rss_base = child > 0 ? gnmr::bench::StatusKb(child, "VmRSS") : -1;

  // Register on every channel at once.
  const auto register_start = Clock::now();
  std::vector<uint64_t> sessions(o.ranks);
  std::vector<std::unique_ptr<gnmr::v1::Gnmr::Stub>> stubs;
  for (auto& ch : channels) stubs.push_back(gnmr::v1::Gnmr::NewStub(ch));
  std::atomic<bool> registered{true};
  {
    std::vector<std::thread> threads;
    for (int c = 0; c < o.channels; ++c) {
      threads.emplace_back([&, c] {
        if (!RegisterRanks(stubs[c].get(), o, c, o.channels, &sessions)) registered = false;
      });
    }
    for (auto& t : threads) t.join();
  }
  if (!registered) return fail("registration failed");
  const long rss_registered = child > 0 ? gnmr::bench::StatusKb(child, "VmRSS") : -1;
  const double register_seconds = Seconds(Clock::now() - register_start);
  std::fprintf(stderr, "daemon_load: %d ranks registered in %.1f s\n", o.ranks, register_seconds);
  const auto attach_start = Clock::now();

  gnmr::bench::StepLog log(o.steps, o.ranks, o.acks);
  std::vector<std::unique_ptr<grpc::GenericStub>> generic;
  for (auto& ch : channels) generic.push_back(std::make_unique<grpc::GenericStub>(ch));
  gnmr::bench::LoadStreams streams(generic, "load", sessions, o.ranks_per_stream, &log);
  {
    std::unique_lock<std::mutex> lock(log.mu);
    if (!log.cv.wait_for(lock, std::chrono::seconds(60),
                         [&] { return log.attached.load() == o.ranks; })) {
      std::fprintf(stderr, "daemon_load: only %d of %d streams attached\n", log.attached.load(),
                   o.ranks);
    }
  }
  if (o.report == "one_per_shard") {  // wait for the roles: one reporter per shard
    std::unique_lock<std::mutex> lock(log.mu);
    if (!log.cv.wait_for(lock, std::chrono::seconds(60),
                         [&] { return log.standby.load() == o.ranks - o.tp; })) {
      std::fprintf(stderr, "daemon_load: %d of %d ranks stand by\n", log.standby.load(),
                   o.ranks - o.tp);
    }
  }
  const long rss_attached = child > 0 ? gnmr::bench::StatusKb(child, "VmRSS") : -1;
  const double attach_seconds = Seconds(Clock::now() - attach_start);
  std::fprintf(stderr, "daemon_load: %d streams attached in %.1f s\n", o.ranks, attach_seconds);
  const double cpu_start = child > 0 ? gnmr::bench::CpuSeconds(child) : -1;

  const auto start = Clock::now();
  const auto period =
      o.rate > 0 ? std::chrono::duration<double>(1.0 / o.rate) : std::chrono::duration<double>(0);
  for (int t = 0; t < o.steps; ++t) {
    if (o.rate > 0) {
      std::this_thread::sleep_until(start +
                                    std::chrono::duration_cast<Clock::duration>(period * t));
    }
    bool stalled = false;
    {
      std::unique_lock<std::mutex> lock(log.mu);
      // Bounded: a decision that never reaches some rank must end the run
      // with a line, not hang it.
      stalled = !log.cv.wait_for(lock, std::chrono::seconds(30),
                                 [&] { return t - log.complete < o.window; });
    }
    if (stalled) {
      std::fprintf(stderr,
                   "daemon_load: step %d: %d steps in flight got no decision to every rank "
                   "for 30 s; stopping\n",
                   t, o.window);
      break;
    }
    uint64_t fingerprint = 0;
    const grpc::ByteBuffer report =
        gnmr::bench::StepReport(t, static_cast<uint32_t>(o.units), o.active_fraction, &fingerprint);
    log.fingerprints[t].store(fingerprint, std::memory_order_relaxed);
    streams.Send(report);
    log.sent[t] = Clock::now();
    if (t % 100 == 99) std::fprintf(stderr, "  ... %d steps sent\n", t + 1);
  }
  {
    std::unique_lock<std::mutex> lock(log.mu);
    if (!log.cv.wait_for(lock, std::chrono::seconds(60), [&] { return log.complete == o.steps; })) {
      std::fprintf(stderr, "daemon_load: only %d of %d steps decided\n", log.complete, o.steps);
    }
  }
  const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  const double cpu = child > 0 ? gnmr::bench::CpuSeconds(child) - cpu_start : -1;
  std::vector<double> lat;
  for (int t = 0; t < o.steps; ++t) {
    if (log.arrivals[t].load() == o.ranks) {
      lat.push_back(std::chrono::duration<double>(log.last_arrival[t] - log.sent[t]).count() * 1e3);
    }
  }
  const long rss_peak = child > 0 ? gnmr::bench::StatusKb(child, "VmHWM") : -1;
  const long rss_end = child > 0 ? gnmr::bench::StatusKb(child, "VmRSS") : -1;
  const std::string scraped = metrics_port > 0 ? gnmr::bench::Scrape(metrics_port) : "";
  const double server_p50 =
      gnmr::bench::HistogramBound(scraped, "gnmr_decision_latency_seconds", 0.5);
  const double server_p99 =
      gnmr::bench::HistogramBound(scraped, "gnmr_decision_latency_seconds", 0.99);
  const double load_after = gnmr::bench::LoadAverage();
  streams.CloseAll();
  if (child > 0) {
    kill(child, SIGTERM);
    int status = 0;
    waitpid(child, &status, 0);
  }
  const double steps_per_s = static_cast<double>(lat.size()) / elapsed;
  std::printf(
      "| ranks x units | tp | report | ranks/stream | active | rate | steps decided | steps/s | "
      "client p50 / p99 "
      "| gnmrd p50 / p99 (bucket) | gnmrd CPU / step | gnmrd RSS end / peak | load avg |\n");
  std::printf("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n");
  std::printf(
      "| %d x %d | %d | %s | %d | %.0f%% | %s | %zu/%d | %.1f | %.2f / %.2f ms | <= %.1f / <= %.1f "
      "ms "
      "| %.2f ms | %s / %s | %.1f-%.1f |\n",
      o.ranks, o.units, o.tp, (o.report + (o.acks ? "" : " (no acks)")).c_str(), o.ranks_per_stream,
      o.active_fraction * 100,
      o.rate > 0 ? (std::to_string(static_cast<int>(o.rate)) + "/s").c_str() : "max", lat.size(),
      o.steps, steps_per_s, Percentile(lat, 0.5), Percentile(lat, 0.99), server_p50 * 1e3,
      server_p99 * 1e3, cpu >= 0 && !lat.empty() ? cpu / static_cast<double>(o.steps) * 1e3 : -1.0,
      Kb(rss_end).c_str(), Kb(rss_peak).c_str(), load_before, load_after);
  if (rss_base > 0) {
    std::printf(
        "\ngnmrd RSS: %s before any rank, %s registered, %s attached: %.1f KB per registered "
        "rank, %.1f KB per attached stream; max client latency %.2f ms; registration %.1f s, "
        "attach %.1f s\n",
        Kb(rss_base).c_str(), Kb(rss_registered).c_str(), Kb(rss_attached).c_str(),
        static_cast<double>(rss_registered - rss_base) / o.ranks,
        static_cast<double>(rss_attached - rss_registered) / o.ranks, Percentile(lat, 1.0),
        register_seconds, attach_seconds);
  }
  if (!scraped.empty()) {
    std::printf(
        "\ngnmrd broadcast (serialize + queue to every stream) p50 / p99: <= %.1f / <= %.1f "
        "ms (bucket bounds)\n",
        gnmr::bench::HistogramBound(scraped, "gnmr_decision_broadcast_seconds", 0.5) * 1e3,
        gnmr::bench::HistogramBound(scraped, "gnmr_decision_broadcast_seconds", 0.99) * 1e3);
  }
  if (o.report == "one_per_shard" && !scraped.empty()) {
    std::printf(
        "\nreplica check: %.0f held reports compared, %.0f differed\n",
        gnmr::bench::MetricValue(scraped, "gnmr_replica_checks_total{job_id=\"load\"}"),
        gnmr::bench::MetricValue(scraped, "gnmr_replica_mismatches_total{job_id=\"load\"}"));
  }
  if (!o.trace_dir.empty()) {
    std::printf(
        "\ntrace recording: %.0f steps written, %.0f dropped, %.0f failed, %.1f MB "
        "(at the last scrape, before the stop)\n",
        gnmr::bench::MetricValue(scraped, "gnmr_trace_steps_written_total"),
        gnmr::bench::MetricValue(scraped, "gnmr_trace_steps_dropped_total"),
        gnmr::bench::MetricValue(scraped, "gnmr_trace_steps_failed_total"),
        gnmr::bench::MetricValue(scraped, "gnmr_trace_bytes_written_total") / 1e6);
  }
  if (!state_dir.empty()) std::system(("rm -rf " + state_dir).c_str());
  return lat.size() == static_cast<size_t>(o.steps) ? 0 : 1;
}
