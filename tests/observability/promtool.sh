#!/bin/sh
# promtool ARGS...: runs Debian's promtool, or exits 77 (ctest: skipped)
# when it is not installed (scripts/install_deps.sh installs it).
if ! command -v promtool >/dev/null 2>&1; then
  echo "SKIP: promtool is not installed"
  exit 77
fi
exec promtool "$@"
