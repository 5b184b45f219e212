#!/usr/bin/env bash
# GPU checks for the CUDA statistics path (needs an NVIDIA GPU + driver):
# builds with CUDA into build-gpucheck, runs the GPU tests (GPU == CPU bit
# identity, graph capture, apply kernels), the stats-vs-memcpy benchmark and,
# when torch with CUDA is importable, the torch baseline. Everything goes to
# ${OUT:-gpu-results}/.
#
#   scripts/gpu_check.sh            # sizes 1, 4, 16 GB
#   SIZES_GB=1 scripts/gpu_check.sh # quicker
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-gpu-results}
SIZES_GB=${SIZES_GB:-1,4,16}
BUILD=${BUILD_DIR:-build-gpucheck}
mkdir -p "$OUT"
rc=0
nvidia-smi > "$OUT/nvidia-smi.txt" 2>&1 || true
{
  cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DGNMR_CUDA=ON &&
    cmake --build "$BUILD" -j "$(nproc)" --target kernels_gpu_stats_test gpu_stats_bench \
      client_gpu_test client_gpu_path_test client_cupti_test gnmrd
} > "$OUT/build.log" 2>&1 || { echo "build failed: $OUT/build.log"; exit 1; }
(cd "$BUILD" && ctest -R "Gpu|gpu|cupti|Cupti" --output-on-failure) > "$OUT/ctest.txt" 2>&1 || rc=1
"$BUILD/tests/kernels/kernels_gpu_stats_test" > "$OUT/gpu_stats_test.txt" 2>&1 || rc=1
# The client on the GPU against the real gnmrd (stream observe == CPU path,
# pointer refresh) and CUPTI overhead_ratio or its back-off.
"$BUILD/tests/client/client_gpu_test" > "$OUT/client_gpu_test.txt" 2>&1 || rc=1
"$BUILD/bench/gpu_stats_bench" --sizes-gb="$SIZES_GB" --csv="$OUT/gpu_stats_bench.csv" \
  > "$OUT/gpu_stats_bench.txt" 2>&1 || rc=1
if python3 -c "import torch; assert torch.cuda.is_available()" > /dev/null 2>&1; then
  python3 scripts/gpu_torch_baseline.py --sizes-gb="$SIZES_GB" --csv="$OUT/torch_baseline.csv" \
    > "$OUT/torch_baseline.txt" 2>&1 || rc=1
else
  echo "torch with CUDA not available: baseline skipped" > "$OUT/torch_baseline.txt"
fi
cat "$OUT/ctest.txt" | tail -5
cat "$OUT/gpu_stats_bench.txt" "$OUT/torch_baseline.txt"
exit $rc
