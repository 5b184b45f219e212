# gnmr_warnings(target): the project's warning set. Project code builds
# without warnings (GCC, and clang for the sanitizer and fuzz builds);
# generated code (protobuf) is compiled without them.
#
# Clang differences: -Wshadow=local is GCC's spelling (clang's nearest is
# -Wshadow-uncaptured-local); -Woverloaded-virtual is off because the gRPC
# callback services deliberately name their Status-returning helpers after
# the RPCs they implement (daemon/server/admin_service.h);
# -Wmissing-field-initializers is off as GCC has it for C++: the C API's
# structs are meant to be partly initialized ({data, numel, dtype}).
function(gnmr_warnings target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic>
    $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<CXX_COMPILER_ID:GNU>>:-Wshadow=local>
    $<$<COMPILE_LANGUAGE:CXX>:-Wnon-virtual-dtor -Wcast-align -Wunused -Wnull-dereference>
    $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<CXX_COMPILER_ID:Clang>>:-Wshadow-uncaptured-local
      -Wno-overloaded-virtual -Wno-missing-field-initializers>)
endfunction()
