#!/usr/bin/env bash
# systemd-analyze verify on deploy/systemd/gnmrd.service, and
# systemd-sysusers on deploy/systemd/gnmr.sysusers in a scratch root. The
# unit's ExecStart names /usr/local/bin/gnmrd, which is not installed here:
# the verified copy differs from the file only in pointing ExecStart at the
# gnmrd just built (the same arguments). Any other message fails the test.
# Skips (77) when systemd-analyze is absent.
# Usage: systemd_verify.sh REPO_ROOT GNMRD_BINARY
set -euo pipefail
root=$1
gnmrd=$(readlink -f "$2")  # ExecStart needs an absolute path
if ! command -v systemd-analyze >/dev/null 2>&1; then
  echo "SKIP: systemd-analyze not installed"
  exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

unit=$root/deploy/systemd/gnmrd.service
expected='ExecStart=/usr/local/bin/gnmrd --config /etc/gnmr/gnmrd.yaml'
if [ "$(grep -c '^ExecStart=' "$unit")" != 1 ] || ! grep -qxF "$expected" "$unit"; then
  echo "FAIL: expected exactly one line '$expected' in $unit"
  exit 1
fi
sed "s|^ExecStart=/usr/local/bin/gnmrd |ExecStart=$gnmrd |" "$unit" >"$tmp/gnmrd.service"
if [ "$(diff "$unit" "$tmp/gnmrd.service" | grep -c '^[<>]')" != 2 ]; then
  echo "FAIL: the copy should differ in the ExecStart line only"
  exit 1
fi
set +e
out=$(systemd-analyze verify "$tmp/gnmrd.service" 2>&1)
rc=$?
set -e
echo "systemd-analyze verify: exit $rc"
[ -z "$out" ] || printf '%s\n' "$out"
if [ $rc -ne 0 ] || [ -n "$out" ]; then
  echo "FAIL: systemd-analyze verify reported problems"
  exit 1
fi

# Hardening and layout the deployment relies on.
for line in User=gnmr Group=gnmr RuntimeDirectory=gnmr StateDirectory=gnmr \
  ConfigurationDirectory=gnmr Restart=on-failure KillSignal=SIGTERM NoNewPrivileges=yes \
  ProtectSystem=strict ProtectHome=yes PrivateTmp=yes PrivateDevices=yes \
  'RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6' SystemCallFilter=@system-service; do
  grep -qxF "$line" "$unit" || { echo "FAIL: $unit lacks '$line'"; exit 1; }
done
for key in MemoryMax LimitNOFILE TasksMax; do
  grep -q "^$key=" "$unit" || { echo "FAIL: $unit sets no $key"; exit 1; }
done

if command -v systemd-sysusers >/dev/null 2>&1; then
  mkdir -p "$tmp/root/etc"
  systemd-sysusers --root="$tmp/root" "$(cd "$root" && pwd)/deploy/systemd/gnmr.sysusers"
  entry=$(grep '^gnmr:' "$tmp/root/etc/passwd" || true)
  case "$entry" in
    gnmr:x:*:*:*:/var/lib/gnmr:/usr/sbin/nologin) echo "sysusers: $entry" ;;
    *) echo "FAIL: sysusers made '$entry'"; exit 1 ;;
  esac
  grep -q '^gnmr:' "$tmp/root/etc/group" || { echo "FAIL: no group gnmr"; exit 1; }
else
  echo "note: systemd-sysusers absent, gnmr.sysusers not checked"
fi
echo "OK"
