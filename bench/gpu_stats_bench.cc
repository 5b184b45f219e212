// gpu_stats_bench: the GpuStats launch on 1, 4 and 16 GB of gradients in
// hundreds of tensors (mixed bf16/fp32, or one dtype), against cudaMemcpy
// device-to-device in the same run. Prints a table (and CSV with
// --csv=FILE, appended to if it exists).
//
//   gpu_stats_bench [--sizes-gb=1,4,16] [--dtype=mixed|fp32|bf16|fp16|
//                   fp8_e4m3fn|fp8_e5m2] [--offset=BYTES] [--tensors=300]
//                   [--iters=20] [--csv=FILE]
//
// Exit status: 0 measured, 2 bad options, 3 no usable CUDA device, 1 other
// failures.
//
// --offset starts every tensor BYTES past a 256-byte boundary (2: element-
// aligned bf16 off the 16-byte vector boundary, the scalar path).
// "stats GB/s" is bytes read / launch time (event-timed, median). The GPU
// is kept busy (a memset of a scratch buffer) while the host enqueues the
// launch, so the first event does not count host enqueue time.
// "copy GB/s" is bytes copied / time of a device-to-device cudaMemcpy of
// min(size, 4 GB); a copy reads and writes each byte, so "copy traffic" is
// twice that. ratio = stats GB/s / copy traffic GB/s (target >= 0.90).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <cuda_runtime.h>

#include "bench/cuda_bench_util.h"
#include "kernels/gpu_stats.h"

// --dtype: 0 for "mixed" (bf16 / fp32 alternating), -1 if unknown.
int ParseDtype(const std::string& name) {
  if (name == "mixed") return 0;
  for (gnmr::DType d : {gnmr::DType::kFp32, gnmr::DType::kBf16, gnmr::DType::kFp16,
                        gnmr::DType::kFp8E4M3, gnmr::DType::kFp8E5M2}) {
    if (name == gnmr::DTypeName(d)) return static_cast<int>(d);
  }
  return -1;
}

// Whether the options cannot make a meaningful run.
bool BadOptions(const std::vector<double>& sizes_gb, int n_tensors, int iters) {
  if (sizes_gb.empty() || n_tensors < 1 || iters < 1) return true;
  for (double g : sizes_gb) {
    if (!(g > 0.0)) return true;
  }
  return false;
}

