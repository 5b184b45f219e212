// The host-side logic of GpuStats that needs no GPU: the result ring's
// bookkeeping (a failed launch drops nothing, replays are labelled by
// their stamps, never with a later step) and the table layout (items
// grouped by dtype for one kernel per dtype, segments as exact subtrees).
#include <cmath>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/cuda/launch_ring.h"
#include "kernels/cuda/table_builder.h"
#include "kernels/stats_order.h"

namespace gnmr::cuda {
namespace {

TEST(ResultRingTest, OnlyACommittedLaunchDropsTheOldest) {
  ResultRing r;
  for (int64_t s = 0; s < ResultRing::kSlots; ++s) r.Commit(10 + s);
  uint64_t seq = 99;
  int slot = -1;
  bool tracked = false;
  ASSERT_TRUE(r.Oldest(&seq, &slot, &tracked));
  EXPECT_EQ(seq, 0u);
  // A launch that fails before its copy is queued commits nothing: the
  // four unread launches stay, in their slots.
  EXPECT_EQ(r.next_sequence(), 4u);
  ASSERT_TRUE(r.Oldest(&seq, &slot, &tracked));
  EXPECT_EQ(seq, 0u);
  r.Commit(14);  // the fifth takes slot 0 over: launch 0 is dropped then
  ASSERT_TRUE(r.Oldest(&seq, &slot, &tracked));
  EXPECT_EQ(seq, 1u);
  EXPECT_EQ(slot, 1);
  EXPECT_EQ(r.StepOf(seq), 11);
  std::vector<int64_t> steps;
  while (r.Oldest(&seq, &slot, &tracked)) {
    steps.push_back(r.StepOf(seq));
    r.PopOldest();
  }
  EXPECT_EQ(steps, (std::vector<int64_t>{11, 12, 13, 14}));
}

TEST(ResultRingTest, UntrackedLaunchIsSkipped) {
  ResultRing r;
  r.Commit(1);
  r.Untrack(0);
  uint64_t seq = 0;
  int slot = 0;
  bool tracked = true;
  ASSERT_TRUE(r.Oldest(&seq, &slot, &tracked));
  EXPECT_FALSE(tracked);
  r.Commit(2);  // the slot's next user is tracked again
  r.PopOldest();
  ASSERT_TRUE(r.Oldest(&seq, &slot, &tracked));
  EXPECT_TRUE(tracked);
}

TEST(ResultRingTest, ReplaysAreLabelledByTheirStamps) {
  ResultRing r;
  int64_t step = -1;
  EXPECT_EQ(r.RegisterReplay(50), 1u);
  // Poll before the replay ran: the slot still holds stamp 0 (nothing).
  EXPECT_EQ(r.CheckReplay(0, &step), ResultRing::Replay::kWait);
  EXPECT_EQ(r.CheckReplay(1, &step), ResultRing::Replay::kDeliver);
  EXPECT_EQ(step, 50);
  EXPECT_FALSE(r.ReplayPending());
  // Replay 2 registered; a Poll that still sees replay 1's results (stamp
  // 1) must not label them 51.
  EXPECT_EQ(r.RegisterReplay(51), 2u);
  EXPECT_EQ(r.CheckReplay(1, &step), ResultRing::Replay::kWait);
  EXPECT_TRUE(r.ReplayPending());
  // Two registered before a Poll: the newer supersedes the older.
  EXPECT_EQ(r.RegisterReplay(52), 3u);
  EXPECT_EQ(r.CheckReplay(2, &step), ResultRing::Replay::kWait);
  EXPECT_EQ(r.CheckReplay(3, &step), ResultRing::Replay::kDeliver);
  EXPECT_EQ(step, 52);
  // A replay nobody registered (stamp 5 when 4 is expected): discarded,
  // and the count follows the device's.
  EXPECT_EQ(r.RegisterReplay(53), 4u);
  EXPECT_EQ(r.CheckReplay(5, &step), ResultRing::Replay::kDiscard);
  EXPECT_EQ(r.RegisterReplay(54), 6u);
  EXPECT_EQ(r.CheckReplay(6, &step), ResultRing::Replay::kDeliver);
  EXPECT_EQ(step, 54);
  r.Reset();  // SetTable: the device counter starts again
  EXPECT_EQ(r.RegisterReplay(60), 1u);
}

Status AcceptAll(const void* p, size_t, size_t, const void** dev) {
  *dev = p;
  return Status::Ok();
}

TEST(TableBuilderTest, ItemsGroupedByDtypeAndSegmentsAreSubtrees) {
  static unsigned char mem[64];
  auto t = [](DType d, uint64_t n) {
    TensorRef r;
    r.data = mem;
    r.numel = n;
    r.dtype = d;
    r.device = 0;
    return r;
  };
  const uint64_t big = uint64_t{4096} * 4096 * 2 + 5;  // three segments
  const std::vector<std::vector<TensorRef>> units = {
      {t(DType::kBf16, 5000), t(DType::kFp32, 1)},
      {t(DType::kFp8E5M2, 0), t(DType::kBf16, big)},
      {t(DType::kFp32, 8192), t(DType::kFp8E4M3, 4097), t(DType::kFp16, 3)}};
  HostTables h;
  ASSERT_TRUE(BuildTables(units, 0, AcceptAll, &h).ok());
  ASSERT_EQ(h.tensors.size(), 7u);
  ASSERT_EQ(h.units.size(), 3u);
  EXPECT_EQ(h.units[2].first_tensor, 4u);
  // Each dtype's range holds exactly its tensors' items, in tensor order.
  uint64_t covered = 0;
  for (int d = 1; d < kDTypeSlots; ++d) {
    for (uint64_t k = h.item_range[d][0]; k < h.item_range[d][1]; ++k) {
      EXPECT_EQ(h.tensors[h.items[k].tensor].dtype, static_cast<uint32_t>(d));
    }
    covered += h.item_range[d][1] - h.item_range[d][0];
    if (d > 1) {
      EXPECT_EQ(h.item_range[d][0], h.item_range[d - 1][1]);
    }
  }
  EXPECT_EQ(covered, h.items.size());
  // Each tensor: its segments cover its items in order, in aligned blocks
  // of kSegItems, and the items cover [0, numel) in 4096-element steps.
  for (size_t k = 0; k < h.tensors.size(); ++k) {
    const DevTensor& d = h.tensors[k];
    const uint64_t n_items = (d.numel + 4095) / 4096;
    uint64_t next_offset = 0, seen = 0;
    for (uint32_t s = 0; s < d.n_segs; ++s) {
      const DevSeg& seg = h.segs[d.first_seg + s];
      EXPECT_EQ(seg.n_items, std::min<uint64_t>(kSegItems, n_items - seen));
      for (uint32_t i = 0; i < seg.n_items; ++i) {
        const DevItem& it = h.items[seg.first_item + i];
        EXPECT_EQ(it.tensor, k);
        EXPECT_EQ(it.offset, next_offset);
        EXPECT_EQ(it.n, std::min<uint64_t>(4096, d.numel - next_offset));
        next_offset += it.n;
      }
      seen += seg.n_items;
    }
    EXPECT_EQ(seen, n_items) << "tensor " << k;
    EXPECT_EQ(next_offset, d.numel);
  }
  EXPECT_EQ(h.tensors[3].n_segs, 3u);
}

// Inside each dtype's range, the items of tensors that count saturation
// come last (from sat_begin), each tensor's items still consecutive, and
// every tensor carries its saturation pattern.
TEST(TableBuilderTest, SaturationTensorsLastInTheirDtypeRange) {
  static unsigned char mem[64];
  auto t = [](DType d, uint64_t n, float m) {
    TensorRef r;
    r.data = mem;
    r.numel = n;
    r.dtype = d;
    r.device = 0;
    r.saturation_magnitude = m;
    return r;
  };
  const std::vector<std::vector<TensorRef>> units = {
      {t(DType::kFp8E4M3, 9000, kSaturationAtFormatMax), t(DType::kBf16, 5000, 0.0f)},
      {t(DType::kFp8E4M3, 4096, 0.0f), t(DType::kBf16, 300, 2.0f)},
      {t(DType::kFp8E4M3, 1, 0.0f), t(DType::kFp32, 10, 0.0f)}};
  HostTables h;
  ASSERT_TRUE(BuildTables(units, 0, AcceptAll, &h).ok());
  EXPECT_EQ(h.tensors[0].saturation, 0x7eu);
  EXPECT_EQ(h.tensors[3].saturation, 0x4000u);  // bf16 2.0
  for (size_t k : {1u, 2u, 4u, 5u}) EXPECT_EQ(h.tensors[k].saturation, 0u);
  for (int d = 1; d < kDTypeSlots; ++d) {
    EXPECT_LE(h.item_range[d][0], h.sat_begin[d]);
    EXPECT_LE(h.sat_begin[d], h.item_range[d][1]);
    for (uint64_t k = h.item_range[d][0]; k < h.item_range[d][1]; ++k) {
      const bool counts = h.tensors[h.items[k].tensor].saturation != 0;
      EXPECT_EQ(counts, k >= h.sat_begin[d]) << "dtype " << d << " item " << k;
    }
  }
  const int e4m3 = static_cast<int>(DType::kFp8E4M3);
  EXPECT_EQ(h.sat_begin[e4m3] - h.item_range[e4m3][0], 2u);  // tensors 2, 4: 1 + 1 items
  EXPECT_EQ(h.item_range[e4m3][1] - h.sat_begin[e4m3], 3u);  // tensor 0: 3 items
  const int fp32 = static_cast<int>(DType::kFp32);
  EXPECT_EQ(h.sat_begin[fp32], h.item_range[fp32][1]);  // no fp32 tensor counts
  // Refused: a negative or NaN magnitude.
  for (float m : {-1.0f, std::nanf("")}) {
    const Status s = BuildTables({{t(DType::kFp32, 10, m)}}, 0, AcceptAll, &h);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find("saturation_magnitude"), std::string::npos) << s.message();
  }
}

TEST(TableBuilderTest, RefusesWhatTheKernelsCannotUse) {
  TensorRef r;
  r.numel = 10;
  r.device = 0;
  HostTables h;
  EXPECT_EQ(BuildTables({{r}}, 0, AcceptAll, &h).code(), StatusCode::kInvalidArgument);  // null
  static float x[10];
  r.data = x;
  r.device = 1;
  EXPECT_EQ(BuildTables({{r}}, 0, AcceptAll, &h).code(), StatusCode::kInvalidArgument);
  r.device = 0;
  r.dtype = DType::kFp8E4M3;
  r.scale_inv = 1.0f / 0.0f;
  EXPECT_EQ(BuildTables({{r}}, 0, AcceptAll, &h).code(), StatusCode::kInvalidArgument);
  r.dtype = DType::kFp32;
  auto refuse = [](const void*, size_t, size_t, const void**) {
    return InvalidArgument("not readable");
  };
  const Status s = BuildTables({{r}}, 0, refuse, &h);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("unit 0 tensor 0"), std::string::npos) << s.message();
  EXPECT_TRUE(BuildTables({{r}}, 0, AcceptAll, &h).ok());
}

}  // namespace
}  // namespace gnmr::cuda
