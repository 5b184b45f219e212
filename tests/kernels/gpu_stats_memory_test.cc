// GpuStats on the memory frameworks actually hand over: virtual-memory
// mappings (cuMemCreate + cuMemMap, what PyTorch's expandable segments
// use), a tensor straddling two physical chunks, a range whose second
// chunk is not mapped (refused up front: a kernel fault would poison the
// trainer's context), and a bf16 tensor of more than 2^31 elements (64-bit
// offsets). Results equal the CPU path bit for bit. The driver functions
// come through cudart's entry points (no libcuda link). Without a CUDA
// device every test skips.
#include <cstring>
#include <vector>

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include "kernels/cpu_stats.h"
#include "kernels/cuda_driver_fns.h"
#include "kernels/gpu_stats.h"
#include "tests/client/stats_test_util.h"
#include "tests/kernels/gpu_test_util.h"

namespace gnmr {
namespace {

using testing::ExpectSame;
using testing::GpuAvailable;
using testing::RunGpu;
using testing::TestTensor;

// `chunks` granules of reserved address space; Map(i) backs granule i with
// its own physical allocation, readable and writable by device 0.
class VmmRange {
 public:
  explicit VmmRange(int chunks) : chunks_(chunks) {
    const cuda::DriverFns& f = cuda::Driver();
    if (f.mem_create == nullptr || f.mem_map == nullptr || f.mem_address_reserve == nullptr ||
        f.mem_set_access == nullptr || f.mem_get_allocation_granularity == nullptr) {
      return;
    }
    prop_.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop_.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop_.location.id = 0;
    if (f.mem_get_allocation_granularity(&granularity_, &prop_, CU_MEM_ALLOC_GRANULARITY_MINIMUM) !=
            CUDA_SUCCESS ||
        f.mem_address_reserve(&base_, granularity_ * chunks, 0, 0, 0) != CUDA_SUCCESS) {
      base_ = 0;
    }
    handles_.assign(chunks, 0);
  }
  ~VmmRange() {
    const cuda::DriverFns& f = cuda::Driver();
    cudaDeviceSynchronize();
    for (int i = 0; i < chunks_ && base_ != 0; ++i) {
      if (handles_[i] != 0) {
        f.mem_unmap(base_ + i * granularity_, granularity_);
        f.mem_release(handles_[i]);
      }
    }
    if (base_ != 0) f.mem_address_free(base_, granularity_ * chunks_);
  }
  bool ok() const { return base_ != 0; }
  size_t granularity() const { return granularity_; }
  unsigned char* at(size_t offset) const {
    return reinterpret_cast<unsigned char*>(base_) + offset;
  }
  bool Map(int i) {
    const cuda::DriverFns& f = cuda::Driver();
    const CUdeviceptr where = base_ + i * granularity_;
    if (f.mem_create(&handles_[i], granularity_, &prop_, 0) != CUDA_SUCCESS) return false;
    if (f.mem_map(where, granularity_, 0, handles_[i], 0) != CUDA_SUCCESS) return false;
    CUmemAccessDesc access{};
    access.location = prop_.location;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    return f.mem_set_access(where, granularity_, &access, 1) == CUDA_SUCCESS;
  }

