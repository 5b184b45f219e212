# Installs the client library as a CMake package and a pkg-config file:
#   find_package(gnmr CONFIG REQUIRED)
#   target_link_libraries(trainer PRIVATE gnmr::gnmr_client)
# or
#   c++ trainer.cc $(pkg-config --cflags --libs gnmr)
#
# Static (default): the libraries gnmr_client links are exported and
# installed with it (core types, wire protocol, statistics, common).
# GNMR_SHARED: libgnmr_client.so and libgnmr_client_local.so carry the
# layers below them; only the protobuf messages they share with gnmrd
# (libgnmr_proto.so, libgnmr_wire_proto.so) install next to them, as their
# runtime dependencies.
# Installed headers, all under include/gnmr/ and included as <gnmr/...>:
# client.h (with client_options.h, plan.h, client_counters.h), gnmr_c.h,
# client_local.h, tensor.h (kernels), status.h and export.h (common),
# config.h (core) and the generated version.h. Consumers add only include/ to their path.
include(CMakePackageConfigHelpers)
set(GNMR_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/gnmr)
if(GNMR_SHARED)
  set(GNMR_PKG_LIBS gnmr_client gnmr_wire_proto gnmr_proto)
  set(GNMR_PC_LIB_NAMES gnmr_client)
  set(GNMR_PC_REQUIRES "")
else()
  set(GNMR_PKG_LIBS gnmr_client gnmr_controller_types gnmr_wire_proto gnmr_proto gnmr_cpu_stats
      gnmr_common)
  set(GNMR_PC_REQUIRES "Requires: grpc++ protobuf spdlog")
endif()
# With CUDA the static archives need the toolkit's static runtime at link
# time (nothing at run time: CUPTI is loaded with dlopen, libcuda through
# the runtime). The shared library carries its runtime inside and lists
# no CUDA library at all.
set(GNMR_PC_EXTRA "")
set(GNMR_PKG_CUDA OFF)
if(GNMR_HAVE_CUDA AND NOT GNMR_SHARED)
  list(INSERT GNMR_PKG_LIBS 1 gnmr_cuda_stats)
  set(GNMR_PKG_CUDA ON)
  set(GNMR_PC_EXTRA "-L${CUDAToolkit_LIBRARY_DIR} -lcudart_static -lrt -ldl")
endif()

# Target "local" (docs/local_mode.md): gnmr::gnmr_client_local and the
# controller it links. CMake package only; pkg-config's gnmr stays the
# client without the controller.
if(GNMR_SHARED)
  set(GNMR_LOCAL_LIBS gnmr_client_local)
else()
  set(GNMR_LOCAL_LIBS gnmr_client_local gnmr_controller_publish gnmr_controller)
endif()
install(TARGETS ${GNMR_PKG_LIBS} ${GNMR_LOCAL_LIBS}
  EXPORT gnmrTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(EXPORT gnmrTargets NAMESPACE gnmr:: DESTINATION ${GNMR_INSTALL_CMAKEDIR})

install(FILES include/gnmr/client.h include/gnmr/client_options.h include/gnmr/plan.h
              include/gnmr/client_counters.h include/gnmr/gnmr_c.h
              local/include/gnmr/client_local.h
              ${PROJECT_SOURCE_DIR}/kernels/include/gnmr/tensor.h
              ${PROJECT_SOURCE_DIR}/kernels/include/gnmr/block_tensor.h
              ${PROJECT_SOURCE_DIR}/common/include/gnmr/status.h
              ${PROJECT_SOURCE_DIR}/controller/types/include/gnmr/config.h
              ${PROJECT_BINARY_DIR}/generated/gnmr/version.h
              ${PROJECT_SOURCE_DIR}/common/include/gnmr/export.h
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/gnmr)

configure_package_config_file(gnmrConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/gnmrConfig.cmake
  INSTALL_DESTINATION ${GNMR_INSTALL_CMAKEDIR})
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/gnmrConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/gnmrConfig.cmake
              ${CMAKE_CURRENT_BINARY_DIR}/gnmrConfigVersion.cmake
        DESTINATION ${GNMR_INSTALL_CMAKEDIR})

# pkg-config: static archives in dependency order, then their dependencies
# (GNMR_SHARED: the shared library alone).
if(NOT GNMR_SHARED)
  set(GNMR_PC_LIB_NAMES ${GNMR_PKG_LIBS})
endif()
list(TRANSFORM GNMR_PC_LIB_NAMES PREPEND "-l" OUTPUT_VARIABLE GNMR_PC_LIBS)
list(JOIN GNMR_PC_LIBS " " GNMR_PC_LIBS)
string(APPEND GNMR_PC_LIBS " ${GNMR_PC_EXTRA}")
file(RELATIVE_PATH GNMR_PC_UP /p/${CMAKE_INSTALL_LIBDIR}/pkgconfig /p)
configure_file(gnmr.pc.in ${CMAKE_CURRENT_BINARY_DIR}/gnmr.pc @ONLY)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/gnmr.pc
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
