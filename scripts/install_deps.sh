#!/usr/bin/env bash
# Installs the Debian 12 packages GNMR needs to build and test. Idempotent:
# when everything is present it only checks (a second or so) and changes
# nothing. Needs root (or sudo) only when something is missing.
#
# Usage: scripts/install_deps.sh [--build-only | --demo]
#   --build-only  only what building gnmrd, gnmrctl, the client and
#                 gnmr-synth needs, tests and benchmarks off (the container
#                 image's build stage, deploy/container/Dockerfile)
#   --demo        that and python3 (its summary): what scripts/demo.sh needs
# Without it, it then makes the project's Python venv (pinned PyTorch 2.x
# and the integration libraries from PyPI; scripts/python_env.sh), which
# the test suite runs on. GNMR_NO_VENV=1 leaves that out.
set -euo pipefail
cd "$(dirname "$0")/.."

# Enough for cmake -DGNMR_BUILD_TESTS=OFF -DGNMR_BUILD_BENCH=OFF.
build_packages=(
  build-essential cmake ninja-build pkg-config
  libprotobuf-dev protobuf-compiler
  libgrpc++-dev protobuf-compiler-grpc
  libspdlog-dev prometheus-cpp-dev libyaml-cpp-dev
)
packages=(
  "${build_packages[@]}" git
  ccache  # scripts/build.sh: rebuilds on the same machine (CI's next run) hit its cache
  libgtest-dev libgmock-dev libbenchmark-dev
  pybind11-dev python3 python3-dev
  # pip install ./python and python3 -m build --wheel, offline
  # (--no-build-isolation); tests/python's python_pip_install uses a venv
  python3-setuptools python3-wheel python3-build python3-venv python3-pip
  # Debian's PyTorch 1.13 (with a fast BLAS) and pytest: the oldest
  # PyTorch gnmr.torch supports, tested by the ASan suite (the main suite
  # runs on the venv's pinned 2.x; docs/integrations.md, "Environment")
  python3-torch libopenblas0-pthread python3-pytest
  yamllint python3-yaml  # tests/deploy: YAML lint and manifest checks
  prometheus  # promtool + server for tests/observability
  # experiments/ (the evaluation): the text corpus and the plots
  fortunes python3-matplotlib
  # scripts/test.sh --asan / --tsan and the libFuzzer targets (fuzz/)
  clang-16 libclang-rt-16-dev llvm-16  # llvm-16: llvm-symbolizer for reports
  clang-format-16  # ctest clang_format (scripts/check_format.sh)
)

venv=1
case "${1:-}" in
  --build-only) packages=("${build_packages[@]}"); venv=0 ;;
  --demo) packages=("${build_packages[@]}" python3); venv=0 ;;
  "") ;;
  *) echo "usage: $0 [--build-only | --demo]" >&2; exit 2 ;;
esac

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install_deps: all ${#packages[@]} packages present"
else
  echo "install_deps: installing ${missing[*]}"
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

if [ "$venv" = 1 ] && [ "${GNMR_NO_VENV:-0}" != 1 ]; then
  scripts/python_env.sh >/dev/null
fi