 private:
  int chunks_;
  CUmemAllocationProp prop_{};
  size_t granularity_ = 0;
  CUdeviceptr base_ = 0;
  std::vector<CUmemGenericAllocationHandle> handles_;
};

UnitStats Cpu(const TestTensor& t) {
  TensorRef h = t.Ref();
  UnitStats u;
  EXPECT_TRUE(cpu::ComputeStats(&h, 1, &u).ok());
  return u;
}

TEST(GpuStatsMemoryTest, VirtualMemoryTensorStraddlingTwoChunks) {
  if (!GpuAvailable()) GTEST_SKIP() << "no CUDA device";
  VmmRange vmm(3);
  if (!vmm.ok()) GTEST_SKIP() << "no virtual-memory management";
  ASSERT_TRUE(vmm.Map(0));
  ASSERT_TRUE(vmm.Map(1));
  ASSERT_TRUE(vmm.Map(2));
  const size_t g = vmm.granularity();
  // bf16 across the first boundary (vector-aligned start), fp32 across the
  // second (element-aligned only: the scalar path).
  TestTensor a(DType::kBf16, 300000), b(DType::kFp32, 200001);
  a.FillNormal(1, 1.0f);
  b.FillNormal(2, 0.5f);
  unsigned char* pa = vmm.at(g - 4096 * 16);
  unsigned char* pb = vmm.at(2 * g - 4 * 99999);
  ASSERT_EQ(cudaMemcpy(pa, a.Ref().data, 300000 * 2, cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(pb, b.Ref().data, 200001 * 4, cudaMemcpyHostToDevice), cudaSuccess);
  TensorRef ra = a.Ref(), rb = b.Ref();
  ra.data = pa;
  ra.device = 0;
  rb.data = pb;
  rb.device = 0;
  auto gs = GpuStats::Create(0);
  ASSERT_TRUE(gs.ok());
  const Status s = (*gs)->SetTable({{ra}, {rb}});
  ASSERT_TRUE(s.ok()) << s.ToString();
  std::vector<UnitStats> got = RunGpu(gs->get());
  ASSERT_EQ(got.size(), 2u);
  ExpectSame(Cpu(a), got[0], "bf16 across chunks 0-1");
  ExpectSame(Cpu(b), got[1], "fp32 across chunks 1-2");
  // Refreshed onto another straddling place.
  unsigned char* pa2 = vmm.at(g - 1000 * 2);
  ASSERT_EQ(cudaMemcpy(pa2, a.Ref().data, 300000 * 2, cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_TRUE((*gs)->RefreshPointers({pa2, pb}).ok());
  got = RunGpu(gs->get());
  ExpectSame(Cpu(a), got[0], "bf16 refreshed");
}

TEST(GpuStatsMemoryTest, UnmappedSecondChunkIsRefused) {
  if (!GpuAvailable()) GTEST_SKIP() << "no CUDA device";
  VmmRange vmm(2);
  if (!vmm.ok()) GTEST_SKIP() << "no virtual-memory management";
  ASSERT_TRUE(vmm.Map(0));  // chunk 1 stays reserved but unmapped
  const size_t g = vmm.granularity();
  TensorRef r;
  r.dtype = DType::kBf16;
  r.device = 0;
  r.numel = 4096;
  r.data = vmm.at(g - 4096);  // half in chunk 0, half in the hole
  auto gs = GpuStats::Create(0);
  ASSERT_TRUE(gs.ok());
  EXPECT_EQ((*gs)->SetTable({{r}}).code(), StatusCode::kInvalidArgument);
  r.data = vmm.at(g - 8192);  // entirely in chunk 0: fine
  ASSERT_TRUE((*gs)->SetTable({{r}}).ok());
  EXPECT_EQ((*gs)->RefreshPointers({vmm.at(g - 2)}).code(), StatusCode::kInvalidArgument);
  ASSERT_EQ(RunGpu(gs->get()).size(), 1u);  // the accepted table still works
}

// More than 2^31 elements in one tensor: item offsets and byte addresses
// are 64-bit all the way.
TEST(GpuStatsMemoryTest, Bf16TensorBeyondTwoToThe31Elements) {
  if (!GpuAvailable()) GTEST_SKIP() << "no CUDA device";
  const uint64_t n = (uint64_t{1} << 31) + 3 * 4096 + 17;
  size_t free_bytes = 0, total = 0;
  ASSERT_EQ(cudaMemGetInfo(&free_bytes, &total), cudaSuccess);
  if (free_bytes < n * 2 + (size_t{2} << 30)) GTEST_SKIP() << "needs ~6 GB of device memory";
  TestTensor h(DType::kBf16, n);
  // Cheap, varied data: a hash of the index, small magnitudes, a few
  // zeros, subnormals and one NaN past 2^31.
  auto* p = static_cast<uint16_t*>(const_cast<void*>(h.Ref().data));
  for (uint64_t i = 0; i < n; ++i) {
    const uint64_t z = (i + 1) * 0x9e3779b97f4a7c15ull;
    p[i] = static_cast<uint16_t>(0x3800 + ((z >> 40) & 0x0fff)) | ((z >> 20) & 0x8000);
    if ((z >> 58) == 0) p[i] = 0;
    if ((z >> 58) == 1) p[i] = static_cast<uint16_t>((z >> 30) & 0x7f);
  }
  p[(uint64_t{1} << 31) + 5] = 0x7fc1;
  void* d = nullptr;
  ASSERT_EQ(cudaMalloc(&d, n * 2), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(d, p, n * 2, cudaMemcpyHostToDevice), cudaSuccess);
  TensorRef r = h.Ref();
  r.data = d;
  r.device = 0;
  auto gs = GpuStats::Create(0);
  ASSERT_TRUE(gs.ok());
  ASSERT_TRUE((*gs)->SetTable({{r}}).ok());
  const std::vector<UnitStats> got = RunGpu(gs->get());
  ASSERT_EQ(got.size(), 1u);
  ExpectSame(Cpu(h), got[0], "2^31+ bf16 with a NaN");
  // And without the NaN: a finite sum to compare bit for bit.
  p[(uint64_t{1} << 31) + 5] = 0x3f80;
  ASSERT_EQ(cudaMemcpy(static_cast<uint16_t*>(d) + (uint64_t{1} << 31) + 5,
                       &p[(uint64_t{1} << 31) + 5], 2, cudaMemcpyHostToDevice),
            cudaSuccess);
  const std::vector<UnitStats> finite = RunGpu(gs->get());
  ExpectSame(Cpu(h), finite[0], "2^31+ bf16");
  gs->reset();
  cudaFree(d);
}

}  // namespace
}  // namespace gnmr
