#!/usr/bin/env bash
# GPU checks for the CUDA statistics path (needs an NVIDIA GPU + driver):
# builds with CUDA, runs the GPU tests (GPU == CPU bit identity, graph
# capture, pointer refresh, run-time fp8 scales, apply kernels), the client
# on the GPU against gnmrd, the stats-vs-memcpy benchmark and, when torch
# with CUDA is importable, the torch baseline. Everything goes to
# ${OUT:-gpu-results}/; a short table is printed last.
#
# Two set-ups:
# - a machine with the project's dependencies (scripts/install_deps.sh):
#   the full build in build-gpucheck;
# - a lent GPU machine (CUDA, CMake and PyTorch, no gRPC/protobuf/GoogleTest,
#   no network): the kernels-only build (GNMR_KERNELS_ONLY) with GoogleTest
#   from .gpu-carry/googletest, and the client tests and gnmrd prebuilt in
#   .gpu-carry/ (scripts/gpu_prepare_carry.sh, run beforehand where the
#   dependencies are; carry the folder along).
#
#   scripts/gpu_check.sh            # sizes 1, 4, 16 GB
#   SIZES_GB=1 scripts/gpu_check.sh # quicker
set -uo pipefail
cd "$(dirname "$0")/.."
case "${1:-}" in
  -h|--help) sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
esac
OUT=${OUT:-gpu-results}
SIZES_GB=${SIZES_GB:-1,4,16}
BUILD=${BUILD_DIR:-build-gpucheck}
CARRY=${CARRY_DIR:-.gpu-carry}
mkdir -p "$OUT"
rc=0
t0=$(date +%s)
step() { echo "[gpu_check +$(( $(date +%s) - t0 ))s] $*"; }
nvidia-smi > "$OUT/nvidia-smi.txt" 2>&1 || true
nproc=$(nproc)

step "configuring (full build first; GPU_CHECK_MODE=kernels-only skips it)"
if [[ ${GPU_CHECK_MODE:-auto} != kernels-only ]] &&
  cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DGNMR_CUDA=ON \
    > "$OUT/configure.log" 2>&1; then
  mode=full
  targets=(kernels_gpu_stats_test kernels_cpu_test gpu_stats_bench client_gpu_test
           client_gpu_path_test client_cupti_test gnmrd)
else
  mode=kernels-only
  BUILD=${BUILD}-kernels
  gtest_opt=()
  [[ -d "$CARRY/googletest" ]] && gtest_opt=(-DGNMR_GTEST_SOURCE_DIR="$PWD/$CARRY/googletest")
  step "no full build (see configure.log): kernels-only build"
  cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DGNMR_CUDA=ON \
    -DGNMR_KERNELS_ONLY=ON "${gtest_opt[@]}" >> "$OUT/configure.log" 2>&1 ||
    { echo "configure failed: $OUT/configure.log"; tail -20 "$OUT/configure.log"; exit 1; }
  targets=(kernels_gpu_stats_test kernels_cpu_test gpu_stats_bench)
fi
step "building ($mode): ${targets[*]}"
cmake --build "$BUILD" -j "$nproc" --target "${targets[@]}" > "$OUT/build.log" 2>&1 ||
  { echo "build failed: $OUT/build.log"; tail -30 "$OUT/build.log"; exit 1; }

run() {  # run NAME CMD...: output to $OUT/NAME.txt, one summary line
  local name=$1; shift
  if "$@" > "$OUT/$name.txt" 2>&1; then
    step "$name: ok ($(grep -E '^\[  (PASSED|SKIPPED) +\] [0-9]+ tests?' "$OUT/$name.txt" |
      sed -E 's/, listed below://' | tr -s ' \n' ' '))"
  else
    rc=1
    step "$name: FAILED ($(grep -E '^\[  FAILED  \]' "$OUT/$name.txt" | head -5 | tr '\n' ' '))"
  fi
}
run kernels_gpu_stats_test "$BUILD/tests/kernels/kernels_gpu_stats_test"
run kernels_cpu_test "$BUILD/tests/kernels/kernels_cpu_test"
# The client on the GPU against the real gnmrd (stream observe == CPU path,
# pointer refresh) and CUPTI overhead_ratio or its back-off.
if [[ $mode == full ]]; then
  for t in client_gpu_test client_gpu_path_test client_cupti_test; do
    run "$t" "$BUILD/tests/client/$t"
  done
elif [[ -d "$CARRY/bin" ]]; then
  libs="$PWD/$CARRY/lib:/usr/local/cuda/lib64:/usr/local/cuda/lib:/usr/local/cuda/extras/CUPTI/lib64"
  for t in client_gpu_test client_gpu_path_test client_cupti_test; do
    run "$t" env LD_LIBRARY_PATH="$libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
      GNMRD_PATH="$PWD/$CARRY/bin/gnmrd" "$CARRY/bin/$t"
  done
else
  step "client GPU tests skipped: no $CARRY/bin (scripts/gpu_prepare_carry.sh)"
  rc=1
fi
step "benchmark: sizes $SIZES_GB GB"
"$BUILD/bench/gpu_stats_bench" --sizes-gb="$SIZES_GB" --csv="$OUT/gpu_stats_bench.csv" \
  > "$OUT/gpu_stats_bench.txt" 2>&1 || rc=1
if python3 -c "import torch; assert torch.cuda.is_available()" > /dev/null 2>&1; then
  step "torch baseline"
  python3 scripts/gpu_torch_baseline.py --sizes-gb="$SIZES_GB" --csv="$OUT/torch_baseline.csv" \
    > "$OUT/torch_baseline.txt" 2>&1 || rc=1
else
  echo "torch with CUDA not available: baseline skipped" > "$OUT/torch_baseline.txt"
fi
step "done (exit $rc)"
cat "$OUT/gpu_stats_bench.txt" "$OUT/torch_baseline.txt"
exit $rc
