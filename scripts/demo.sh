#!/usr/bin/env bash
# The main job: installs what is missing, builds, starts gnmrd on a private
# Unix socket, runs a 4-rank synthetic training job against it (gnmr-synth,
# one process per rank, with injected gradient spikes and a NaN), and prints
# what the daemon decided and whether every rank applied the same decisions.
# Then replays the bundled stats trace offline with `gnmrctl replay`.
#
# It installs and builds only what it runs (gnmrd, gnmrctl, gnmr-synth; no
# tests, benchmarks, CUDA kernels or Python module) in its own folder, so
# a fresh clone gets to the job in minutes, and prints how long each part
# took. The test command (scripts/test.sh) installs and builds the rest.
#
# Environment: STEPS (default 300), BUILD_DIR (default build-demo).
set -euo pipefail
cd "$(dirname "$0")/.."
t_start=$(date +%s)
scripts/install_deps.sh --demo
t_installed=$(date +%s)
BUILD_DIR=${BUILD_DIR:-build-demo}
BUILD_DIR=$BUILD_DIR GNMR_BUILD_TARGETS="gnmrd gnmrctl gnmr-synth" \
  scripts/build.sh -DGNMR_BUILD_TESTS=OFF -DGNMR_BUILD_BENCH=OFF -DGNMR_CUDA=OFF
t_built=$(date +%s)
STEPS=${STEPS:-300}
GNMRD="$BUILD_DIR/bin/gnmrd"
SYNTH="$BUILD_DIR/examples/gnmr_synth/gnmr-synth"
GNMRCTL="$BUILD_DIR/bin/gnmrctl"

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

echo "== 4 ranks x $STEPS steps (gnmr-synth, started 20 ms apart; spikes at 120 and 150, a NaN at 170)"
pids=()
for rank in 0 1 2 3; do
  # Ranks start 20 ms apart (4 steps), as a real job's ranks do. Further
  # apart, these unsynchronized ranks run that many steps behind the job,
  # which a trainer's collectives never let happen, and a standby more
  # than 20 steps behind is counted without decisions (docs/safety.md).
  [ "$rank" -gt 0 ] && sleep 0.02
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

t_end=$(date +%s)
echo
echo "== the main job took $(( (t_end - t_start) / 60 )) min $(( (t_end - t_start) % 60 )) s:" \
  "install $(( t_installed - t_start )) s, build $(( t_built - t_installed )) s," \
  "run $(( t_end - t_built )) s"
