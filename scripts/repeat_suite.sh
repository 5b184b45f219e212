#!/usr/bin/env bash
# Runs ctest N times in a row while two busy loops load the CPUs, to find
# tests that depend on timing (docs/architecture.md, "Tests and time").
#
#   scripts/repeat_suite.sh N [ctest arguments...]
#
# Uses ./build (BUILD_DIR overrides). The load is `stress -c <cores>` when
# stress is installed, else one shell busy loop per core. Prints one line per
# run (tests, failures, seconds) and the failed tests' names; logs of every
# run stay in $BUILD_DIR/repeat-logs. Exits 1 if any run failed.
set -uo pipefail
cd "$(dirname "$0")/.."
runs=${1:?usage: scripts/repeat_suite.sh N [ctest arguments...]}
shift
build=${BUILD_DIR:-build}
logs=$build/repeat-logs
mkdir -p "$logs"
cores=$(nproc)
load=()
if command -v stress >/dev/null; then
  stress -c "$cores" >/dev/null 2>&1 &
  load+=($!)
else
  for _ in $(seq "$cores"); do
    (while :; do :; done) &
    load+=($!)
  done
fi
trap 'kill "${load[@]}" 2>/dev/null; pkill -P "${load[0]}" 2>/dev/null' EXIT
echo "repeat_suite: $runs runs of ctest $* in $build, load: ${#load[@]} job(s) on $cores cores"
failed_runs=0
for i in $(seq "$runs"); do
  start=$(date +%s)
  log=$logs/run-$i.log
  (cd "$build" && ctest --output-on-failure -j "$cores" --timeout 600 "$@") >"$log" 2>&1
  rc=$?
  took=$(( $(date +%s) - start ))
  summary=$(grep -E "tests passed|tests failed" "$log" | tail -1)
  echo "run $i: rc=$rc ${summary:-no summary} (${took} s)"
  if [ "$rc" -ne 0 ]; then
    failed_runs=$((failed_runs + 1))
    sed -n '/The following tests FAILED/,$p' "$log"
  fi
done
echo "repeat_suite: $failed_runs of $runs runs failed"
[ "$failed_runs" -eq 0 ]
