#!/usr/bin/env bash
# ctest builds no container image (scripts/deploy_check.sh does, with
# podman, in minutes), so this checks the Dockerfile's build stage as far
# as a plain Debian host can in seconds: the paths the
# Dockerfile COPYs into the build stage, alone in a scratch directory,
# configure with the Dockerfile's own cmake command line, and the binaries
# the Dockerfile installs from (build/bin/gnmrd,
# build/bin/gnmrctl) are targets of that build.
# Usage: container_context.sh REPO_ROOT
set -euo pipefail
root=$(cd "$1" && pwd)
dockerfile=$root/deploy/container/Dockerfile
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir "$tmp/src"

# Join continuation lines; the build stage ends at the second FROM.
flat=$(sed -e ':a' -e '/\\$/N; s/\\\n/ /; ta' "$dockerfile" | grep -v '^[[:space:]]*#')
build_stage=$(printf '%s\n' "$flat" | awk '/^FROM /{n++} n==1')
while read -r word rest; do
  [ "$word" = COPY ] || continue
  case "$rest" in --from=*) continue ;; esac
  read -ra parts <<<"$rest"
  for src in "${parts[@]:0:${#parts[@]}-1}"; do
    mkdir -p "$tmp/src/$(dirname "$src")"
    cp -r "$root/$src" "$tmp/src/$src"
  done
done <<<"$build_stage"
echo "build context: $(cd "$tmp/src" && ls | tr '\n' ' ')"

cmake_line=$(printf '%s\n' "$build_stage" | grep -o 'cmake -S \. -B build[^&]*' | head -1)
[ -n "$cmake_line" ] || { echo "FAIL: no 'cmake -S . -B build' in the build stage"; exit 1; }
echo "configure: $cmake_line"
(cd "$tmp/src" && eval "$cmake_line") >"$tmp/configure.log" 2>&1 || {
  echo "FAIL: the Dockerfile's build stage does not configure:"; cat "$tmp/configure.log"; exit 1; }
for out in $(printf '%s\n' "$build_stage" | grep -o 'build/[A-Za-z0-9_/.-]*' | sort -u); do
  [ "$out" = build ] && continue
  if ! ninja -C "$tmp/src/build" -t query "${out#build/}" >/dev/null 2>&1; then
    echo "FAIL: the Dockerfile installs $out, which the build does not produce"
    exit 1
  fi
  echo "ok: $out is a build output"
done
echo "OK"