int main(int argc, char** argv) {
  std::vector<double> sizes_gb = {1, 4, 16};
  int n_tensors = 300, iters = 20, offset = 0;
  std::string csv, dtype_name = "mixed";
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      std::printf(
          "usage: gpu_stats_bench [--sizes-gb=1,4,16] [--dtype=mixed] [--offset=0] "
          "[--tensors=300] [--iters=20] [--csv=FILE]\n  GpuStats launch time vs "
          "device-to-device copy bandwidth (docs/perf.md)\n");
      return 0;
    } else if (a.rfind("--dtype=", 0) == 0) {
      dtype_name = a.substr(8);
    } else if (a.rfind("--offset=", 0) == 0) {
      offset = std::atoi(a.c_str() + 9);
    } else if (a.rfind("--sizes-gb=", 0) == 0) {
      sizes_gb.clear();
      std::string v = a.substr(11);
      size_t p = 0;
      while (p < v.size()) {
        size_t q = v.find(',', p);
        if (q == std::string::npos) q = v.size();
        sizes_gb.push_back(std::atof(v.substr(p, q - p).c_str()));
        p = q + 1;
      }
    } else if (a.rfind("--tensors=", 0) == 0) {
      n_tensors = std::atoi(a.c_str() + 10);
    } else if (a.rfind("--iters=", 0) == 0) {
      iters = std::atoi(a.c_str() + 8);
    } else if (a.rfind("--csv=", 0) == 0) {
      csv = a.substr(6);
    } else {
      std::fprintf(stderr, "unknown argument %s\n", a.c_str());
      return 2;
    }
  }
  const int dtype = ParseDtype(dtype_name);
  if (BadOptions(sizes_gb, n_tensors, iters) || dtype < 0 || offset < 0 || offset > 255) {
    std::fprintf(stderr,
                 "gpu_stats_bench: need sizes > 0 GB, --tensors >= 1, --iters >= 1, "
                 "--offset in 0..255 and a known --dtype\n"
                 "usage: gpu_stats_bench [--sizes-gb=1,4,16] [--dtype=mixed] [--offset=0] "
                 "[--tensors=300] [--iters=20] [--csv=FILE]\n");
    return 2;
  }
  auto gs = gnmr::GpuStats::Create(0);
  if (!gs.ok()) {
    std::fprintf(stderr, "gpu_stats_bench: %s\n", gs.status().ToString().c_str());
    return gs.status().code() == gnmr::StatusCode::kUnavailable ? 3 : 1;  // 3: no device
  }
  cudaDeviceProp prop{};
  CK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s, %d SMs\n", prop.name, prop.multiProcessorCount);
  FILE* probe = csv.empty() ? nullptr : std::fopen(csv.c_str(), "r");
  const bool fresh = probe == nullptr;
  if (probe != nullptr) std::fclose(probe);
  FILE* out = csv.empty() ? nullptr : std::fopen(csv.c_str(), "a");
  if (out && fresh) {
    std::fprintf(out,
                 "size_gb,dtype,offset,tensors,units,stats_ms,stats_gbps,copy_gbps,"
                 "copy_traffic_gbps,ratio\n");
  }
  std::printf("%8s %-11s %6s %8s %10s %12s %12s %14s %7s\n", "size GB", "dtype", "offset",
              "tensors", "stats ms", "stats GB/s", "copy GB/s", "copy traffic", "ratio");
  cudaStream_t st;
  CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  // Busy work queued before the first event: by the time the GPU records
  // it, the host has long finished enqueuing the launch.
  constexpr size_t kCoverBytes = size_t{1} << 30;
  void* cover = nullptr;
  CK(cudaMalloc(&cover, kCoverBytes));
  for (double gb : sizes_gb) {
    const uint64_t total = static_cast<uint64_t>(gb * (1ull << 30));
    // Mixed sizes (1..3 shares), alternating bf16 / fp32, 10 tensors a unit.
    std::vector<uint64_t> share(n_tensors);
    uint64_t shares = 0;
    for (int i = 0; i < n_tensors; ++i) shares += share[i] = 1 + (i * 7) % 3;
    unsigned char* base = nullptr;
    CK(cudaMalloc(&base, total + 512 * n_tensors));
    // 0x3c bytes: finite, nonzero, normal in every dtype (no NaN/Inf rescan).
    CK(cudaMemset(base, 0x3c, total + 512 * n_tensors));
    std::vector<std::vector<gnmr::TensorRef>> units;
    uint64_t off = 0, bytes = 0;
    for (int i = 0; i < n_tensors; ++i) {
      gnmr::TensorRef r;
      r.dtype = dtype != 0 ? static_cast<gnmr::DType>(dtype)
                : i % 2    ? gnmr::DType::kFp32
                           : gnmr::DType::kBf16;
      r.numel = total / shares * share[i] / gnmr::DTypeSize(r.dtype);
      r.data = base + off + offset;
      r.device = 0;
      off += (offset + r.numel * gnmr::DTypeSize(r.dtype) + 255) / 256 * 256;
      bytes += r.numel * gnmr::DTypeSize(r.dtype);
      if (i % 10 == 0) units.emplace_back();
      units.back().push_back(r);
    }
    gnmr::Status s = (*gs)->SetTable(units);
    if (!s.ok()) {
      std::fprintf(stderr, "SetTable: %s\n", s.ToString().c_str());
      return 1;
    }
    std::vector<double> ms;
    std::vector<gnmr::UnitStats> res;
    int64_t step;
    for (int it = 0; it < iters + 3; ++it) {
      CK(cudaMemsetAsync(cover, it & 0xff, kCoverBytes, st));
      CK(cudaEventRecord(e0, st));
      s = (*gs)->Launch(st);
      CK(cudaEventRecord(e1, st));
      CK(cudaEventSynchronize(e1));
      if (!s.ok()) {
        std::fprintf(stderr, "Launch: %s\n", s.ToString().c_str());
        return 1;
      }
      while ((*gs)->Poll(&step, &res)) {
      }
      float t = 0;
      CK(cudaEventElapsedTime(&t, e0, e1));
      if (it >= 3) ms.push_back(t);
    }
    const double stats_ms = Median(ms);
    // Device-to-device copy of min(size, 4 GB), same run.
    const uint64_t cb = std::min<uint64_t>(bytes, 4ull << 30);
    unsigned char* dst = nullptr;
    CK(cudaMalloc(&dst, cb));
    std::vector<double> cms;
    for (int it = 0; it < iters + 3; ++it) {
      CK(cudaMemsetAsync(cover, it & 0xff, kCoverBytes, st));
      CK(cudaEventRecord(e0, st));
      CK(cudaMemcpyAsync(dst, base, cb, cudaMemcpyDeviceToDevice, st));
      CK(cudaEventRecord(e1, st));
      CK(cudaEventSynchronize(e1));
      float t = 0;
      CK(cudaEventElapsedTime(&t, e0, e1));
      if (it >= 3) cms.push_back(t);
    }
    CK(cudaFree(dst));
    CK(cudaFree(base));
    const double stats_gbps = bytes / (stats_ms * 1e-3) / 1e9;
    const double copy_gbps = cb / (Median(cms) * 1e-3) / 1e9;
    const double ratio = stats_gbps / (2 * copy_gbps);
    std::printf("%8.1f %-11s %6d %8d %10.3f %12.1f %12.1f %14.1f %7.3f\n", gb, dtype_name.c_str(),
                offset, n_tensors, stats_ms, stats_gbps, copy_gbps, 2 * copy_gbps, ratio);
    if (out) {
      std::fprintf(out, "%g,%s,%d,%d,%zu,%.4f,%.1f,%.1f,%.1f,%.4f\n", gb, dtype_name.c_str(),
                   offset, n_tensors, units.size(), stats_ms, stats_gbps, copy_gbps, 2 * copy_gbps,
                   ratio);
    }
  }
  if (out) std::fclose(out);
  CK(cudaFree(cover));
  return 0;
}
