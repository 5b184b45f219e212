// GpuBlockStats on a device against gnmr::cpu::ComputeBlockStats, bit for
// bit: every format / layout / scale layout / tail case, codes on and off
// the vector boundary, mixed units, a tensor of several segments, and the
// API's rules. Every test skips without a device (then Create must say
// Unavailable).
#include "kernels/gpu_block_stats.h"

#include <vector>

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include "kernels/block_stats.h"
#include "tests/kernels/gpu_block_cases.h"
#include "tests/kernels/gpu_test_util.h"

namespace gnmr::testing {
namespace {

#define SKIP_WITHOUT_GPU() \
  if (!GpuAvailable()) GTEST_SKIP() << "no CUDA device"

// A BlockCase mirrored into one device allocation: codes at byte offset
// `data_offset` (1: off every vector boundary), scales and source aligned.
struct DevBlock {
  BlockCase host;
  size_t data_offset;
  char* buf = nullptr;
  size_t scale_at = 0, source_at = 0;
  DevBlock(BlockCase h, size_t off) : host(std::move(h)), data_offset(off) {}
  ~DevBlock() {
    if (buf != nullptr) cudaFree(buf);
  }
  DevBlock(const DevBlock&) = delete;
  DevBlock& operator=(const DevBlock&) = delete;
  void Upload() {
    scale_at = (data_offset + host.data.size() + 15) / 16 * 16;
    source_at = (scale_at + host.scales.size() + 15) / 16 * 16;
    ASSERT_EQ(cudaMalloc(&buf, source_at + host.source.size() + 16), cudaSuccess);
    auto put = [&](size_t at, const std::vector<unsigned char>& v) {
      if (!v.empty()) {
        ASSERT_EQ(cudaMemcpy(buf + at, v.data(), v.size(), cudaMemcpyHostToDevice), cudaSuccess);
      }
    };
    put(data_offset, host.data);
    put(scale_at, host.scales);
    put(source_at, host.source);
  }
  BlockTensorRef Ref() const {
    BlockTensorRef r = host.Ref();
    r.device = 0;
    r.data = host.data.empty() ? nullptr : buf + data_offset;
    r.scales = buf + scale_at;
    r.source = host.source.empty() ? nullptr : buf + source_at;
    return r;
  }
};

BlockStats OnCpu(const std::vector<const DevBlock*>& ts) {
  std::vector<BlockTensorRef> refs;
  for (const DevBlock* t : ts) refs.push_back(t->host.Ref());
  BlockStats s;
  const Status st = cpu::ComputeBlockStats(refs.data(), refs.size(), &s);
  EXPECT_TRUE(st.ok()) << st.ToString();
  return s;
}

BlockStats OnGpu(GpuBlockStats* g, const std::vector<const DevBlock*>& ts) {
  std::vector<BlockTensorRef> refs;
  for (const DevBlock* t : ts) refs.push_back(t->Ref());
  const Status e = g->Enqueue(refs.data(), refs.size(), nullptr);
  EXPECT_TRUE(e.ok()) << e.ToString();
  BlockStats s;
  const Status w = g->Wait(&s);
  EXPECT_TRUE(w.ok()) << w.ToString();
  return s;
}

TEST(GpuBlockStats, UnavailableWithoutADevice) {
  auto g = GpuBlockStats::Create(0);
  if (!GpuAvailable()) {
    ASSERT_FALSE(g.ok());
    EXPECT_EQ(g.status().code(), StatusCode::kUnavailable) << g.status().ToString();
    return;
  }
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_EQ(GpuBlockStats::Create(1 << 20).status().code(), StatusCode::kUnavailable);
}

TEST(GpuBlockStats, MatchesTheCpuPathForEveryCaseOnAndOffTheVectorBoundary) {
  SKIP_WITHOUT_GPU();
  auto g = GpuBlockStats::Create(0);
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  for (bool sources : {false, true}) {
    for (size_t offset : {size_t{0}, size_t{1}, size_t{4}}) {
      for (BlockCase& c : AllBlockCases(sources)) {
        const std::string what = c.name + " offset " + std::to_string(offset);
        DevBlock t(std::move(c), offset);
        t.Upload();
        ExpectSameBlock(OnGpu(g->get(), {&t}), OnCpu({&t}), what);
      }
    }
  }
}

TEST(GpuBlockStats, MatchesTheCpuPathForAMixedUnit) {
  SKIP_WITHOUT_GPU();
  auto g = GpuBlockStats::Create(0);
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  std::vector<std::unique_ptr<DevBlock>> ts;
  size_t k = 0;
  for (BlockCase& c : AllBlockCases(true))
    ts.push_back(std::make_unique<DevBlock>(std::move(c), k++ % 3));
  ts.push_back(std::make_unique<DevBlock>(
      MakeBlockCase(BlockFormat::kNvfp4, BlockLayout::kRowwise, ScaleLayout::kCompact, 0, 64, 1, 9),
      0));  // empty, with a source
  std::vector<const DevBlock*> ptrs;
  for (auto& t : ts) {
    t->Upload();
    ptrs.push_back(t.get());
  }
  ExpectSameBlock(OnGpu(g->get(), ptrs), OnCpu(ptrs), "mixed unit");
  ExpectSameBlock(OnGpu(g->get(), ptrs), OnCpu(ptrs), "mixed unit, again");
}

TEST(GpuBlockStats, MatchesTheCpuPathAcrossSegments) {
  SKIP_WITHOUT_GPU();
  auto g = GpuBlockStats::Create(0);
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  // 4099 x 4104 elements: 4107 items, two segments and a tail item.
  for (BlockFormat f : {BlockFormat::kMxfp8E4M3, BlockFormat::kFp8Block}) {
    DevBlock t(MakeBlockCase(f, BlockLayout::kRowwise, ScaleLayout::kCompact, 4099, 4104, 2, 11),
               0);
    t.Upload();
    ExpectSameBlock(OnGpu(g->get(), {&t}), OnCpu({&t}), "two segments");
  }
}

TEST(GpuBlockStats, OneRequestAtATimeAndPollWithoutWaiting) {
  SKIP_WITHOUT_GPU();
  auto g = GpuBlockStats::Create(0);
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  BlockStats s;
  EXPECT_FALSE((*g)->Poll(&s));
  EXPECT_EQ((*g)->Wait(&s).code(), StatusCode::kFailedPrecondition);
  DevBlock t(MakeBlockCase(BlockFormat::kMxfp4, BlockLayout::kRowwise, ScaleLayout::kSwizzled, 130,
                           64, 1, 3),
             0);
  t.Upload();
  const BlockTensorRef r = t.Ref();
  ASSERT_TRUE((*g)->Enqueue(&r, 1, nullptr).ok());
  EXPECT_EQ((*g)->Enqueue(&r, 1, nullptr).code(), StatusCode::kFailedPrecondition);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  ASSERT_TRUE((*g)->Poll(&s));
  ExpectSameBlock(s, OnCpu({&t}), "polled");
  EXPECT_FALSE((*g)->Poll(&s));
  ASSERT_TRUE((*g)->Enqueue(nullptr, 0, nullptr).ok());  // an empty unit
  ASSERT_TRUE((*g)->Wait(&s).ok());
  EXPECT_EQ(s.numel, 0u);
  EXPECT_EQ(s.blocks, 0u);
}

TEST(GpuBlockStats, RefusesHostMemoryOtherDevicesAndBadShapes) {
  SKIP_WITHOUT_GPU();
  auto g = GpuBlockStats::Create(0);
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  BlockCase h = MakeBlockCase(BlockFormat::kMxfp8E4M3, BlockLayout::kRowwise, ScaleLayout::kCompact,
                              8, 64, 0, 4);
  BlockTensorRef r = h.Ref();  // pageable host memory
  r.device = 0;
  Status s = (*g)->Enqueue(&r, 1, nullptr);
  int pageable = 0;
  cudaDeviceGetAttribute(&pageable, cudaDevAttrPageableMemoryAccess, 0);
  if (pageable == 0) {
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  } else {
    BlockStats out;
    ASSERT_TRUE((*g)->Wait(&out).ok());
  }
  r.device = kHostDevice;
  s = (*g)->Enqueue(&r, 1, nullptr);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  EXPECT_NE(s.message().find("tensor 0"), std::string::npos) << s.message();
  DevBlock t(std::move(h), 0);
  t.Upload();
  r = t.Ref();
  r.scale_cols = 1;  // does not cover the grid
  EXPECT_EQ((*g)->Enqueue(&r, 1, nullptr).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace gnmr::testing
