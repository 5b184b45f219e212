#!/usr/bin/env bash
# The real gnmrd starts with each gnmrd.yaml that deploy/ ships (systemd's
# /etc example, the container's, the Kubernetes ConfigMap's), answers the
# health check the container and the pods use (gnmrctl status on the Unix
# socket), and stops cleanly (exit 0) on SIGTERM, as systemd, docker stop
# and Kubernetes send it. Addresses, state dir and token file are pointed
# into a scratch directory with flags (which override the file); every
# other key comes from the file, so a key gnmrd does not know fails here.
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
"$py" - "$root/deploy/kubernetes/configmap.yaml" "$tmp/configmap-gnmrd.yaml" <<'PY'
import sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
cm = next(d for d in docs if d["kind"] == "ConfigMap")
open(sys.argv[2], "w").write(cm["data"]["gnmrd.yaml"])
PY
echo "test-admin-token" >"$tmp/token"
chmod 600 "$tmp/token"

n=0
for config in "$root/deploy/systemd/gnmrd.yaml" "$root/deploy/container/gnmrd.yaml" \
  "$tmp/configmap-gnmrd.yaml"; do
  n=$((n + 1))
  sock=$tmp/$n.sock
  "$gnmrd" --config "$config" --listen "unix:$sock" --state-dir "$tmp/state$n" \
    --metrics off --admin-token-file "$tmp/token" >"$tmp/log$n" 2>&1 &
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
    echo "FAIL: gnmrd with $config did not come up:"
    cat "$tmp/log$n" "$tmp/status$n"
    exit 1
  fi
  grep -q "^state dir:  $tmp/state$n$" "$tmp/status$n" || {
    echo "FAIL: unexpected status:"; cat "$tmp/status$n"; exit 1; }
  kill -TERM "$pid"
  rc=0
  for _ in $(seq 100); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "$pid" 2>/dev/null; then
    echo "FAIL: gnmrd with $config still running 10 s after SIGTERM"
    exit 1
  fi
  wait "$pid" || rc=$?
  pid=
  if [ "$rc" -ne 0 ]; then
    echo "FAIL: gnmrd with $config exited $rc after SIGTERM:"
    cat "$tmp/log$n"
    exit 1
  fi
  grep -q "SIGTERM: shutting down" "$tmp/log$n" || {
    echo "FAIL: no graceful shutdown in the log:"; cat "$tmp/log$n"; exit 1; }
  name=${config#"$root/"}
  [ "$config" != "$tmp/configmap-gnmrd.yaml" ] || name="deploy/kubernetes/configmap.yaml (gnmrd.yaml)"
  echo "ok: $name: up, healthy, SIGTERM -> exit 0"
done
echo "OK"
