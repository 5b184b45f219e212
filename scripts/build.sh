#!/usr/bin/env bash
# Configures and builds GNMR into ./build (RelWithDebInfo, Ninja).
# Extra arguments go to the CMake configure step, e.g. -DGNMR_CUDA=OFF.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" >/dev/null
cmake --build "$BUILD_DIR" -j "$(nproc)"
