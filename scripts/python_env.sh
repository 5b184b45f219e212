#!/usr/bin/env bash
# Makes the project's Python environment: a venv on Debian's python3 with
# the pinned PyTorch 2.x and integration libraries of
# python/requirements/dev.lock (docs/integrations.md, "Environment").
# Idempotent: a venv already made from the same lock is only checked.
#
#   scripts/python_env.sh            make it if needed; print its python
#   scripts/python_env.sh --path     print its python only (no install;
#                                    exit 1 when it is not made yet)
#   scripts/python_env.sh --relock   resolve requirements/direct.txt anew
#                                    into dev.lock (a maintainer's step)
#
# Where: $GNMR_VENV when set, else ~/.cache/gnmr/venv-<lock hash>. Outside
# the checkout on purpose: every clone on a machine (CI clones afresh)
# shares it, and a changed lock gets a new venv instead of a half-updated
# one. pip's own cache (~/.cache/pip) keeps the wheels of earlier installs.
# Cold, the download and install of ~5.4 GB takes about 2 minutes here.
set -euo pipefail
cd "$(dirname "$0")/.."
lock=python/requirements/dev.lock
direct=python/requirements/direct.txt
base_python=/usr/bin/python3  # the interpreter the _gnmr extension is built for

hash=$(sha256sum "$lock" | cut -c1-12)
venv=${GNMR_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/gnmr/venv-$hash}
stamp=$venv/.gnmr-lock

case "${1:-}" in
  --path)
    if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$hash" ]; then
      echo "$venv/bin/python"; exit 0
    fi
    echo "python_env: no venv for this lock at $venv (run scripts/python_env.sh)" >&2
    exit 1 ;;
  --relock)
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    "$base_python" -m venv "$tmp/venv"
    "$tmp/venv/bin/pip" install -q --disable-pip-version-check -r "$direct"
    { sed -n '/^#/p' "$lock"; "$tmp/venv/bin/pip" freeze --all | grep -v "^pip=="; } > "$lock.new"
    mv "$lock.new" "$lock"
    echo "python_env: $lock rewritten ($(grep -c == "$lock") pins)"
    exit 0 ;;
  "") ;;
  *) echo "usage: $0 [--path | --relock]" >&2; exit 2 ;;
esac

if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$hash" ]; then
  echo "python_env: $venv ready" >&2
  echo "$venv/bin/python"
  exit 0
fi

echo "python_env: making $venv from $lock (PyTorch's wheels are several GB)" >&2
start=$(date +%s)
rm -rf "$venv"
mkdir -p "$(dirname "$venv")"
if [ -z "${GNMR_VENV:-}" ]; then
  # Venvs of older locks: ~5 GB each, never used again by this checkout.
  find "$(dirname "$venv")" -maxdepth 1 -name 'venv-*' -type d -exec rm -rf {} + 2>/dev/null || true
fi
"$base_python" -m venv "$venv"
# --no-deps: the lock holds every package already; pip must not pick
# others. pip's retries ride out a flaky mirror.
"$venv/bin/pip" install --disable-pip-version-check --no-deps --retries 10 --timeout 60 \
  --progress-bar off -q -r "$lock" >&2
"$venv/bin/pip" check >&2
"$venv/bin/python" -c "import torch; assert torch.__version__.startswith('2.')" >&2
echo "$hash" > "$stamp"
echo "python_env: made in $(( $(date +%s) - start )) s" >&2
echo "$venv/bin/python"
