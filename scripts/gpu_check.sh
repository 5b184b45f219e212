#!/usr/bin/env bash
# GPU checks for the CUDA statistics path, one command (needs an NVIDIA GPU
# + driver; docs/perf.md "GPU"): the GPU tests (GPU == CPU bit identity,
# vector/scalar/byte paths, graph capture and replay labelling, two-stream
# ordering, no host waits, virtual-memory and >2^31-element tensors,
# context and error-state hygiene), the item-kernel arithmetic on the CPU,
# the block-scaled kernels (MXFP8/MXFP4/NVFP4/FP8 block == the CPU path),
# the client on the GPU against gnmrd with CUPTI's overhead_ratio, then the
# per-dtype benchmarks against a device copy and, when torch with CUDA is
# importable, the torch baseline. Everything goes to ${OUT:-gpu-results}/;
# the summary is printed last. A suite whose every test skipped is reported
# SKIPPED, never "ok", and on a machine with a GPU that fails the run.
#
# Binaries: those carried in .gpu-carry/bin (scripts/gpu_prepare_carry.sh,
# run beforehand where the dependencies are: the lent GPU machines have
# CUDA, CMake and PyTorch but no gRPC/protobuf/GoogleTest and no network),
# else built here: the full build in build-gpucheck, or the kernels-only
# build (GNMR_KERNELS_ONLY, GoogleTest from .gpu-carry/googletest), whose
# client suites come from .gpu-carry/bin or are reported SKIPPED.
#
#   scripts/gpu_check.sh                  # 4 GB per benchmark, every dtype
#   SIZES_GB=1,4,16 scripts/gpu_check.sh  # more sizes
#   GPU_CHECK_MODE=build scripts/gpu_check.sh         # build, don't use carried ones
#   GPU_CHECK_MODE=kernels-only scripts/gpu_check.sh  # the kernels-only build
set -uo pipefail
cd "$(dirname "$0")/.."
case "${1:-}" in
  -h|--help) sed -n '2,24p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
esac
OUT=${OUT:-gpu-results}
SIZES_GB=${SIZES_GB:-4}
BENCH_DTYPES=${BENCH_DTYPES:-bf16 fp32 fp16 fp8_e4m3fn fp8_e5m2 mixed}
SUITE_TIMEOUT=${SUITE_TIMEOUT:-300}
BUILD=${BUILD_DIR:-build-gpucheck}
CARRY=${CARRY_DIR:-.gpu-carry}
mkdir -p "$OUT"
rc=0
t0=$(date +%s)
step() { echo "[gpu_check +$(( $(date +%s) - t0 ))s] $*"; }
nvidia-smi > "$OUT/nvidia-smi.txt" 2>&1 || true
gpu_present=no
nvidia-smi -L 2>/dev/null | grep -q '^GPU ' && gpu_present=yes
step "GPU present: $gpu_present"
libs="$PWD/$CARRY/lib:/usr/local/cuda/lib64:/usr/local/cuda/extras/CUPTI/lib64"
export LD_LIBRARY_PATH="$libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

# -------------------------------------------------------------- binaries
declare -A bin
kernel_bins=(kernels_gpu_stats_test kernels_gpu_host_test kernels_cpu_test gpu_stats_bench
            kernels_gpu_block_test kernels_gpu_block_host_test gpu_block_stats_bench)
client_bins=(client_gpu_test client_gpu_path_test client_cupti_test)
mode_wanted=${GPU_CHECK_MODE:-auto}  # auto, build, kernels-only
if [[ $mode_wanted == auto && -x "$CARRY/bin/kernels_gpu_stats_test" ]]; then
  mode=carried
  for b in "${kernel_bins[@]}" "${client_bins[@]}" gnmrd; do bin[$b]="$CARRY/bin/$b"; done
