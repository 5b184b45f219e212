#!/usr/bin/env bash
# The main job: installs what is missing, builds, and replays the bundled
# example trace through the GNMR controller, printing the decisions that
# changed anything and a summary.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
scripts/build.sh
BUILD_DIR=${BUILD_DIR:-build}
echo
echo "== gnmrctl replay --trace examples/traces/example.csv --config examples/configs/replay.yaml"
"$BUILD_DIR"/tools/gnmrctl/gnmrctl replay \
  --trace examples/traces/example.csv \
  --config examples/configs/replay.yaml \
  --out "$BUILD_DIR"/example-decisions.jsonl
echo
echo "== first decisions ($BUILD_DIR/example-decisions.jsonl)"
head -n 5 "$BUILD_DIR"/example-decisions.jsonl
