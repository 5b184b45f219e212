# scripts/deploy_check.sh, check 2: the sidecar layout
# (deploy/kubernetes/sidecar-pod.yaml) as a podman pod. gnmrd with the
# config gnmrd-sidecar-config and a trainer (gnmr-synth) share /run/gnmr
# through a tmpfs volume (the emptyDir, medium Memory); the trainer runs as
# another user with the supplementary group 10001 (supplementalGroups) and
# talks over the Unix socket. Mid-run gnmrd gets SIGKILL and is started
# again on the same volumes (what the kubelet does for a crashed
# container). Checked as in tests/client/client_gnmrd_test.cc and
# tests/daemon/restart_test.cc: the trainer keeps stepping through the
# outage and reconnects, no decision is rejected, the job is restored from
# its snapshot in a new generation, a unit's recovery lock held before
# the kill holds after it with the same end step. Sourced.

SIDE_JOB=dc-side
SIDE_STEPS=600  # 24 s at 40 ms a step: the outage is well inside the run
SIDE_SPIKE=150

# side_ctl ARGS...: gnmrctl inside the gnmrd container, on the socket
# (kubectl exec -c gnmrd ... gnmrctl).
side_ctl() { pm exec gnmr-dc-side-gnmrd /usr/local/bin/gnmrctl "$@"; }

# The recovery set as "unit since until" lines.
side_recovery() {
  side_ctl units --job "$SIDE_JOB" --state recovery --json 2>/dev/null | python3 -c '
import json, sys
for u in json.load(sys.stdin).get("units", []):
    print(u["name"], u["since"], u["until"])'
}

side_last_step() {
  side_ctl jobs --job "$SIDE_JOB" --json 2>/dev/null |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["jobs"][0]["last_step"])'
}

side_step_at_least() { local s; s=$(side_last_step) && [ "$s" -ge "$1" ]; }
side_has_recovery() { [ -n "$(side_recovery)" ]; }
side_job_exists() { side_last_step >/dev/null; }