else
  if [[ $mode_wanted != kernels-only ]] &&
    cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DGNMR_CUDA=ON \
      > "$OUT/configure.log" 2>&1; then
    mode=full
    targets=("${kernel_bins[@]}" "${client_bins[@]}" gnmrd)
  else
    mode=kernels-only
    BUILD=${BUILD}-kernels
    gtest_opt=()
    [[ -d "$CARRY/googletest" ]] && gtest_opt=(-DGNMR_GTEST_SOURCE_DIR="$PWD/$CARRY/googletest")
    cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DGNMR_CUDA=ON \
      -DGNMR_KERNELS_ONLY=ON "${gtest_opt[@]}" >> "$OUT/configure.log" 2>&1 ||
      { echo "configure failed: $OUT/configure.log"; tail -20 "$OUT/configure.log"; exit 1; }
    targets=("${kernel_bins[@]}")
  fi
  step "building ($mode): ${targets[*]}"
  cmake --build "$BUILD" -j "$(nproc)" --target "${targets[@]}" > "$OUT/build.log" 2>&1 ||
    { echo "build failed: $OUT/build.log"; tail -30 "$OUT/build.log"; exit 1; }
  for b in kernels_gpu_stats_test kernels_gpu_host_test kernels_cpu_test kernels_gpu_block_test \
    kernels_gpu_block_host_test; do
    bin[$b]="$BUILD/tests/kernels/$b"
  done
  bin[gpu_stats_bench]="$BUILD/bench/gpu_stats_bench"
  bin[gpu_block_stats_bench]="$BUILD/bench/gpu_block_stats_bench"
  if [[ $mode == full ]]; then
    for b in "${client_bins[@]}"; do bin[$b]="$BUILD/tests/client/$b"; done
    bin[gnmrd]="$BUILD/bin/gnmrd"
  elif [[ -x "$CARRY/bin/gnmrd" ]]; then  # the client suites need gRPC: carried ones
    for b in "${client_bins[@]}" gnmrd; do bin[$b]="$CARRY/bin/$b"; done
  fi
fi
step "binaries: $mode"

# ----------------------------------------------------------------- tests
summary=()
# suite NAME KIND: KIND gpu (must run on a GPU machine) or cpu.
suite() {
  local name=$1 kind=$2 exe=${bin[$1]:-} log="$OUT/$1.txt" status passed skipped failed
  if [[ -z $exe || ! -x $exe ]]; then
    status="SKIPPED (not built in $mode mode)"
    passed=0 skipped=0 failed=0
    [[ $gpu_present == yes ]] && rc=1
  else
    GNMRD_PATH="${bin[gnmrd]:-}" timeout --signal=KILL "$SUITE_TIMEOUT" "$exe" > "$log" 2>&1
    local code=$?
    passed=$(grep -oE '^\[  PASSED  \] [0-9]+' "$log" | grep -oE '[0-9]+$' || echo 0)
    skipped=$(grep -oE '^\[  SKIPPED \] [0-9]+ tests?,' "$log" | grep -oE '[0-9]+' || echo 0)
    failed=$(grep -oE '^\[  FAILED  \] [0-9]+ tests?,' "$log" | grep -oE '[0-9]+' || echo 0)
    local names
    names=$(grep -E '^\[  SKIPPED \] [A-Za-z]' "$log" | sed -E 's/^\[  SKIPPED \] //; s/ \(.*//' |
      sort -u | head -4 | tr '\n' ' ')
    if (( code != 0 )); then
      status="FAILED (exit $code)"
      rc=1
    elif (( passed == 0 && skipped > 0 )); then
      status="SKIPPED (all $skipped)"
      [[ $kind == gpu && $gpu_present == yes ]] && { status+=" on a GPU machine"; rc=1; }
    elif (( skipped > 0 )) && [[ $kind == gpu && $gpu_present == no ]]; then
      status="SKIPPED (no GPU: $skipped skipped, $passed ran)"
    elif (( skipped > 0 )); then
      status="ok, $skipped skipped: $names"
    else
      status=ok
    fi
  fi
  summary+=("$(printf '%-24s %6s %7s %6s  %s' "$name" "$passed" "$skipped" "$failed" "$status")")
  step "$name: $status"
}
suite kernels_gpu_host_test cpu
suite kernels_cpu_test cpu
suite kernels_gpu_stats_test gpu
suite kernels_gpu_block_host_test cpu
suite kernels_gpu_block_test gpu
suite client_gpu_test gpu
suite client_gpu_path_test cpu
suite client_cupti_test gpu

