// gpu_block_stats_bench: GpuBlockStats on one block-scaled tensor per
// format (row-wise, compact scales, rows x 4096), against a device-to-device
// cudaMemcpy of the same bytes in the same run. Prints one row per format.
//
//   gpu_block_stats_bench [--gb=1] [--layout=rowwise|columnwise] [--iters=20]
//
// Exit status: 0 measured, 2 bad options, 3 no usable CUDA device, 1 other
// failures. "stats GB/s" = code and scale bytes / request time (event-timed
// on the GPU, median; a memset keeps the GPU busy while the host enqueues,
// as in gpu_stats_bench); "copy traffic" = 2 x bytes / memcpy time;
// ratio = stats / copy traffic (target >= 0.90, docs/perf.md "GPU").
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <cuda_runtime.h>

#include "bench/cuda_bench_util.h"
#include "kernels/gpu_block_stats.h"

namespace {

struct Format {
  gnmr::BlockFormat f;
  const char* name;
  uint64_t block;
  bool e2m1;
  unsigned scale_bytes;
  int scale_fill;  // byte pattern: a finite, normal scale
};

}  // namespace

int main(int argc, char** argv) {
  double gb = 1.0;
  int iters = 20;
  bool columnwise = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("--gb=", 0) == 0) {
      gb = std::atof(a.c_str() + 5);
    } else if (a.rfind("--iters=", 0) == 0) {
      iters = std::atoi(a.c_str() + 8);
    } else if (a == "--layout=columnwise" || a == "--layout=rowwise") {
      columnwise = a == "--layout=columnwise";
    } else {
      std::fprintf(stderr,
                   "usage: gpu_block_stats_bench [--gb=1] [--layout=rowwise|columnwise] "
                   "[--iters=20]\n");
      return a == "--help" || a == "-h" ? 0 : 2;
    }
  }
  if (!(gb > 0.0) || iters < 1) return 2;
  auto g = gnmr::GpuBlockStats::Create(0);
  if (!g.ok()) {
    std::fprintf(stderr, "gpu_block_stats_bench: %s\n", g.status().ToString().c_str());
    return 3;
  }
  const Format formats[] = {{gnmr::BlockFormat::kMxfp8E4M3, "mxfp8_e4m3", 32, false, 1, 0x7f},
                            {gnmr::BlockFormat::kMxfp8E5M2, "mxfp8_e5m2", 32, false, 1, 0x7f},
                            {gnmr::BlockFormat::kMxfp4, "mxfp4", 32, true, 1, 0x7f},
                            {gnmr::BlockFormat::kNvfp4, "nvfp4", 16, true, 1, 0x38},
                            {gnmr::BlockFormat::kFp8Block, "fp8_block", 128, false, 4, 0x3f}};
  const uint64_t cols = 4096;
  const size_t scratch_bytes = size_t{256} << 20;
  void* scratch = nullptr;
  CK(cudaMalloc(&scratch, scratch_bytes));
  cudaEvent_t t0, t1;
  CK(cudaEventCreate(&t0));
  CK(cudaEventCreate(&t1));
  std::printf("%-12s %-10s %8s %10s %12s %14s %7s\n", "format", "layout", "GB", "ms", "stats GB/s",
              "copy traffic", "ratio");
  for (const Format& f : formats) {
    const uint64_t code_bytes = static_cast<uint64_t>(gb * 1e9) / cols * cols;
    const uint64_t rows = (f.e2m1 ? code_bytes * 2 : code_bytes) / cols / f.block * f.block;
    gnmr::BlockTensorRef t;
    t.format = f.f;
    t.layout = columnwise ? gnmr::BlockLayout::kColumnwise : gnmr::BlockLayout::kRowwise;
    t.device = 0;
    t.rows = rows;
    t.cols = cols;
    t.scale_rows = columnwise ? rows / f.block : rows;
    t.scale_cols = columnwise ? cols : cols / f.block;
    const uint64_t data_bytes = f.e2m1 ? rows * cols / 2 : rows * cols;
    const uint64_t scale_bytes = t.scale_rows * t.scale_cols * f.scale_bytes;
    void *data = nullptr, *scales = nullptr, *copy = nullptr;
    CK(cudaMalloc(&data, data_bytes));
    CK(cudaMalloc(&scales, scale_bytes));
    CK(cudaMalloc(&copy, data_bytes));
    CK(cudaMemset(data, 0x35, data_bytes));  // finite codes of every format
    CK(cudaMemset(scales, f.scale_fill, scale_bytes));
    t.data = data;
    t.scales = scales;
    std::vector<double> ms, copy_ms;
    for (int i = 0; i < iters + 1; ++i) {
      CK(cudaMemsetAsync(scratch, i, scratch_bytes, nullptr));  // the GPU busy while we enqueue
      CK(cudaEventRecord(t0, nullptr));
      const gnmr::Status s = (*g)->Enqueue(&t, 1, nullptr);
      if (!s.ok()) {
        std::fprintf(stderr, "Enqueue: %s\n", s.ToString().c_str());
        return 1;
      }
      CK(cudaEventRecord(t1, nullptr));
      gnmr::BlockStats out;
      if (!(*g)->Wait(&out).ok()) return 1;
      float m = 0;
      CK(cudaEventElapsedTime(&m, t0, t1));
      if (i > 0) ms.push_back(m);  // the first run warms up
      CK(cudaEventRecord(t0, nullptr));
      CK(cudaMemcpyAsync(copy, data, data_bytes, cudaMemcpyDeviceToDevice, nullptr));
      CK(cudaEventRecord(t1, nullptr));
      CK(cudaEventSynchronize(t1));
      CK(cudaEventElapsedTime(&m, t0, t1));
      if (i > 0) copy_ms.push_back(m);
    }
    const double bytes = static_cast<double>(data_bytes + scale_bytes);
    const double stats = bytes / (Median(ms) * 1e-3) / 1e9;
    const double traffic = 2.0 * static_cast<double>(data_bytes) / (Median(copy_ms) * 1e-3) / 1e9;
    std::printf("%-12s %-10s %8.2f %10.3f %12.1f %14.1f %7.2f\n", f.name,
                columnwise ? "columnwise" : "rowwise", bytes / 1e9, Median(ms), stats, traffic,
                stats / traffic);
    CK(cudaFree(data));
    CK(cudaFree(scales));
    CK(cudaFree(copy));
  }
  CK(cudaFree(scratch));
  return 0;
}
