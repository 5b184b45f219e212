#!/usr/bin/env bash
# Prepares .gpu-carry/ for scripts/gpu_check.sh on a lent GPU machine, which
# has CUDA, CMake and PyTorch but none of the service dependencies (gRPC,
# protobuf, spdlog, prometheus-cpp, yaml-cpp, GoogleTest) and no network:
#   .gpu-carry/bin          every binary gpu_check.sh runs (the kernel and
#                           client GPU tests, the CPU math tests, the
#                           benchmark, gnmrd), built here with CUDA, stripped:
#                           no device time goes into building
#   .gpu-carry/lib          the shared libraries they need that a CUDA image
#                           may lack (everything but glibc, libstdc++, libgcc)
#   .gpu-carry/googletest   Debian's GoogleTest sources, for gpu_check.sh's
#                           fallback build there (GPU_CHECK_MODE=build)
# Run it here, then the device tool's `run` with carry [".gpu-carry"] and
# the command `OUT=$OUT scripts/gpu_check.sh`. .gpu-carry is git-ignored;
# the tool carries at most 64 MiB with the working tree (this prints the
# size).
#
#   scripts/gpu_prepare_carry.sh        # BUILD_DIR=build by default
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD_DIR:-build}
CARRY=.gpu-carry
case "${1:-}" in
  -h|--help) sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
esac
[[ -d /usr/src/googletest ]] || { echo "no /usr/src/googletest (apt-get install libgtest-dev)"; exit 1; }
targets=(kernels_gpu_stats_test kernels_gpu_host_test kernels_cpu_test gpu_stats_bench
         kernels_gpu_block_test kernels_gpu_block_host_test gpu_block_stats_bench
         client_gpu_test client_gpu_path_test client_cupti_test gnmrd)
echo "building ${targets[*]} in $BUILD (CUDA on)..."
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DGNMR_CUDA=ON > /dev/null
cmake --build "$BUILD" --target "${targets[@]}"
rm -rf "$CARRY"
mkdir -p "$CARRY/bin" "$CARRY/lib"
cp -r /usr/src/googletest "$CARRY/googletest"
for b in tests/kernels/kernels_gpu_stats_test tests/kernels/kernels_gpu_host_test \
         tests/kernels/kernels_cpu_test bench/gpu_stats_bench \
         tests/kernels/kernels_gpu_block_test tests/kernels/kernels_gpu_block_host_test \
         bench/gpu_block_stats_bench \
         tests/client/client_gpu_test tests/client/client_gpu_path_test \
         tests/client/client_cupti_test bin/gnmrd; do
  strip -o "$CARRY/bin/$(basename "$b")" "$BUILD/$b"
done
# Shared libraries, resolved here: all but the C library family and the
# compiler runtime, which any x86-64 Linux image has (newer is fine).
for b in "$CARRY"/bin/*; do
  ldd "$b" | awk '$3 ~ /^\// {print $3}'
done | sort -u | while read -r lib; do
  case "$(basename "$lib")" in
    libc.so.*|libm.so.*|libdl.so.*|libpthread.so.*|librt.so.*|libutil.so.*|ld-linux*|\
    libstdc++.so.*|libgcc_s.so.*) ;;
    *) cp -L "$lib" "$CARRY/lib/" ;;
  esac
done
du -sh "$CARRY" "$CARRY"/*
echo "ready: carry [\".gpu-carry\"] with command 'OUT=\$OUT scripts/gpu_check.sh'"