# ------------------------------------------------------------ benchmarks
bench_rows=()
rm -f "$OUT/gpu_stats_bench.csv" "$OUT/torch_baseline.csv"
: > "$OUT/gpu_stats_bench.txt"
bench() {  # bench DTYPE OFFSET
  local exe=${bin[gpu_stats_bench]:-}
  if [[ -z $exe || ! -x $exe ]]; then bench_rows+=("gpu_stats_bench $1: SKIPPED (not built)"); return; fi
  timeout --signal=KILL "$SUITE_TIMEOUT" "$exe" --sizes-gb="$SIZES_GB" --dtype="$1" \
    --offset="$2" --csv="$OUT/gpu_stats_bench.csv" >> "$OUT/gpu_stats_bench.txt" 2>&1
  local code=$?
  if (( code == 0 )); then
    bench_rows+=("gpu_stats_bench $1 offset $2: ok")
  elif (( code == 3 )) && [[ $gpu_present == no ]]; then
    bench_rows+=("gpu_stats_bench $1 offset $2: SKIPPED (no CUDA device)")
  else
    bench_rows+=("gpu_stats_bench $1 offset $2: FAILED (exit $code, see gpu_stats_bench.txt)")
    rc=1
  fi
}
step "benchmarks: ${BENCH_DTYPES} at $SIZES_GB GB, and bf16 off the vector boundary"
for d in $BENCH_DTYPES; do bench "$d" 0; done
bench bf16 2
# Block-scaled formats (GpuBlockStats), 1 GB of codes per format and layout.
: > "$OUT/gpu_block_stats_bench.txt"
for layout in rowwise columnwise; do
  exe=${bin[gpu_block_stats_bench]:-}
  if [[ -z $exe || ! -x $exe ]]; then bench_rows+=("gpu_block_stats_bench: SKIPPED (not built)"); break; fi
  timeout --signal=KILL "$SUITE_TIMEOUT" "$exe" --gb=1 --layout="$layout" \
    >> "$OUT/gpu_block_stats_bench.txt" 2>&1
  code=$?
  if (( code == 0 )); then
    bench_rows+=("gpu_block_stats_bench $layout: ok")
  elif (( code == 3 )) && [[ $gpu_present == no ]]; then
    bench_rows+=("gpu_block_stats_bench $layout: SKIPPED (no CUDA device)")
  else
    bench_rows+=("gpu_block_stats_bench $layout: FAILED (exit $code)")
    rc=1
  fi
done
if python3 -c "import torch; assert torch.cuda.is_available()" > /dev/null 2>&1; then
  step "torch baseline"
  : > "$OUT/torch_baseline.txt"
  for d in bf16 fp32 fp16 mixed; do
    python3 scripts/gpu_torch_baseline.py --sizes-gb="$SIZES_GB" --dtype="$d" \
      --csv="$OUT/torch_baseline.csv" >> "$OUT/torch_baseline.txt" 2>&1 ||
      { bench_rows+=("torch baseline $d: FAILED"); rc=1; }
  done
else
  echo "torch with CUDA not available: baseline SKIPPED" > "$OUT/torch_baseline.txt"
  bench_rows+=("torch baseline: SKIPPED (no torch with CUDA)")
fi

# --------------------------------------------------------------- summary
step "done (exit $rc)"
[[ $gpu_present == no ]] && echo "NO GPU on this machine: nothing above ran on a device, nothing was measured"
echo
printf '%-24s %6s %7s %6s  %s\n' suite passed skipped failed status
printf '%s\n' "${summary[@]}"
printf '%s\n' "${bench_rows[@]}"
echo
cat "$OUT/gpu_stats_bench.txt" "$OUT/gpu_block_stats_bench.txt" "$OUT/torch_baseline.txt"
exit $rc
