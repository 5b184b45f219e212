// gnmr_process_* gauges (daemon/metrics/process_collector.h).
#include "daemon/metrics/process_collector.h"

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "daemon/metrics/daemon_metrics.h"

namespace gnmr {
namespace metrics {
namespace {

namespace fs = std::filesystem;

const prometheus::MetricFamily* Find(const std::vector<prometheus::MetricFamily>& fs,
                                     const std::string& name) {
  for (const auto& f : fs) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

TEST(ProcessCollector, ReadsThisProcess) {
  const ProcessFigures p = ReadProcessFigures();
  ASSERT_TRUE(p.resident_bytes.has_value());
  ASSERT_TRUE(p.virtual_bytes.has_value());
  ASSERT_TRUE(p.open_fds.has_value());
  EXPECT_GT(*p.resident_bytes, 1024.0 * 1024.0);  // a test binary: > 1 MiB
  EXPECT_GE(*p.virtual_bytes, *p.resident_bytes);
  EXPECT_GE(*p.open_fds, 3.0);  // stdin, stdout, stderr
}

TEST(ProcessCollector, CountsADescriptorItOpens) {
  const double before = *ReadProcessFigures().open_fds;
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(*ReadProcessFigures().open_fds, before + 1);
  std::fclose(f);
  EXPECT_EQ(*ReadProcessFigures().open_fds, before);
}

TEST(ProcessCollector, FakeProcDirectory) {
  const fs::path dir = fs::temp_directory_path() / ("gnmr-proc-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir / "fd");
  std::ofstream(dir / "statm") << "100 25 3 1 0 10 0\n";
  for (const char* n : {"0", "1", "2", "7"}) std::ofstream(dir / "fd" / n);
  const double page = static_cast<double>(::sysconf(_SC_PAGESIZE));
  const ProcessFigures p = ReadProcessFigures(dir.string());
  EXPECT_EQ(*p.resident_bytes, 25 * page);
  EXPECT_EQ(*p.virtual_bytes, 100 * page);
  EXPECT_EQ(*p.open_fds, 4.0);

  const auto families = ProcessCollector(dir.string()).Collect();
  const auto* rss = Find(families, "gnmr_process_resident_memory_bytes");
  ASSERT_NE(rss, nullptr);
  EXPECT_EQ(rss->type, prometheus::MetricType::Gauge);
  ASSERT_EQ(rss->metric.size(), 1u);
  EXPECT_EQ(rss->metric[0].gauge.value, 25 * page);
  EXPECT_NE(Find(families, "gnmr_process_virtual_memory_bytes"), nullptr);
  EXPECT_NE(Find(families, "gnmr_process_open_fds"), nullptr);
  fs::remove_all(dir);
}

TEST(ProcessCollector, MissingProcLeavesFiguresOut) {
  EXPECT_TRUE(ProcessCollector("/nonexistent/proc").Collect().empty());
}

TEST(ProcessCollector, DaemonMetricsRendersThem) {
  MetricsOptions options;
  options.listen = "";  // no endpoint: Render() only
  auto m = DaemonMetrics::Start(options);
  ASSERT_TRUE(m.ok());
  const std::string text = (*m)->Render();
  EXPECT_NE(text.find("# TYPE gnmr_process_resident_memory_bytes gauge"), std::string::npos);
  EXPECT_NE(text.find("gnmr_process_open_fds "), std::string::npos);
}

}  // namespace
}  // namespace metrics
}  // namespace gnmr
