// Probes of a gnmrd process for bench/daemon_load: /proc figures (CPU time,
// RSS), its Prometheus /metrics and the machine's load average. Benchmark
// helpers only: no error is fatal, a figure that cannot be read is -1.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace gnmr::bench {

// A free loopback TCP port (bound and released; fine for a benchmark).
inline int FreePort() {
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
inline std::string Scrape(int port) {
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
inline double HistogramBound(const std::string& text, const std::string& name, double q) {
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
inline double MetricValue(const std::string& text, const std::string& name) {
  size_t pos = 0;
  while ((pos = text.find(name + " ", pos)) != std::string::npos) {
    if (pos == 0 || text[pos - 1] == '\n') return std::atof(text.c_str() + pos + name.size() + 1);
    pos += name.size();
  }
  return -1;
}

// A "Vm...:" line of /proc/<pid>/status in KB (VmRSS: now, VmHWM: peak).
inline long StatusKb(pid_t pid, const char* field) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  const std::string want = std::string(field) + ":";
  while (std::getline(in, line)) {
    if (line.rfind(want, 0) == 0) return std::atol(line.c_str() + want.size());
  }
  return -1;
}

// User + system CPU seconds of `pid` (all its threads), /proc/<pid>/stat.
inline double CpuSeconds(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t paren = all.rfind(')');  // the command may hold spaces
  if (paren == std::string::npos) return -1;
  std::istringstream fields(all.substr(paren + 2));
  std::string f;
  long utime = -1, stime = -1;
  for (int i = 3; fields >> f; ++i) {  // field 3 is the state
    if (i == 14) utime = std::atol(f.c_str());
    if (i == 15) {
      stime = std::atol(f.c_str());
      break;
    }
  }
  if (utime < 0 || stime < 0) return -1;
  return static_cast<double>(utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

// The 1-minute load average.
inline double LoadAverage() {
  std::ifstream in("/proc/loadavg");
  double l = -1;
  in >> l;
  return l;
}

}  // namespace gnmr::bench
