# gnmr_warnings(target): the project's warning set. Project code builds
# without warnings; generated code (protobuf) is compiled without them.
function(gnmr_warnings target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wshadow=local
      -Wnon-virtual-dtor -Wcast-align -Wunused -Wnull-dereference>)
endfunction()
