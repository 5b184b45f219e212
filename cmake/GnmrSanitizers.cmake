# Sanitizer and fuzzing builds (docs/sanitizers.md, docs/fuzzing.md).
#
#   GNMR_SANITIZE=address  AddressSanitizer + UndefinedBehaviorSanitizer
#                          (LeakSanitizer included); any UB aborts the test.
#   GNMR_SANITIZE=thread   ThreadSanitizer.
#   GNMR_FUZZ=ON           libFuzzer targets in fuzz/ (clang only, needs
#                          GNMR_SANITIZE=address); every library is built with
#                          coverage instrumentation for them.
#
# The flags go to every target of the project (generated protobuf code
# included); the Debian libraries (gRPC, protobuf, abseil, yaml-cpp, ...) are
# not instrumented. Sanitizer builds are for clang-16 (scripts/test.sh --asan,
# --tsan); GCC works for address and thread but not for GNMR_FUZZ.
set(GNMR_SANITIZE "" CACHE STRING "Sanitizer build: empty, address (ASan+UBSan) or thread")
set_property(CACHE GNMR_SANITIZE PROPERTY STRINGS "" address thread)
option(GNMR_FUZZ "Build the libFuzzer targets in fuzz/ (clang, GNMR_SANITIZE=address)" OFF)

set(GNMR_SANITIZER_FLAGS "")
if(GNMR_SANITIZE STREQUAL "address")
  set(GNMR_SANITIZER_FLAGS -fsanitize=address,undefined -fno-sanitize-recover=undefined)
elseif(GNMR_SANITIZE STREQUAL "thread")
  set(GNMR_SANITIZER_FLAGS -fsanitize=thread)
elseif(NOT GNMR_SANITIZE STREQUAL "")
  message(FATAL_ERROR "GNMR_SANITIZE must be empty, address or thread (got '${GNMR_SANITIZE}')")
endif()

if(GNMR_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    message(FATAL_ERROR "GNMR_FUZZ=ON needs clang (libFuzzer), e.g. CXX=clang++-16")
  endif()
  if(NOT GNMR_SANITIZE STREQUAL "address")
    message(FATAL_ERROR "GNMR_FUZZ=ON needs GNMR_SANITIZE=address")
  endif()
  # Coverage for libFuzzer in every library; the fuzz targets themselves link
  # the fuzzer runtime (fuzz/CMakeLists.txt).
  list(APPEND GNMR_SANITIZER_FLAGS -fsanitize=fuzzer-no-link)
endif()

if(GNMR_SANITIZER_FLAGS)
  # C++ only: CUDA sources (nvcc) are not instrumented; sanitizer builds
  # normally configure with -DGNMR_CUDA=OFF.
  add_compile_options("$<$<COMPILE_LANGUAGE:CXX>:${GNMR_SANITIZER_FLAGS};-fno-omit-frame-pointer>")
  add_link_options(${GNMR_SANITIZER_FLAGS})
  message(STATUS "GNMR: sanitizer build (${GNMR_SANITIZE}); flags ${GNMR_SANITIZER_FLAGS}")
endif()
