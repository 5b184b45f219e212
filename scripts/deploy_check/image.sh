# scripts/deploy_check.sh, checks 1 and 4: the gnmrd image as the per-job
# Kubernetes layout runs it (deploy/kubernetes/gnmrd-deployment.yaml: the
# config gnmrd-job-config from configmap.yaml, the tokens as mounted
# Secrets, read-only root, no capabilities), its TCP port published on the
# host's loopback; then its size and start-up time. Sourced.

# configmap_config NAME: the gnmrd.yaml of ConfigMap NAME in configmap.yaml.
configmap_config() {
  python3 - deploy/kubernetes/configmap.yaml "$1" <<'PY'
import sys, yaml
for d in yaml.safe_load_all(open(sys.argv[1])):
    if d and d.get("kind") == "ConfigMap" and d["metadata"]["name"] == sys.argv[2]:
        sys.stdout.write(d["data"]["gnmrd.yaml"])
        sys.exit(0)
sys.exit(f"no ConfigMap {sys.argv[2]}")
PY
}

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

random_token() { od -An -tx1 -N24 /dev/urandom | tr -d ' \n'; }

# ctl ARGS...: gnmrctl from the image, in a container on the host's network.
ctl() { pm run --rm --network host --no-healthcheck --entrypoint /usr/local/bin/gnmrctl "$DC_IMAGE" "$@"; }

# synth ARGS...: gnmr-synth (test trainer image) on the host's network.
synth_host() { pm run --rm --network host "$DC_SYNTH_IMAGE" "$@"; }

