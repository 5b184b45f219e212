#!/usr/bin/env bash
# Configures and builds GNMR into ./build (RelWithDebInfo, Ninja).
# Extra arguments go to the CMake configure step, e.g. -DGNMR_CUDA=OFF.
# GNMR_BUILD_TARGETS (space-separated) builds only those targets and what
# they need (scripts/demo.sh); unset: everything.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
# ccache, when installed (scripts/install_deps.sh installs it), makes a
# rebuild on the same machine (CI's next run, another build folder) mostly
# cache hits; a cold build costs the same. GNMR_CCACHE=0 turns it off.
launcher=()
if [ "${GNMR_CCACHE:-1}" != 0 ] && command -v ccache >/dev/null 2>&1; then
  launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache
            -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
fi
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "${launcher[@]}" "$@" >/dev/null
targets=()
for t in ${GNMR_BUILD_TARGETS:-}; do targets+=(--target "$t"); done
cmake --build "$BUILD_DIR" -j "$(nproc)" "${targets[@]}"
