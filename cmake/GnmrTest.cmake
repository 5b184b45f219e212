# GoogleTest for the test suites, and gnmr_test(). GoogleTest comes from
# find_package(GTest), or is built from the sources in GNMR_GTEST_SOURCE_DIR
# when that is set (machines without the package, e.g. the lent GPU
# machines: scripts/gpu_check.sh carries Debian's /usr/src/googletest).
include(GoogleTest)
if(GNMR_GTEST_SOURCE_DIR)
  set(BUILD_GMOCK ON CACHE BOOL "" FORCE)
  set(INSTALL_GTEST OFF CACHE BOOL "" FORCE)
  add_subdirectory(${GNMR_GTEST_SOURCE_DIR} ${CMAKE_BINARY_DIR}/_googletest EXCLUDE_FROM_ALL)
  foreach(t gtest gtest_main gmock gmock_main)
    if(TARGET ${t} AND NOT TARGET GTest::${t})
      add_library(GTest::${t} ALIAS ${t})
    endif()
  endforeach()
else()
  find_package(GTest REQUIRED)
endif()

# gnmr_test(name sources... LIBS libs...): one GoogleTest binary in ctest.
# Its tests carry the label dir:<folder> (dir:daemon, dir:client, ...), so
# one layer's tests run alone: ctest -L '^dir:(daemon|client)$'.
function(gnmr_test name)
  cmake_parse_arguments(T "" "" "LIBS" ${ARGN})
  add_executable(${name} ${T_UNPARSED_ARGUMENTS})
  target_link_libraries(${name} PRIVATE ${T_LIBS} GTest::gtest GTest::gtest_main)
  # The test helpers (tests/testing/, tests/daemon/...); the layers come
  # from LIBS (cmake/GnmrLayerInclude.cmake).
  gnmr_layer_include(${name} PRIVATE tests)
  gnmr_warnings(${name})
  get_filename_component(folder ${CMAKE_CURRENT_SOURCE_DIR} NAME)
  gtest_discover_tests(${name} DISCOVERY_TIMEOUT 60 PROPERTIES LABELS "dir:${folder}")
endfunction()
