#include "daemon/metrics/process_collector.h"

#include <dirent.h>
#include <unistd.h>

#include <fstream>

namespace gnmr {
namespace metrics {
namespace {

prometheus::MetricFamily Gauge(const char* name, const char* help, double value) {
  prometheus::MetricFamily f{name, help, prometheus::MetricType::Gauge, {}};
  prometheus::ClientMetric m;
  m.gauge.value = value;
  f.metric.push_back(std::move(m));
  return f;
}

}  // namespace

ProcessFigures ReadProcessFigures(const std::string& proc_self) {
  ProcessFigures out;
  // statm: size resident shared text lib data dt, in pages.
  std::ifstream statm(proc_self + "/statm");
  double size_pages = 0, resident_pages = 0;
  if (statm >> size_pages >> resident_pages) {
    const long page = ::sysconf(_SC_PAGESIZE);
    const double page_bytes = page > 0 ? static_cast<double>(page) : 4096.0;
    out.virtual_bytes = size_pages * page_bytes;
    out.resident_bytes = resident_pages * page_bytes;
  }
  if (DIR* d = ::opendir((proc_self + "/fd").c_str())) {
    // In the real /proc/self/fd, the descriptor opendir holds is listed too.
    const std::string own = proc_self == "/proc/self" ? std::to_string(::dirfd(d)) : "";
    double n = 0;
    while (const dirent* e = ::readdir(d)) {
      if (e->d_name[0] != '.' && own != e->d_name) ++n;
    }
    ::closedir(d);
    out.open_fds = n;
  }
  return out;
}

std::vector<prometheus::MetricFamily> ProcessCollector::Collect() const {
  const ProcessFigures p = ReadProcessFigures(proc_self_);
  std::vector<prometheus::MetricFamily> out;
  if (p.resident_bytes) {
    out.push_back(Gauge("gnmr_process_resident_memory_bytes", "Resident memory of gnmrd.",
                        *p.resident_bytes));
  }
  if (p.virtual_bytes) {
    out.push_back(
        Gauge("gnmr_process_virtual_memory_bytes", "Virtual memory of gnmrd.", *p.virtual_bytes));
  }
  if (p.open_fds) {
    out.push_back(Gauge("gnmr_process_open_fds", "Open file descriptors of gnmrd.", *p.open_fds));
  }
  return out;
}

}  // namespace metrics
}  // namespace gnmr
