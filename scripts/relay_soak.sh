#!/usr/bin/env bash
# The 20-minute soak of the relay path (tests/soak/relay_soak.py): gnmrd,
# two gnmr-relay and nine gnmr-synth ranks as processes; kill -9 of gnmrd
# and of the relays, reporter stops (SIGSTOP/SIGCONT), a rank in a crash
# loop; every honest rank's plans compared step by step, every miss
# counted, RSS flat in the fault-free tail. Builds what it needs into
# $BUILD_DIR (default ./build), prints the report and keeps a copy in
# $BUILD_DIR/relay-soak-report.md. Extra arguments go to relay_soak.py
# (e.g. --duration 300; relay_soak.py --help).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
if [ ! -f "$BUILD_DIR/build.ninja" ]; then
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
fi
cmake --build "$BUILD_DIR" -j "${JOBS:-$(nproc)}" --target gnmrd gnmr-relay gnmr-synth gnmrctl
/usr/bin/python3 tests/soak/relay_soak.py --gnmrd "$BUILD_DIR/bin/gnmrd" \
  --relay "$BUILD_DIR/bin/gnmr-relay" --synth "$BUILD_DIR/examples/gnmr_synth/gnmr-synth" \
  --gnmrctl "$BUILD_DIR/bin/gnmrctl" --duration 1200 \
  --report "$BUILD_DIR/relay-soak-report.md" "$@"