check_image() {
  local name=gnmr-dc-tcp dir=$DC_WORK/tcp
  rm -rf "$dir" && mkdir -p "$dir/admin" "$dir/jobs"
  configmap_config gnmrd-job-config >"$dir/gnmrd.yaml" || { fail "1 config" "configmap.yaml"; return 1; }
  local admin job_token port
  admin=$(random_token)
  job_token=$(random_token)
  printf '%s\n' "$admin" >"$dir/admin/token"
  printf 'dc-tcp: %s\n' "$job_token" >"$dir/jobs/tokens.yaml"
  # As a Secret with defaultMode 0440 and fsGroup 10001.
  chgrp 10001 "$dir/admin/token" "$dir/jobs/tokens.yaml"
  chmod 0440 "$dir/admin/token" "$dir/jobs/tokens.yaml"
  port=$(free_port)
  pm run -d --name "$name" --read-only --cap-drop ALL --security-opt no-new-privileges \
    -p "127.0.0.1:$port:7070" \
    -v gnmr-dc-tcp-run:/run/gnmr -v gnmr-dc-tcp-state:/var/lib/gnmr \
    -v "$dir/gnmrd.yaml:/etc/gnmr/gnmrd.yaml:ro" \
    -v "$dir/admin:/etc/gnmr/admin:ro" -v "$dir/jobs:/etc/gnmr/jobs:ro" \
    "$DC_IMAGE" >/dev/null || { fail "1 run" "podman run $DC_IMAGE failed"; return 1; }
  if ! wait_for 30 pm exec "$name" /usr/local/bin/gnmrctl status --timeout 1; then
    fail "1 start" "gnmrd did not answer on its socket in 30 s: $(pm logs "$name" 2>&1 | tail -5)"
    return 1
  fi

  # 1a. Non-root: the image's USER and gnmrd's real ids (PID 1).
  local user ids
  user=$(pm image inspect --format '{{.Config.User}}' "$DC_IMAGE")
  # Real, effective, saved and filesystem ids of PID 1 (gnmrd).
  ids=$(pm exec "$name" sh -c "awk '/^(Uid|Gid):/{print \$1, \$2, \$3, \$4, \$5}' /proc/1/status" | tr '\n' ' ')
  if [ "$user" = "10001:10001" ] && [ "$ids" = "Uid: 10001 10001 10001 10001 Gid: 10001 10001 10001 10001 " ]; then
    pass "1a non-root" "USER $user; gnmrd (PID 1) runs as ${ids% }, read-only root, no capabilities"
  else
    fail "1a non-root" "USER '$user', gnmrd $ids"
  fi

  # 1b. The image's HEALTHCHECK (kept by --format docker) passes.
  local hc
  hc=$(pm image inspect --format '{{json .Config.Healthcheck.Test}}' "$DC_IMAGE")
  if pm healthcheck run "$name" >"$dir/health.txt" 2>&1 &&
     [ "$(pm inspect --format '{{.State.Health.Status}}' "$name")" = healthy ]; then
    pass "1b health check" "healthy: $hc"
  else
    fail "1b health check" "$hc: $(cat "$dir/health.txt")"
  fi

  # 1c. gnmrctl status over the published TCP port: with the admin token
  # served, without it (or with a wrong one) refused.
  local target=127.0.0.1:$port t0 ms
  t0=$(now_ms)
  if ctl status --target "$target" --timeout 5 --admin-token "$admin" >"$dir/status.txt" 2>&1; then
    ms=$(( $(now_ms) - t0 ))
    pass "1c status over TCP with the token" "$target answered: version $(awk '/^version:/{print $2}' "$dir/status.txt"), listen $(sed -n 's/^listen: *//p' "$dir/status.txt") (${ms} ms with gnmrctl's container start)"
  else
    fail "1c status over TCP with the token" "$(tail -3 "$dir/status.txt")"
  fi
  local what
  for what in none wrong; do
    local tok=()
    [ $what = wrong ] && tok=(--admin-token "$(random_token)")
    if ctl status --target "$target" --timeout 5 "${tok[@]}" >"$dir/refused-$what.txt" 2>&1; then
      fail "1d status over TCP, token $what" "served: $(grep -v level= "$dir/refused-$what.txt" | head -3 | tr '\n' ' ')"
    elif grep -q UNAUTHENTICATED "$dir/refused-$what.txt"; then
      pass "1d status over TCP, token $what" "refused: $(grep -m1 -o 'UNAUTHENTICATED.*' "$dir/refused-$what.txt" | cut -c1-90)"
    else
      fail "1d status over TCP, token $what" "unexpected: $(tail -2 "$dir/refused-$what.txt")"
    fi
  done

  # 1e. Trainers over TCP: the job with its token registers and gets
  # decisions; the same job without it, and a job the tokens file does not
  # list, are refused (fail-open: those trainers step on without plans).
  local good gd jobs refused=() case job tok out
  good=$(synth_host --target "$target" --job dc-tcp --rank 0 --world-size 1 --steps 60 \
    --token "$job_token" --json 2>"$dir/synth-good.err")
  gd=$(json_get decisions_received <<<"$good" 2>/dev/null)
  local desc code
  for case in "dc-tcp:" "dc-new:" "dc-new:$job_token"; do
    job=${case%%:*} tok=${case#*:}
    desc="$job without a token"
    [ -z "$tok" ] || desc="$job with the token of dc-tcp"
    out=$(synth_host --target "$target" --job "$job" --rank 0 --world-size 1 --steps 20 \
      --decision-wait-ms 100 ${tok:+--token "$tok"} --json 2>"$dir/synth-refused.err")
    code=$(grep -o -m1 -E 'UNAUTHENTICATED|PERMISSION_DENIED' "$dir/synth-refused.err")
    if [ "$(json_get decisions_received <<<"$out" 2>/dev/null)" = 0 ] &&
       [ "$(json_get steps <<<"$out" 2>/dev/null)" = 20 ] && [ -n "$code" ]; then
      refused+=("$desc: $code")
    else
      fail "1e trainers over TCP" "$desc was not refused: $(cut -c1-200 <<<"$out") $(tail -1 "$dir/synth-refused.err")"
      return 1
    fi
  done
  jobs=$(ctl jobs --target "$target" --admin-token "$admin" --json 2>/dev/null |
    python3 -c 'import json,sys; print(" ".join(j["job_id"] for j in json.load(sys.stdin).get("jobs", [])))')
  if [ "${gd:-0}" -gt 0 ] && [ "$jobs" = dc-tcp ]; then
    pass "1e trainers over TCP" "dc-tcp with its token: $gd decisions in 60 steps; refused with 0 decisions, 20 steps run: $(IFS=';'; echo "${refused[*]}" | sed 's/;/; /g'); jobs: $jobs"
  else
    fail "1e trainers over TCP" "dc-tcp with its token: ${gd:-?} decisions ($(tail -1 "$dir/synth-good.err")); jobs: '$jobs'"
  fi

  # Graceful stop: SIGTERM (STOPSIGNAL) -> exit 0 with the jobs snapshotted.
  pm stop -t 30 "$name" >/dev/null
  pm logs "$name" >"$dir/gnmrd.log" 2>&1
  local rc
  rc=$(pm inspect --format '{{.State.ExitCode}}' "$name")
  if [ "$rc" = 0 ] && grep -q "SIGTERM: shutting down" "$dir/gnmrd.log"; then
    pass "1f podman stop" "SIGTERM -> graceful shutdown, exit 0"
  else
    fail "1f podman stop" "exit $rc: $(tail -3 "$dir/gnmrd.log" | tr '\n' ' ')"
  fi
  pm rm -f -v "$name" >/dev/null
}

# Check 4: the image's size, and how long after its start gnmrd answers:
# from the exec of gnmrd in the container (a shell in front of it stamps
# the time, then execs it) to the first `gnmrctl status` answered on the
# socket, polled by a second container sharing /run/gnmr (one host clock).
# Also reported: podman start to ready, which adds podman's and runc's
# container set-up (namespaces, mounts, the bridge network) on this host.
# The median of 5 starts, the first cold.
check_size_and_startup() {
  local size_mb base_mb
  size_mb=$(image_mb "$DC_IMAGE")
  base_mb=$(image_mb "$DC_BASE")
  pm history --format '{{.Size}}  {{.CreatedBy}}' "$DC_IMAGE" 2>/dev/null |
    cut -c1-160 >"$DC_WORK/image-layers.txt"
  # No build dependencies in the runtime image: no compiler, no -dev package.
  local pkgs build_deps
  pkgs=$(pm run --rm --no-healthcheck --network none --entrypoint dpkg-query "$DC_IMAGE" \
    -W -f '${Package}\n')
  build_deps=$(grep -E -- '-dev$|^(gcc|g\+\+|cpp|clang)(-[0-9]+)?$|^(cmake|make|ninja-build|protobuf-compiler.*)$' <<<"$pkgs" | tr '\n' ' ')
  if [ "$size_mb" -le 150 ] && [ -z "$build_deps" ]; then
    pass "4a image size" "$size_mb MB (target <= 150 MB; base $base_mb MB; $(wc -l <<<"$pkgs") packages, no compiler or -dev; layers in $DC_WORK/image-layers.txt)"
  else
    fail "4a image size" "$size_mb MB (target <= 150 MB); build packages: ${build_deps:-none}; layers: $DC_WORK/image-layers.txt"
  fi

  local name=gnmr-dc-start poll=gnmr-dc-poll i execs=() starts=()
  pm create --name "$name" --read-only --cap-drop ALL \
    -v gnmr-dc-start-run:/run/gnmr -v gnmr-dc-start-state:/var/lib/gnmr \
    --entrypoint /bin/sh "$DC_IMAGE" \
    -c 'date +%s%N >/run/gnmr/exec-ns; exec /usr/local/bin/gnmrd --config /etc/gnmr/gnmrd.yaml' \
    >/dev/null ||
    { fail "4b start-up" "podman create failed"; return 1; }
  for i in 1 2 3 4 5; do
    pm rm -f -v "$poll" >/dev/null 2>&1
    pm run -d --name "$poll" --no-healthcheck -v gnmr-dc-start-run:/run/gnmr \
      --entrypoint /bin/sh "$DC_IMAGE" -c \
      'rm -f /run/gnmr/exec-ns; touch /run/gnmr/poll-up
       until /usr/local/bin/gnmrctl status --timeout 1 >/dev/null 2>&1; do sleep 0.005; done
       date +%s%N' >/dev/null
    wait_for 30 pm exec "$poll" test -e /run/gnmr/poll-up
    local t0 ready_ns exec_ns
    t0=$(date +%s%N)
    pm start "$name" >/dev/null
    if ! timeout 30 podman wait "$poll" >/dev/null; then
      fail "4b start-up" "start $i: gnmrd not ready in 30 s: $(pm logs "$name" 2>&1 | tail -3)"
      pm rm -f -v "$poll" "$name" >/dev/null 2>&1; return 1
    fi
    ready_ns=$(pm logs "$poll" | tail -1)
    exec_ns=$(pm run --rm --no-healthcheck -v gnmr-dc-start-run:/run/gnmr --entrypoint cat \
      "$DC_IMAGE" /run/gnmr/exec-ns)
    execs+=("$(( (ready_ns - exec_ns) / 1000000 ))")
    starts+=("$(( (ready_ns - t0) / 1000000 ))")
    pm stop -t 10 "$name" >/dev/null
  done
  pm rm -f -v "$poll" "$name" >/dev/null 2>&1
  local median container
  median=$(printf '%s\n' "${execs[@]}" | sort -n | sed -n 3p)
  container=$(printf '%s\n' "${starts[@]}" | sort -n | sed -n 3p)
  if [ "$median" -le 1000 ]; then
    pass "4b start-up" "gnmrd ready ${median} ms after its exec (median of 5: ${execs[*]} ms; target <= 1000 ms); podman start to ready ${container} ms (${starts[*]} ms)"
  else
    fail "4b start-up" "gnmrd ready ${median} ms after its exec > 1000 ms (${execs[*]} ms); podman start to ready ${container} ms"
  fi
}