check_sidecar() {
  local dir=$DC_WORK/sidecar pod=gnmr-dc-pod gnmrd=gnmr-dc-side-gnmrd trainer=gnmr-dc-side-trainer
  rm -rf "$dir" && mkdir -p "$dir"
  configmap_config gnmrd-sidecar-config >"$dir/gnmrd.yaml" || { fail "2 config" "configmap.yaml"; return 1; }
  pm volume create --opt type=tmpfs --opt device=tmpfs gnmr-dc-side-run >/dev/null &&
    pm volume create gnmr-dc-side-state >/dev/null &&
    pm pod create --name "$pod" >/dev/null ||
    { fail "2 pod" "podman pod/volume create failed"; return 1; }
  pm run -d --pod "$pod" --name "$gnmrd" --read-only --cap-drop ALL \
    --security-opt no-new-privileges --user 10001:10001 \
    -v gnmr-dc-side-run:/run/gnmr -v gnmr-dc-side-state:/var/lib/gnmr \
    -v "$dir/gnmrd.yaml:/etc/gnmr/gnmrd.yaml:ro" \
    "$DC_IMAGE" --config /etc/gnmr/gnmrd.yaml >/dev/null &&
    wait_for 30 side_ctl status --timeout 1 ||
    { fail "2 gnmrd" "did not start: $(pm logs "$gnmrd" 2>&1 | tail -3)"; return 1; }
  pm run -d --pod "$pod" --name "$trainer" --user 20001:20001 --group-add 10001 \
    --cap-drop ALL --security-opt no-new-privileges \
    -e GNMR_TARGET=unix:/run/gnmr/gnmrd.sock -v gnmr-dc-side-run:/run/gnmr \
    "$DC_SYNTH_IMAGE" --target unix:/run/gnmr/gnmrd.sock --job "$SIDE_JOB" --rank 0 \
    --world-size 1 --steps "$SIDE_STEPS" --step-ms 40 --spike "$SIDE_SPIKE:3:50" --json \
    >/dev/null || { fail "2 trainer" "podman run failed"; return 1; }
  wait_for 30 side_job_exists ||
    { fail "2 trainer" "never registered: $(pm logs "$trainer" 2>&1 | tail -3)"; return 1; }
  # A lock longer than the outage, so that it is in force across it (set
  # over the socket, as an operator would with kubectl exec).
  side_ctl config set --job "$SIDE_JOB" --set lock_steps=1000 >"$dir/config-set.txt" 2>&1 ||
    { fail "2 config set" "$(cat "$dir/config-set.txt")"; return 1; }
  wait_for 60 side_has_recovery ||
    { fail "2 admission" "the spike at step $SIDE_SPIKE was not admitted"; return 1; }
  local before after kill_step
  before=$(side_recovery)
  # The admission's snapshot is written with the recovery change; a few
  # steps more, then SIGKILL mid-run.
  wait_for 30 side_step_at_least $(( SIDE_SPIKE + 30 ))
  kill_step=$(side_last_step)
  pm kill --signal KILL "$gnmrd" >/dev/null ||
    { fail "2 kill" "podman kill failed"; return 1; }
  pm wait "$gnmrd" >/dev/null 2>&1
  sleep 1  # the trainer steps on without a daemon
  local t_start
  t_start=$(now_ms)
  pm start "$gnmrd" >/dev/null && wait_for 30 side_ctl status --timeout 1 ||
    { fail "2 restart" "gnmrd did not come back: $(pm logs "$gnmrd" 2>&1 | tail -3)"; return 1; }
  local back_ms=$(( $(now_ms) - t_start ))
  after=$(side_recovery)
  local gen_event
  gen_event=$(side_ctl events --job "$SIDE_JOB" --json 2>/dev/null | grep '"kind":"generation"' | tail -1)
  if ! timeout 120 podman wait "$trainer" >"$dir/trainer.rc" 2>&1; then
    fail "2 trainer" "still running 120 s after the restart"; return 1
  fi
  pm logs "$trainer" >"$dir/trainer.out" 2>"$dir/trainer.err"
  grep '^{"rank"' "$dir/trainer.out" >"$dir/trainer.json"
  pm logs "$gnmrd" >"$dir/gnmrd.log" 2>&1

  python3 - "$dir/trainer.json" "$(cat "$dir/trainer.rc")" "$SIDE_STEPS" "$kill_step" \
    "$before" "$after" "$gen_event" >"$dir/verdict.txt" <<'PY'
import json, sys
path, rc, steps, kill_step, before, after, gen_event = sys.argv[1:]
steps, kill_step = int(steps), int(kill_step)
problems, facts = [], []
try:
    r = json.load(open(path))
except Exception as e:
    print(f"FAIL no JSON summary from the trainer ({e})"); sys.exit(0)
if rc.strip() != "0": problems.append(f"trainer exit {rc.strip()}")
if r["steps"] != steps: problems.append(f"{r['steps']} of {steps} steps")
if r["reconnects"] < 1: problems.append("no reconnect")
if r["decisions_rejected"] != 0: problems.append(f"{r['decisions_rejected']} decisions rejected")
applied = [a["step"] for a in r["applied"]]
gaps = [(a, b) for a, b in zip(applied, applied[1:]) if b - a > 1 and a >= kill_step - 5]
outage = gaps[0] if gaps else None
if not outage: problems.append("no outage seen in the applied plans")
else:
    a, b = outage
    facts.append(f"steps {a + 1}..{b - 1} ran while gnmrd was down ({r['missed_decisions']} missed decisions)")
if not applied or applied[-1] < steps - 5: problems.append(f"no decisions at the end (last {applied[-1:]})")
else: facts.append(f"decisions again up to step {applied[-1]}, {r['reconnects']} reconnect(s), 0 rejected")
if not before.strip(): problems.append("nothing in recovery before the kill")
elif before != after: problems.append(f"recovery before the kill {before!r}, after {after!r}")
else:
    name, since, until = before.split()[:3]
    facts.append(f"lock of {name} (steps {since}..{until}) held across the restart")
# Restored from a snapshot taken before the kill, and at least the one of
# the recovery change (as restart_test.cc: the last set change survives).
try:
    g = json.loads(gen_event)
    restored = int(g["observed_step"])
    admitted = int(before.split()[1]) - 1 if before.strip() else None
    if admitted is None or not outage or not admitted <= restored < outage[1]:
        problems.append(f"restored at step {restored}: not between the admission "
                        f"({admitted}) and the end of the outage ({outage and outage[1]})")
    facts.append(f"{g['detail'].split(':')[0]}, restored at step {restored} "
                 f"(admission at {admitted}, killed near {kill_step})")
except (ValueError, KeyError, TypeError) as e:
    problems.append(f"no generation event after the restart ({gen_event!r}: {e})")
print(("FAIL " + "; ".join(problems)) if problems else ("PASS " + "; ".join(facts)))
PY
  local verdict
  verdict=$(cat "$dir/verdict.txt")
  if [[ $verdict == PASS* ]]; then
    pass "2 sidecar SIGKILL + restart" "${verdict#PASS }; gnmrd answered ${back_ms} ms after podman start"
  else
    fail "2 sidecar SIGKILL + restart" "${verdict#FAIL }"
  fi
}
