#!/usr/bin/env bash
# Installs what is missing, builds, and runs every test (ctest).
# This is the README's test command and what .ci/run calls.
#
#   scripts/test.sh           GCC build in ./build, the whole suite
#   scripts/test.sh --asan    clang-16, AddressSanitizer + UndefinedBehaviorSanitizer
#                             and the libFuzzer smoke runs, in ./build-asan
#   scripts/test.sh --tsan    clang-16, ThreadSanitizer, in ./build-tsan
#
# Both clang builds also run clang's thread-safety analysis as an error
# (-Wthread-safety -Werror=thread-safety; docs/sanitizers.md, "Thread-safety
# analysis").
#
# Arguments after the mode go to ctest (e.g. `scripts/test.sh --tsan -R Session`).
# The TSan suite leaves out the Python tests (ctest label `python`): they
# would load the instrumented extension into Debian's uninstrumented python3
# and PyTorch (the ASan suite runs them with the runtime preloaded;
# docs/sanitizers.md). BUILD_DIR overrides the build directory.
set -euo pipefail
cd "$(dirname "$0")/.."

mode=normal
case "${1:-}" in
  --asan) mode=asan; shift ;;
  --tsan) mode=tsan; shift ;;
esac

scripts/install_deps.sh

ctest_args=(--output-on-failure -j "$(nproc)" --timeout 600)
if [ "$mode" = normal ]; then
  # The Python tests run on the project's venv (pinned PyTorch 2.x and the
  # integration libraries; install_deps.sh made it). The sanitizer suites
  # keep Debian's python3 and its PyTorch 1.13, the oldest supported.
  scripts/build.sh "-DGNMR_TEST_PYTHON=$(scripts/python_env.sh)"
else
  export BUILD_DIR=${BUILD_DIR:-build-$mode}
  export CC=clang-16 CXX=clang++-16
  # ASan: -O1 -gline-tables-only: reports keep file:line, and a cold build
  # takes ~25% less time than with RelWithDebInfo's -O2 -g (docs/sanitizers.md,
  # "CI"). TSan keeps full debug info: with line tables only, an inlined
  # frame is named without its namespace ("Run", not
  # "grpc::internal::CallbackWithSuccessTag::Run"), and tsan.supp's
  # third-party suppressions, which match qualified names, miss gRPC's
  # header code.
  # Both are clang builds, so both check the thread-safety annotations
  # (common/thread_annotations.h): a lock rule broken fails the build
  # (docs/sanitizers.md, "Thread-safety analysis").
  common=(-DGNMR_CUDA=OFF -DGNMR_BUILD_BENCH=OFF
          "-DCMAKE_CXX_FLAGS=-Wthread-safety -Wthread-safety-beta -Werror=thread-safety")
  if [ "$mode" = asan ]; then
    scripts/build.sh "${common[@]}" -DGNMR_SANITIZE=address -DGNMR_FUZZ=ON \
      "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -gline-tables-only -DNDEBUG"
  else
    scripts/build.sh "${common[@]}" -DGNMR_SANITIZE=thread -DGNMR_FUZZ=OFF \
      "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g -DNDEBUG"
  fi
  GNMR_SANITIZER_LOG_DIR=$PWD/$BUILD_DIR/sanitizer-logs
  rm -rf "$GNMR_SANITIZER_LOG_DIR"
  mkdir -p "$GNMR_SANITIZER_LOG_DIR"
  export GNMR_SANITIZER_LOG_DIR
  # shellcheck source=sanitizers/options.sh
  source scripts/sanitizers/options.sh
  if [ "$mode" = tsan ]; then ctest_args+=(--label-exclude python); fi
fi

cd "${BUILD_DIR:-build}"
status=0
ctest "${ctest_args[@]}" "$@" || status=$?
if [ "$mode" != normal ] && [ -n "$(ls -A "$GNMR_SANITIZER_LOG_DIR")" ]; then
  # Reports of any process, also of a gnmrd a test killed: a failed run.
  for f in "$GNMR_SANITIZER_LOG_DIR"/*; do
    echo "=== $f"
    head -c 20000 "$f"
  done
  echo "test.sh: sanitizer reports in $GNMR_SANITIZER_LOG_DIR ($(ls "$GNMR_SANITIZER_LOG_DIR" | wc -l) files)" >&2
  status=1
fi
exit "$status"
