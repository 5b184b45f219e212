#!/usr/bin/env bash
# Long libFuzzer runs of the fuzz targets (docs/fuzzing.md, "Long runs"),
# one target at a time, under ASan + UBSan with the suite's run-time options.
#
#   scripts/fuzz_long.sh [RUNS [SECONDS [TARGET...]]]
#
# RUNS inputs per target (default 1000000) or SECONDS (default 0: no time
# limit), whichever comes first; TARGETs default to all. Needs build-asan
# (scripts/test.sh --asan, or `ninja -C build-asan <target>_fuzz`). Each
# target starts from a copy of its seeds in $FUZZ_WORK (default
# /tmp/gnmr-fuzz): the sources' corpus is only read. A crash input is left
# as $FUZZ_WORK/<target>-crash-<sha1>. Prints one summary line per target
# and exits 1 if any target failed.
set -uo pipefail
cd "$(dirname "$0")/.."

runs=${1:-1000000}
seconds=${2:-0}
shift 2 2>/dev/null || shift $#
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(trace_reader controller_config_yaml daemon_config
                                      controller_state job_sequence event_log)
work=${FUZZ_WORK:-/tmp/gnmr-fuzz}
build=${BUILD_DIR:-build-asan}
# shellcheck source=sanitizers/options.sh
source scripts/sanitizers/options.sh
# No allocation and free stacks (ASan keeps 30 frames of each by default):
# every distinct stack stays in ASan's stack depot for good, and over 10^5
# inputs the depot's lookups took half the CPU and a GiB of memory
# (event_log fell from ~500 to ~80 inputs/s; 8 frames did not help).
# Detection is the same and a report keeps the faulting access's stack; to
# see where the memory was allocated and freed, run the crash input again
# with the suite's options (docs/fuzzing.md).
export ASAN_OPTIONS="$ASAN_OPTIONS:malloc_context_size=0"

status=0
for t in "${targets[@]}"; do
  bin=$build/fuzz/${t}_fuzz
  if [ ! -x "$bin" ]; then echo "fuzz_long: $bin missing (build build-asan)" >&2; exit 2; fi
  mkdir -p "$work/$t"
  cp -n fuzz/corpus/"$t"/* "$work/$t"/
  log=$work/$t.log
  # A target's own libFuzzer flags, as its ctest smoke run has them
  # (fuzz/CMakeLists.txt FLAGS; docs/fuzzing.md, "Speed").
  flags=()
  case $t in
    job_sequence) flags=(-entropic=0) ;;
  esac
  start=$(date +%s)
  "$bin" -runs="$runs" -max_total_time="$seconds" -timeout=60 -print_final_stats=1 \
    -artifact_prefix="$work/$t-" "${flags[@]}" "$work/$t" >"$log" 2>&1
  rc=$?
  took=$(( $(date +%s) - start ))
  done_runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  speed=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1)
  echo "$t: rc=$rc runs=${done_runs:-?} seconds=$took exec/s=${speed:-?} ${cov:-cov: ?}" \
       "corpus=$(ls "$work/$t" | wc -l) log=$log"
  if [ "$rc" -ne 0 ]; then
    status=1
    grep -m3 -E "ERROR|FUZZ_CHECK|SUMMARY|Test unit written" "$log" >&2
  fi
done
exit "$status"
