// Fuzz target: the block-scaled statistics (kernels/block_stats.h) on
// descriptors a wrong binding could build. The input picks the format, the
// layouts, the shape, the declared scale tensor shape, the global scale and
// a source, then fills the codes, scales and source with its bytes. Every
// buffer is allocated at exactly the size the descriptor claims (codes:
// ceil(rows * cols / per byte), scales: scale_rows * scale_cols entries),
// so a read past what CheckBlockTensor accepted is an AddressSanitizer
// report.
//
// Properties: a tensor CheckBlockTensor accepts is computed without error,
// with counts that fit its shape and its block grid, an exponent range
// that is ordered, a sumsq that is NaN, +Inf or >= 0, and bit-identical
// results from every kernel build this CPU runs; a refused one is refused
// by ComputeBlockStats too, leaving the output untouched.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "fuzz/fuzz_check.h"
#include "fuzz/fuzz_input.h"
#include "kernels/block_stats.h"

namespace {

bool SameBits(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }

bool Same(const gnmr::BlockStats& a, const gnmr::BlockStats& b) {
  return a.numel == b.numel && SameBits(a.sumsq, b.sumsq) && SameBits(a.amax, b.amax) &&
         a.nonfinite == b.nonfinite && a.zero_codes == b.zero_codes && a.saturated == b.saturated &&
         a.blocks == b.blocks && a.saturated_blocks == b.saturated_blocks &&
         a.dead_blocks == b.dead_blocks && a.scale_clamps == b.scale_clamps &&
         a.scale_log2_min == b.scale_log2_min && a.scale_log2_max == b.scale_log2_max &&
         a.scale_log2_sum == b.scale_log2_sum && a.scaled_blocks == b.scaled_blocks &&
         a.has_source == b.has_source && a.underflow == b.underflow &&
         SameBits(a.error_sumsq, b.error_sumsq) && SameBits(a.source_sumsq, b.source_sumsq);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  gnmr::fuzz::FuzzInput in(data, size);
  gnmr::BlockTensorRef t;
  t.format = static_cast<gnmr::BlockFormat>(in.Range(0, 6));
  t.layout = static_cast<gnmr::BlockLayout>(in.Range(0, 3));
  t.scale_layout = static_cast<gnmr::ScaleLayout>(in.Range(0, 3));
  t.rows = static_cast<uint64_t>(in.Range(0, 300));
  t.cols = static_cast<uint64_t>(in.Range(0, 300));
  t.scale_rows = static_cast<uint64_t>(in.Range(0, 300));
  t.scale_cols = static_cast<uint64_t>(in.Range(0, 300));
  const uint32_t global_bits = in.Bool() ? 0x3f800000u : in.Int<uint32_t>();
  std::memcpy(&t.global_scale, &global_bits, sizeof t.global_scale);
  const bool with_source = in.Bool();
  t.source_dtype = static_cast<gnmr::DType>(in.Range(0, 6));

  const bool fp4 = t.format == gnmr::BlockFormat::kMxfp4 || t.format == gnmr::BlockFormat::kNvfp4;
  const uint64_t numel = t.rows * t.cols;
  std::vector<uint8_t> codes(fp4 ? (numel + 1) / 2 : numel);
  const size_t scale_size = t.format == gnmr::BlockFormat::kFp8Block ? 4 : 1;
  std::vector<uint32_t> scale_words((t.scale_rows * t.scale_cols * scale_size + 3) / 4);
  // Source: sized for its dtype (2 or 4 bytes; 4 for anything else).
  const size_t source_size =
      t.source_dtype == gnmr::DType::kBf16 || t.source_dtype == gnmr::DType::kFp16 ? 2 : 4;
  std::vector<uint32_t> source_words(with_source ? (numel * source_size + 3) / 4 : 0);
  for (auto& b : codes) b = in.Byte();
  auto* scale_bytes = reinterpret_cast<uint8_t*>(scale_words.data());
  for (size_t i = 0; i < t.scale_rows * t.scale_cols * scale_size; ++i) scale_bytes[i] = in.Byte();
  auto* source_bytes = reinterpret_cast<uint8_t*>(source_words.data());
  for (size_t i = 0; i < numel * source_size && with_source; ++i) source_bytes[i] = in.Byte();
  t.data = codes.empty() ? nullptr : codes.data();
  t.scales = scale_words.empty() ? nullptr : scale_words.data();
  t.source = with_source && !source_words.empty() ? source_words.data() : nullptr;

  gnmr::BlockStats out;
  out.numel = 12345;
  const gnmr::Status checked = gnmr::cpu::CheckBlockTensor(t);
  const gnmr::Status s = gnmr::cpu::ComputeBlockStats(&t, 1, &out);
  FUZZ_CHECK(checked.ok() == s.ok(), "check says %s, compute says %s", checked.ToString().c_str(),
             s.ToString().c_str());
  if (!s.ok()) {
    FUZZ_CHECK(out.numel == 12345, "a refused tensor changed the output");
    return 0;
  }
  FUZZ_CHECK(out.numel == numel, "numel %llu of %llu", static_cast<unsigned long long>(out.numel),
             static_cast<unsigned long long>(numel));
  FUZZ_CHECK(out.zero_codes <= numel && out.saturated <= numel && out.nonfinite <= numel,
             "counts above numel");
  FUZZ_CHECK(out.saturated_blocks <= out.blocks && out.dead_blocks <= out.blocks &&
                 out.scale_clamps <= out.blocks && out.scaled_blocks <= out.blocks,
             "block counts above blocks");
  FUZZ_CHECK(out.blocks <= numel, "more blocks than elements");
  FUZZ_CHECK(out.scaled_blocks == 0 || out.scale_log2_min <= out.scale_log2_max,
             "exponent range %d > %d", out.scale_log2_min, out.scale_log2_max);
  FUZZ_CHECK(std::isnan(out.sumsq) || out.sumsq >= 0.0, "negative sumsq");
  FUZZ_CHECK(out.amax >= 0.0 && !std::isnan(out.amax), "amax");
  FUZZ_CHECK(out.has_source == (t.source != nullptr), "has_source");
  for (gnmr::cpu::Isa isa :
       {gnmr::cpu::Isa::kBaseline, gnmr::cpu::Isa::kAvx2, gnmr::cpu::Isa::kAvx512}) {
    if (!gnmr::cpu::IsaAvailable(isa)) continue;
    gnmr::BlockStats other;
    FUZZ_CHECK(gnmr::cpu::ComputeBlockStatsWithIsa(isa, &t, 1, &other).ok(), "isa %s refused",
               gnmr::cpu::IsaName(isa));
    FUZZ_CHECK(Same(out, other), "isa %s differs", gnmr::cpu::IsaName(isa));
  }
  return 0;
}
