#!/usr/bin/env bash
# The real gnmrd starts with each gnmrd.yaml that deploy/ ships (systemd's
# /etc example, the container's, both Kubernetes ConfigMaps), answers the
# health check the container and the pods use (gnmrctl status on the Unix
# socket), and stops cleanly (exit 0) on SIGTERM, as systemd, docker stop
# and Kubernetes send it. Addresses, state dir and token files are pointed
# into a scratch directory with flags (which override the file); every
# other key comes from the file, so a key gnmrd does not know fails here.
# A config with a TCP listener gets one on 127.0.0.1 (port 0) with its own
# security settings, and must be safe as shipped: over TCP gnmrctl is
# refused without a token and served with the admin token.
# Usage: configs_load.sh REPO_ROOT GNMRD GNMRCTL
set -euo pipefail
root=$(cd "$1" && pwd)
gnmrd=$2
gnmrctl=$3
tmp=$(mktemp -d /tmp/gnmr-deploy.XXXXXX)
pid=
cleanup() {
  if [ -n "$pid" ]; then kill -9 "$pid" 2>/dev/null || true; fi
  rm -rf "$tmp"
}
trap cleanup EXIT

py=/usr/bin/python3
[ -x "$py" ] || py=python3
if ! "$py" -c 'import yaml' 2>/dev/null; then
  echo "SKIP: python3 yaml module missing (Debian: python3-yaml)"
  exit 77
fi
# Each ConfigMap's gnmrd.yaml as a file named after the ConfigMap.
"$py" - "$root/deploy/kubernetes/configmap.yaml" "$tmp" <<'PY'
import sys, yaml
for d in yaml.safe_load_all(open(sys.argv[1])):
    if d and d["kind"] == "ConfigMap" and "gnmrd.yaml" in d.get("data", {}):
        open(f"{sys.argv[2]}/cm-{d['metadata']['name']}.yaml", "w").write(d["data"]["gnmrd.yaml"])
PY
echo "test-admin-token" >"$tmp/token"
echo "llama-7b-run3: test-job-token" >"$tmp/jobs.yaml"
chmod 600 "$tmp/token" "$tmp/jobs.yaml"

n=0
for config in "$root/deploy/systemd/gnmrd.yaml" "$root/deploy/container/gnmrd.yaml" \
  "$tmp"/cm-*.yaml; do
  n=$((n + 1))
  sock=$tmp/$n.sock
  name=${config#"$root/"}
  case "$config" in "$tmp"/cm-*) name="deploy/kubernetes/configmap.yaml ($(basename "$config"))" ;; esac
  flags=(--config "$config" --listen "unix:$sock" --state-dir "$tmp/state$n" --metrics off
    --admin-token-file "$tmp/token")
  tcp=$("$py" -c 'import sys, yaml; c = yaml.safe_load(open(sys.argv[1])) or {};
print(sum(not a.startswith("unix:") for a in c.get("listen", [])))' "$config")
  if [ "$tcp" -gt 0 ]; then flags+=(--listen 127.0.0.1:0); fi
  if grep -q '^job_tokens_file:' "$config"; then flags+=(--job-tokens-file "$tmp/jobs.yaml"); fi
  "$gnmrd" "${flags[@]}" >"$tmp/log$n" 2>&1 &
  pid=$!
  ok=
  for _ in $(seq 100); do
    if "$gnmrctl" status --target "unix:$sock" --timeout 1 >"$tmp/status$n" 2>&1; then
      ok=1
      break
    fi
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  if [ -z "$ok" ]; then
    echo "FAIL: gnmrd with $name did not come up:"
    cat "$tmp/log$n" "$tmp/status$n"
    exit 1
  fi
  grep -q "^state dir:  $tmp/state$n$" "$tmp/status$n" || {
    echo "FAIL: unexpected status:"; cat "$tmp/status$n"; exit 1; }
  if [ "$tcp" -gt 0 ]; then
    addr=$(grep -o '127\.0\.0\.1:[0-9]*' "$tmp/status$n" | head -1)
    if "$gnmrctl" jobs --target "$addr" --timeout 3 >"$tmp/tcp$n" 2>&1; then
      echo "FAIL: $name: gnmrctl jobs over TCP without a token was served:"; cat "$tmp/tcp$n"
      exit 1
    fi
    grep -q "UNAUTHENTICATED" "$tmp/tcp$n" || {
      echo "FAIL: $name: unexpected refusal:"; cat "$tmp/tcp$n"; exit 1; }
    "$gnmrctl" jobs --target "$addr" --timeout 3 --admin-token-file "$tmp/token" \
      >"$tmp/tcp$n" 2>&1 || { echo "FAIL: $name: admin token refused:"; cat "$tmp/tcp$n"; exit 1; }
    echo "ok: $name: over TCP, refused without a token, served with the admin token"
  fi
  kill -TERM "$pid"
  rc=0
  for _ in $(seq 100); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "$pid" 2>/dev/null; then
    echo "FAIL: gnmrd with $name still running 10 s after SIGTERM"
    exit 1
  fi
  wait "$pid" || rc=$?
  pid=
  if [ "$rc" -ne 0 ]; then
    echo "FAIL: gnmrd with $name exited $rc after SIGTERM:"
    cat "$tmp/log$n"
    exit 1
  fi
  grep -q "SIGTERM: shutting down" "$tmp/log$n" || {
    echo "FAIL: no graceful shutdown in the log:"; cat "$tmp/log$n"; exit 1; }
  echo "ok: $name: up, healthy, SIGTERM -> exit 0"
done
[ "$n" -ge 4 ] || { echo "FAIL: only $n configs found"; exit 1; }
echo "OK"
