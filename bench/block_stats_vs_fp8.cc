// block_stats_vs_fp8: the CPU throughput of the block-scaled statistics
// (gnmr::cpu::ComputeBlockStats) per byte of stored data (codes and
// scales), as a ratio to today's per-tensor fp8 statistics
// (gnmr::cpu::ComputeStats on e4m3 codes with a scale_inv) on a buffer of
// the same size, in the same run. Target: >= 0.9x (docs/perf.md,
// "Block-scaled statistics on the CPU").
//
// Rounds alternate the two kernels back to back (`--reps` of them), so a
// shared machine's drift hits both; the table shows the median ratio and
// its 25th-75th percentile. Times are the thread's CPU time. Single thread; 64 MiB of codes per
// input by default (larger than the caches).
#include <cmath>
#include <cstdio>
#include <ctime>
#include <random>
#include <string>
#include <vector>

#include "bench/quantile.h"
#include "common/flag_parser.h"
#include "kernels/block_stats.h"
#include "kernels/cpu_stats.h"

namespace gnmr {
namespace {

struct Case {
  const char* name;
  BlockFormat format;
  BlockLayout layout;
  bool with_source;
};

constexpr Case kCases[] = {
    {"mxfp8_e4m3 1x32", BlockFormat::kMxfp8E4M3, BlockLayout::kRowwise, false},
    {"mxfp8_e4m3 32x1", BlockFormat::kMxfp8E4M3, BlockLayout::kColumnwise, false},
    {"mxfp8_e5m2 1x32", BlockFormat::kMxfp8E5M2, BlockLayout::kRowwise, false},
    {"mxfp4 1x32", BlockFormat::kMxfp4, BlockLayout::kRowwise, false},
    {"nvfp4 1x16", BlockFormat::kNvfp4, BlockLayout::kRowwise, false},
    {"nvfp4 16x16", BlockFormat::kNvfp4, BlockLayout::kSquare, false},
    {"fp8_block 1x128", BlockFormat::kFp8Block, BlockLayout::kRowwise, false},
    {"fp8_block 128x128", BlockFormat::kFp8Block, BlockLayout::kSquare, false},
    {"mxfp8_e4m3 1x32 +source", BlockFormat::kMxfp8E4M3, BlockLayout::kRowwise, true},
};

// Thread CPU time: on a shared 2-core machine the wall clock also counts
// the time other processes held the core.
double CpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

using bench::Quantile;

// A block tensor of `code_bytes` bytes of random finite codes, 4096 columns,
// with random scales near 1 (and an fp32 source when asked).
struct BlockInput {
  std::vector<unsigned char> codes;
  std::vector<float> scales_f32;
  std::vector<unsigned char> scales_u8;
  std::vector<float> source;
  BlockTensorRef ref;
  uint64_t stored_bytes = 0;
};

BlockInput MakeInput(const Case& c, size_t code_bytes) {
  BlockInput in;
  std::mt19937 rng(7);
  const bool fp4 = c.format == BlockFormat::kMxfp4 || c.format == BlockFormat::kNvfp4;
  const uint64_t cols = 4096;
  const uint64_t rows = code_bytes * (fp4 ? 2 : 1) / cols;
  in.codes.resize(rows * cols / (fp4 ? 2 : 1));
  for (auto& b : in.codes) {
    // finite codes: avoid the NaN patterns of e4m3 (0x7f/0xff) and e5m2
    b = static_cast<unsigned char>(rng() & 0x6f);
  }
  BlockTensorRef& t = in.ref;
  t.format = c.format;
  t.layout = c.layout;
  t.data = in.codes.data();
  t.rows = rows;
  t.cols = cols;
  const uint32_t b = BlockFormatBlockSize(c.format);
  t.scale_rows = c.layout == BlockLayout::kRowwise ? rows : (rows + b - 1) / b;
  t.scale_cols = c.layout == BlockLayout::kColumnwise ? cols : (cols + b - 1) / b;
  const uint64_t n_scales = t.scale_rows * t.scale_cols;
  if (c.format == BlockFormat::kFp8Block) {
    in.scales_f32.resize(n_scales);
    for (auto& s : in.scales_f32) s = 0.5f + static_cast<float>(rng() % 1000) / 1000.0f;
    t.scales = in.scales_f32.data();
    in.stored_bytes = in.codes.size() + n_scales * 4;
  } else {
    in.scales_u8.resize(n_scales);
    const unsigned char base = c.format == BlockFormat::kNvfp4 ? 0x30 : 0x7c;
    for (auto& s : in.scales_u8) s = static_cast<unsigned char>(base + rng() % 8);
    t.scales = in.scales_u8.data();
    in.stored_bytes = in.codes.size() + n_scales;
  }
  if (c.with_source) {
    in.source.resize(rows * cols);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    for (auto& x : in.source) x = dist(rng);
    t.source = in.source.data();
  }
  return in;
}

int Run(size_t mib, int reps) {
  const size_t bytes = mib << 20;
  std::vector<unsigned char> fp8(bytes);
  std::mt19937 rng(3);
  for (auto& b : fp8) b = static_cast<unsigned char>(rng() & 0x6f);
  TensorRef f;
  f.data = fp8.data();
  f.numel = bytes;
  f.dtype = DType::kFp8E4M3;
  f.scale_inv = 0.75f;
  std::printf("block_stats_vs_fp8: %zu MiB of codes per input, %d rounds, one thread\n", mib, reps);
  std::printf(
      "| input | block GB/s (stored bytes) | fp8 per-tensor GB/s | ratio median | "
      "p25-p75 |\n| --- | --- | --- | --- | --- |\n");
  double sink = 0.0;
  for (const Case& c : kCases) {
    BlockInput in = MakeInput(c, bytes);
    std::vector<double> ratios, block_rates, fp8_rates;
    for (int r = 0; r < reps; ++r) {
      BlockStats bs;
      UnitStats us;
      const double t0 = CpuSeconds();
      if (!cpu::ComputeBlockStats(&in.ref, 1, &bs).ok()) return 1;
      const double t1 = CpuSeconds();
      if (!cpu::ComputeStats(&f, 1, &us).ok()) return 1;
      const double t2 = CpuSeconds();
      sink += bs.sumsq + us.sumsq;
      const double block_rate = static_cast<double>(in.stored_bytes) / (t1 - t0);
      const double fp8_rate = static_cast<double>(bytes) / (t2 - t1);
      block_rates.push_back(block_rate / 1e9);
      fp8_rates.push_back(fp8_rate / 1e9);
      ratios.push_back(block_rate / fp8_rate);
    }
    std::printf("| %s | %.2f | %.2f | %.2fx | %.2f-%.2f |\n", c.name, Quantile(block_rates, 0.5),
                Quantile(fp8_rates, 0.5), Quantile(ratios, 0.5), Quantile(ratios, 0.25),
                Quantile(ratios, 0.75));
  }
  std::printf("(checksum %g)\n", sink);
  return 0;
}

}  // namespace
}  // namespace gnmr

int main(int argc, char** argv) {
  int64_t mib = 64, reps = 9;
  gnmr::FlagParser p("block_stats_vs_fp8 [--mib N] [--reps N]",
                     "Block-scaled statistics (CPU) per stored byte, as a ratio to the\n"
                     "per-tensor fp8 statistics on a buffer of the same size, same run.");
  p.AddInt("mib", "N", "code bytes per input in MiB (default 64)", 1, 4096, &mib);
  p.AddInt("reps", "N", "alternating rounds per input (default 9)", 1, 1001, &reps);
  const gnmr::Status s = p.Parse(argc - 1, argv + 1);
  if (!s.ok()) {
    std::fprintf(stderr, "block_stats_vs_fp8: %s\n%s", s.message().c_str(), p.Help().c_str());
    return 2;
  }
  if (p.help_requested()) {
    std::fputs(p.Help().c_str(), stdout);
    return 0;
  }
  return gnmr::Run(static_cast<size_t>(mib), static_cast<int>(reps));
}
