// Test helpers for the GpuStats tests (tests/kernels/gpu_stats*_test.cc):
// device detection, host tensors mirrored into device memory, bit-exact
// comparison with the CPU path. CUDA runtime only (no driver API).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include "kernels/cpu_stats.h"
#include "kernels/gpu_stats.h"
#include "tests/client/stats_test_util.h"

namespace gnmr::testing {

inline bool GpuAvailable() {
  int n = 0;  // unwritten when the driver is missing (error 35)
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return n > 0;
}

// A host tensor mirrored into device memory at the same byte offset.
struct DevTensor {
  TestTensor host;
  size_t offset;
  void* buf = nullptr;
  DevTensor(TestTensor h, size_t off) : host(std::move(h)), offset(off) {}
  ~DevTensor() {
    if (buf != nullptr) cudaFree(buf);
  }
  size_t bytes() const { return host.Ref().numel * DTypeSize(host.Ref().dtype); }
  void Upload() {
    if (buf == nullptr) {
      ASSERT_EQ(cudaMalloc(&buf, offset + bytes() + 16), cudaSuccess);
    }
    if (bytes() > 0) {
      ASSERT_EQ(cudaMemcpy(static_cast<char*>(buf) + offset, host.Ref().data, bytes(),
                           cudaMemcpyHostToDevice),
                cudaSuccess);
    }
  }
  void Download(std::vector<unsigned char>* out) const {
    out->resize(bytes());
    if (bytes() > 0) {
      ASSERT_EQ(cudaMemcpy(out->data(), static_cast<char*>(buf) + offset, bytes(),
                           cudaMemcpyDeviceToHost),
                cudaSuccess);
    }
  }
  TensorRef Ref() const {
    TensorRef r = host.Ref();
    r.data = r.numel == 0 ? nullptr : static_cast<char*>(buf) + offset;
    r.device = 0;
    return r;
  }
};

inline std::vector<UnitStats> RunGpu(GpuStats* g, cudaStream_t s = nullptr) {
  EXPECT_TRUE(g->Launch(s).ok());
  EXPECT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  int64_t step = -2;
  std::vector<UnitStats> out;
  EXPECT_TRUE(g->Poll(&step, &out));
  return out;
}

// Units of DevTensors on a fresh GpuStats of device 0, launched `runs`
// times, compared unit by unit with the CPU path each time.
inline void CheckUnits(const std::vector<std::vector<DevTensor*>>& units, const std::string& what,
                       int runs = 1) {
  auto g = GpuStats::Create(0);
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  std::vector<std::vector<TensorRef>> refs(units.size());
  std::vector<UnitStats> want(units.size());
  for (size_t u = 0; u < units.size(); ++u) {
    std::vector<TensorRef> host;
    for (DevTensor* t : units[u]) {
      t->Upload();
      refs[u].push_back(t->Ref());
      host.push_back(t->host.Ref());
    }
    ASSERT_TRUE(cpu::ComputeStats(host.data(), host.size(), &want[u]).ok());
  }
  ASSERT_TRUE((*g)->SetTable(refs).ok());
  for (int run = 0; run < runs; ++run) {
    const std::vector<UnitStats> got = RunGpu(g->get());
    ASSERT_EQ(got.size(), units.size());
    for (size_t u = 0; u < units.size(); ++u) {
      ExpectSame(want[u], got[u],
                 what + " unit " + std::to_string(u) + " run " + std::to_string(run));
    }
  }
}

// Whether device 0 reads pageable host memory (HMM or ATS): then such
// memory is legitimately accepted, and the refusal tests check acceptance.
inline bool PageableReadable() {
  int v = 0;
  if (cudaDeviceGetAttribute(&v, cudaDevAttrPageableMemoryAccess, 0) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return v == 1;
}

}  // namespace gnmr::testing
