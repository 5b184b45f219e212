#!/usr/bin/env bash
# The 10-minute soak test of gnmrd (docs/perf.md, "gnmrd soak"): 256 simulated
# ranks x 1,024 units against the real gnmrd, kill -9 and restart every
# 90 s (none in the last third, where memory and fds must stay flat), rank
# churn and bad clients. Builds what it needs into $BUILD_DIR (default
# ./build), prints the report and keeps a copy in $BUILD_DIR/soak-report.md.
# Exit 0: every check passed. Extra arguments go to gnmr_soak (e.g.
# --duration 120; gnmr_soak --help).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
if [ ! -f "$BUILD_DIR/build.ninja" ]; then
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
fi
cmake --build "$BUILD_DIR" -j "${JOBS:-$(nproc)}" --target gnmrd gnmr_soak
set -o pipefail
"$BUILD_DIR/tests/soak/gnmr_soak" --gnmrd "$BUILD_DIR/bin/gnmrd" --duration 600 \
    --ranks 256 --units 1024 --rate 10 --restart-every 90 --churn-every 50 --churn-ranks 8 \
    "$@" | tee "$BUILD_DIR/soak-report.md"
