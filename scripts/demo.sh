#!/usr/bin/env bash
# The main job: installs what is missing, builds, starts gnmrd on a private
# Unix socket, runs a 4-rank synthetic training job against it (gnmr-synth,
# one process per rank, with injected gradient spikes and a NaN), and prints
# what the daemon decided and whether every rank applied the same decisions.
# Then replays the bundled stats trace offline with `gnmrctl replay`.
#
# Environment: STEPS (default 300), BUILD_DIR (default build).
set -euo pipefail
cd "$(dirname "$0")/.."
GNMR_NO_VENV=1 scripts/install_deps.sh  # the demo needs no PyTorch: no venv
scripts/build.sh
BUILD_DIR=${BUILD_DIR:-build}
STEPS=${STEPS:-300}
GNMRD="$BUILD_DIR/daemon/gnmrd/gnmrd"
SYNTH="$BUILD_DIR/examples/gnmr_synth/gnmr-synth"
GNMRCTL="$BUILD_DIR/tools/gnmrctl/gnmrctl"

work=$(mktemp -d /tmp/gnmr-demo-XXXXXX)
target="unix:$work/gnmrd.sock"
gnmrd_pid=""
cleanup() {
  if [ -n "$gnmrd_pid" ] && kill -0 "$gnmrd_pid" 2>/dev/null; then
    kill -TERM "$gnmrd_pid"; wait "$gnmrd_pid" || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT

echo
echo "== gnmrd on $target (state in $work/state, metrics off)"
"$GNMRD" --listen "$target" --state-dir "$work/state" --metrics off --log-level warn \
  2> "$work/gnmrd.log" &
gnmrd_pid=$!
for _ in $(seq 50); do
  "$GNMRCTL" status --target "$target" > /dev/null 2>&1 && break
  sleep 0.1
done

echo "== 4 ranks x $STEPS steps (gnmr-synth, started 100 ms apart; spikes at 120 and 150, a NaN at 170)"
pids=()
for rank in 0 1 2 3; do
  # Ranks start 100 ms apart, as a real job's ranks do.
  [ "$rank" -gt 0 ] && sleep 0.1
  "$SYNTH" --target "$target" --job demo --rank "$rank" --world-size 4 --steps "$STEPS" \
    --units 16 --spike 120:3:20 --spike 150:layers.2.mlp.fc2:50 --nan 170:1 \
    --step-ms 5 --json > "$work/rank$rank.json" 2> "$work/rank$rank.log" &
  pids+=($!)
done
for pid in "${pids[@]}"; do wait "$pid"; done

echo
echo "== gnmrctl jobs"
"$GNMRCTL" jobs --target "$target"
echo
echo "== gnmrctl events --job demo"
"$GNMRCTL" events --job demo --target "$target"
echo
"$GNMRCTL" jobs --target "$target" --json > "$work/jobs.json"
/usr/bin/python3 scripts/demo_summary.py "$work/jobs.json" "$work"/rank{0,1,2,3}.json

echo
echo "== offline: gnmrctl replay --trace examples/traces/example.csv --config examples/configs/replay.yaml"
"$GNMRCTL" replay --trace examples/traces/example.csv --config examples/configs/replay.yaml \
  --out "$work/example-decisions.jsonl"
echo "first decisions:"
head -n 3 "$work/example-decisions.jsonl"
