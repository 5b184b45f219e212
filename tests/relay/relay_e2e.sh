#!/usr/bin/env bash
# End to end through gnmr-relay with real processes (docs/relay.md): gnmrd,
# one gnmr-relay, and 4 gnmr-synth ranks (the real client library) whose
# target is the relay. Midway the relay is killed and started again: the
# ranks must fail open, finish every step, reconnect through the new relay,
# and apply identical decisions on every step all of them applied
# (scripts/demo_summary.py checks it).
#
# Usage: relay_e2e.sh SOURCE_DIR GNMRD GNMR_RELAY GNMR_SYNTH GNMRCTL
set -euo pipefail
src=$1 gnmrd=$2 relay=$3 synth=$4 gnmrctl=$5
work=$(mktemp -d /tmp/gnmr-relay-e2e-XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
fail() {
  echo "relay_e2e: $*" >&2
  for f in "$work"/*.log; do echo "== $f" >&2; tail -n 20 "$f" >&2; done
  exit 1
}

"$gnmrd" --listen "unix:$work/gnmrd.sock" --state-dir "$work/state" --metrics off \
  --log-level info > "$work/gnmrd.log" 2>&1 &
gnmrd_pid=$!
pids+=("$gnmrd_pid")
for _ in $(seq 100); do
  "$gnmrctl" status --target "unix:$work/gnmrd.sock" > /dev/null 2>&1 && break
  sleep 0.05
done
start_relay() {
  "$relay" --listen "unix:$work/relay.sock" --upstream "unix:$work/gnmrd.sock" \
    >> "$work/relay.log" 2>&1 &
  relay_pid=$!
  pids+=("$relay_pid")
  for _ in $(seq 100); do [ -S "$work/relay.sock" ] && return; sleep 0.05; done
  fail "the relay did not start"
}
start_relay

steps=400
ranks=()
for rank in 0 1 2 3; do
  "$synth" --target "unix:$work/relay.sock" --job e2e --rank "$rank" --world-size 4 \
    --steps "$steps" --units 16 --spike 60:3:20 --spike 320:5:30 --step-ms 5 --json \
    > "$work/rank$rank.json" 2> "$work/rank$rank.log" &
  ranks+=($!)
  pids+=($!)
done

# Midway (after ~1 s of ~2 s) the relay dies and comes back.
sleep 1
kill -KILL "$relay_pid"
wait "$relay_pid" 2>/dev/null || true
sleep 0.3
start_relay

for p in "${ranks[@]}"; do wait "$p" || fail "a rank exited with $?"; done

"$gnmrctl" jobs --target "unix:$work/gnmrd.sock" --json > "$work/jobs.json"
/usr/bin/python3 "$src/scripts/demo_summary.py" "$work/jobs.json" "$work"/rank{0,1,2,3}.json \
  > "$work/summary.txt" || fail "ranks applied different decisions: $(cat "$work/summary.txt")"
cat "$work/summary.txt"

# Every rank ran every step, and the decisions after the restart came
# through the new relay: the ranks reconnected.
/usr/bin/python3 - "$steps" "$work"/rank{0,1,2,3}.json <<'EOF' || fail "see above"
import json, sys
steps = int(sys.argv[1])
for path in sys.argv[2:]:
    r = json.load(open(path))
    applied = {a["step"] for a in r.get("applied", [])}
    late = [s for s in applied if s >= steps - 50]
    print(f"rank {r['rank']}: {r['steps']} steps, {len(applied)} applied, "
          f"{len(late)} of the last 50 steps applied")
    assert r["steps"] == steps, f"rank {r['rank']} ran {r['steps']} of {steps} steps"
    assert len(late) >= 40, f"rank {r['rank']}: no decisions after the relay restart"
EOF
grep -q "gnmr-relay listening" "$work/relay.log" || fail "no relay log"
echo "relay_e2e: OK"
