# Sanitizer run-time options for the sanitizer test suites; sourced by
# scripts/test.sh --asan/--tsan (source it yourself to run ctest or a test
# binary of build-asan / build-tsan by hand). docs/sanitizers.md explains
# each choice. Every process the tests start (gnmrd, gnmrctl, gnmr-synth)
# inherits these.
#
# With GNMR_SANITIZER_LOG_DIR set, every report goes to a file there
# (<dir>/report.<pid>) instead of stderr: a report from a gnmrd that a test
# starts and kills would otherwise go unnoticed, so scripts/test.sh fails
# the run when the folder is not empty afterwards.
_gnmr_san_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# One file name for every tool: ASan, LSan and UBSan share one runtime
# (the last log_path parsed wins), so <tool> would not name the tool anyway.
_gnmr_log() {
  if [ -n "${GNMR_SANITIZER_LOG_DIR:-}" ]; then echo ":log_path=$GNMR_SANITIZER_LOG_DIR/report"; fi
}
# Stack traces with function names and lines (llvm-symbolizer of clang-16).
if [ -x /usr/lib/llvm-16/bin/llvm-symbolizer ]; then
  export ASAN_SYMBOLIZER_PATH=${ASAN_SYMBOLIZER_PATH:-/usr/lib/llvm-16/bin/llvm-symbolizer}
  export TSAN_SYMBOLIZER_PATH=${TSAN_SYMBOLIZER_PATH:-/usr/lib/llvm-16/bin/llvm-symbolizer}
  export UBSAN_SYMBOLIZER_PATH=${UBSAN_SYMBOLIZER_PATH:-/usr/lib/llvm-16/bin/llvm-symbolizer}
  export LSAN_SYMBOLIZER_PATH=${LSAN_SYMBOLIZER_PATH:-/usr/lib/llvm-16/bin/llvm-symbolizer}
fi

# ASan: leaks are errors (LeakSanitizer); lsan.supp lists third-party
# leaks only. detect_stack_use_after_return is off: gRPC's callback threads
# run deep stacks and the fake stacks cost too much memory on 2-core CI.
export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=0:detect_leaks=1:strict_init_order=1:check_initialization_order=1:detect_stack_use_after_return=0$(_gnmr_log)}
export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$_gnmr_san_dir/lsan.supp:print_suppressions=0$(_gnmr_log)}
# UBSan: the build has -fno-sanitize-recover=undefined (any UB aborts);
# a stack trace with each report.
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1$(_gnmr_log)}
# TSan: a report fails the process (exit code 66). Debian's gRPC and
# protobuf are not instrumented: ignore_noninstrumented_modules drops what
# they do through intercepted calls (malloc, memcpy, ...), and tsan.supp
# names the rest of their frames, never ours.
export TSAN_OPTIONS=${TSAN_OPTIONS:-suppressions=$_gnmr_san_dir/tsan.supp:ignore_noninstrumented_modules=1:second_deadlock_stack=1:history_size=4:print_suppressions=0$(_gnmr_log)}
unset _gnmr_san_dir
unset -f _gnmr_log
