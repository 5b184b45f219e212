#include "tests/soak/gnmrd_child.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "gnmr/v1/gnmr.grpc.pb.h"
#include "tests/daemon/gnmrd_process.h"
#include "tests/metrics/metrics_scrape.h"

namespace gnmr::soak {
namespace {

using testing::ReadText;

long StatusField(const std::string& status, const char* name) {
  const size_t at = status.find(name);
  return at == std::string::npos ? -1 : std::atol(status.c_str() + at + std::strlen(name));
}

}  // namespace

GnmrdChild::GnmrdChild(GnmrdSettings settings)
    : settings_(std::move(settings)), dir_(settings_.dir) {}

GnmrdChild::~GnmrdChild() { KillHard(); }

std::string GnmrdChild::WriteConfig() const {
  const std::string path = dir_ + "/gnmrd.yaml";
  std::ofstream out(path);
  out << "listen: [" << target() << "]\n"
      << "metrics: {listen: 127.0.0.1:0}\n"
      << "state_dir: " << state_dir() << "\n"
      << "snapshot_every_steps: " << settings_.snapshot_every_steps << "\n"
      << "step_deadline_ms: " << settings_.step_deadline_ms << "\n"
      << "job_idle_expiry: " << settings_.job_idle_expiry << "\n"
      << "event_log_max_bytes: " << settings_.event_log_max_bytes << "\n"
      << "max_message_bytes: 8MiB\n"
      << "admin_token: " << settings_.admin_token << "\n"
      << "log_level: info\n";
  return path;
}

bool GnmrdChild::Start() {
  const std::string config = WriteConfig();
  const size_t log_before = ReadText(log_path()).size();
  pid_ = testing::SpawnLogged({settings_.binary, "--config", config}, log_path());
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  if (!testing::WaitServing(
          pid_, grpc::CreateCustomChannel(target(), grpc::InsecureChannelCredentials(), args),
          std::chrono::seconds(30))) {
    KillHard();
    return false;
  }
  // "... metrics on 127.0.0.1:0 (port N) ..." of this start.
  const std::string text = ReadText(log_path()).substr(log_before);
  const size_t at = text.find("(port ");
  metrics_port_ = at == std::string::npos ? 0 : std::atoi(text.c_str() + at + 6);
  return true;
}

void GnmrdChild::KillHard() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGKILL);
  ::waitpid(pid_, nullptr, 0);
  pid_ = -1;
}

int GnmrdChild::Stop() {
  if (pid_ <= 0) return -1;
  ::kill(pid_, SIGTERM);
  int status = 0;
  ::waitpid(pid_, &status, 0);
  pid_ = -1;
  return status;
}

bool GnmrdChild::DiedUnexpectedly() {
  if (pid_ <= 0) return false;
  if (::waitpid(pid_, nullptr, WNOHANG) != pid_) return false;
  pid_ = -1;
  return true;
}

ProcessFigures GnmrdChild::Figures() const {
  ProcessFigures f;
  if (pid_ <= 0) return f;
  const std::string proc = "/proc/" + std::to_string(pid_);
  const std::string status = ReadText(proc + "/status");
  f.rss_kb = StatusField(status, "VmRSS:");
  f.hwm_kb = StatusField(status, "VmHWM:");
  f.threads = static_cast<int>(StatusField(status, "Threads:"));
  if (DIR* d = ::opendir((proc + "/fd").c_str())) {
    f.fds = 0;
    while (const dirent* e = ::readdir(d)) f.fds += e->d_name[0] != '.' ? 1 : 0;
    ::closedir(d);
  }
  return f;
}

std::map<std::string, double> GnmrdChild::Scrape() const {
  if (pid_ <= 0 || metrics_port_ <= 0) return {};
  const testing_util::HttpResponse r = testing_util::HttpGet(metrics_port_, "/metrics", 10);
  if (r.status != 200) return {};
  return testing_util::ParseSamples(r.body);
}

uint64_t GnmrdChild::StateBytes(int* job_dirs) const {
  uint64_t bytes = 0;
  std::error_code ec;
  for (auto it = std::filesystem::recursive_directory_iterator(state_dir(), ec);
       !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
    std::error_code size_ec;
    if (it->is_regular_file(size_ec)) bytes += it->file_size(size_ec);
  }
  if (job_dirs != nullptr) {
    *job_dirs = 0;
    for (auto it = std::filesystem::directory_iterator(state_dir() + "/jobs", ec);
         !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
      *job_dirs += 1;
    }
  }
  return bytes;
}

}  // namespace gnmr::soak
