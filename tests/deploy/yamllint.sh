#!/usr/bin/env bash
# Lints every YAML file under deploy/ with deploy/.yamllint (errors fail,
# long lines only warn). Skips (77) when yamllint is not installed
# (scripts/install_deps.sh installs it).
# Usage: yamllint.sh REPO_ROOT
set -euo pipefail
root=$1
if ! command -v yamllint >/dev/null 2>&1; then
  echo "SKIP: yamllint not installed"
  exit 77
fi
cd "$root"
files=$(find deploy -name '*.yaml' -o -name '*.yml' | sort)
echo "yamllint: $(echo "$files" | wc -l) files"
yamllint -f parsable -c deploy/.yamllint deploy
echo "yamllint: no errors"
