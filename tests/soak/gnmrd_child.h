// GnmrdChild: the real gnmrd binary run by the soak test: started from a
// config file it writes, killed with -9 and started again on the same
// state dir, and measured from outside (/proc: resident memory and open
// file descriptors; its /metrics endpoint; the size of its state dir).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <string>

namespace gnmr::soak {

struct GnmrdSettings {
  std::string binary;  // gnmrd
  std::string dir;     // socket, state dir, config, log
  uint32_t snapshot_every_steps = 20;
  uint32_t step_deadline_ms = 300;
  std::string job_idle_expiry = "20s";
  std::string event_log_max_bytes = "256KiB";
  std::string admin_token = "soak-admin-token";
};

struct ProcessFigures {
  long rss_kb = -1;  // VmRSS
  long hwm_kb = -1;  // VmHWM, peak of this process
  int fds = -1;      // entries of /proc/<pid>/fd
  int threads = -1;
};

class GnmrdChild {
 public:
  explicit GnmrdChild(GnmrdSettings settings);
  ~GnmrdChild();  // kill -9 if still running

  // Starts gnmrd and waits (up to 30 s) until it answers GetStatus. False
  // if it exited or did not answer; the log says why.
  bool Start();
  // kill -9 and reap.
  void KillHard();
  // SIGTERM and reap; the exit status (as waitpid reports it), -1 if none.
  int Stop();
  // Whether the process died by itself (not by KillHard/Stop); reaps it.
  bool DiedUnexpectedly();

  pid_t pid() const { return pid_; }
  std::string target() const { return "unix:" + dir_ + "/gnmrd.sock"; }
  std::string state_dir() const { return dir_ + "/state"; }
  std::string log_path() const { return dir_ + "/gnmrd.log"; }
  const GnmrdSettings& settings() const { return settings_; }

  ProcessFigures Figures() const;
  // /metrics samples ("name{labels}" -> value); empty if unreachable.
  std::map<std::string, double> Scrape() const;
  // Bytes of all files under the state dir, and the job directories in it.
  uint64_t StateBytes(int* job_dirs = nullptr) const;

 private:
  std::string WriteConfig() const;

  const GnmrdSettings settings_;
  const std::string dir_;
  pid_t pid_ = -1;
  int metrics_port_ = 0;
};

}  // namespace gnmr::soak
