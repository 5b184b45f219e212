# Shared by the parts of scripts/deploy_check.sh: the result lines, podman
# with this check's engine config, waiting without sleeping blind.
# Sourced, not run.

DC_T0=$(date +%s)
DC_RESULTS=()
DC_FAILED=0

say() { echo "[deploy_check +$(( $(date +%s) - DC_T0 ))s] $*"; }
# A check's result with its figure; every result is repeated in the summary.
pass() { DC_RESULTS+=("PASS  $1: $2"); say "PASS $1: $2"; }
fail() { DC_RESULTS+=("FAIL  $1: $2"); say "FAIL $1: $2"; DC_FAILED=1; }
# Setup that cannot go on (no podman, no base image, a build error): loud.
die() { say "ERROR: $*"; DC_RESULTS+=("ERROR $*"); summary; exit 1; }

summary() {
  echo
  echo "deploy_check summary ($(( $(date +%s) - DC_T0 )) s):"
  local r
  for r in "${DC_RESULTS[@]}"; do echo "  $r"; done
}

# podman (CONTAINERS_CONF: runc, cgroupfs; setup.sh). Without systemd it
# cannot schedule the image's periodic health checks and says so on every
# run of a container that has one: that line is dropped (check 1 runs the
# health check itself).
pm() { podman "$@" 2> >(grep -v 'unable to get systemd connection' >&2); }

# ms since the epoch.
now_ms() { date +%s%3N; }

# wait_for SECONDS COMMAND...: run COMMAND every 0.2 s until it succeeds;
# 1 when it never did.
wait_for() {
  local limit=$1; shift
  local end=$(( $(date +%s) + limit ))
  until "$@" >/dev/null 2>&1; do
    [ "$(date +%s)" -lt "$end" ] || return 1
    sleep 0.2
  done
}

# json_get FIELD < JSON: a top-level field of one JSON object (python3).
json_get() {
  python3 -c 'import json,sys; v=json.load(sys.stdin).get(sys.argv[1]); print(json.dumps(v) if isinstance(v,(dict,list,bool)) or v is None else v)' "$1"
}
