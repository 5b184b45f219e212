# Per-target include folders: a target sees a project header only when it
# links the library that owns the header's folder (docs/architecture.md).
#
# Sources keep their include spellings ("daemon/job/job.h"), but the
# repository root is on no include path. Instead
#
#   gnmr_layer_include(gnmr_job PUBLIC daemon/job)
#
# creates the symbolic link
#
#   <build>/layer_include/gnmr_job/daemon/job -> <source>/daemon/job
#
# and puts <build>/layer_include/gnmr_job on gnmr_job's include path with the
# given scope, so "daemon/job/job.h" resolves in gnmr_job and in whatever
# links it (PUBLIC), and nowhere else: an include against the layer order
# fails to compile ("No such file or directory"), besides the include_layers
# ctest. A path may be a folder (all it holds, subfolders too) or one file.
# PRIVATE paths go to a root of their own (<target>.private), so a target may
# keep part of its folders to itself. Build tree only ($<BUILD_INTERFACE>):
# installed consumers see the public <gnmr/...> headers alone.
#
#   gnmr_layer_include(<target> <PUBLIC|PRIVATE|INTERFACE> <path>...
#                      [<PUBLIC|PRIVATE|INTERFACE> <path>...]
#                      [EXCLUDING <subfolder>...])
#
# Paths are relative to the repository root; two paths of one root must not
# nest (the link of the outer one already holds the inner one).
#
# EXCLUDING keeps subfolders of the (one) folder given out of it, for a
# folder that holds other layers too (controller/ and its types/ and
# publish/): the folder becomes a directory of links to each of its entries
# but those, and a new entry re-runs the configure that links it.
function(gnmr_layer_include target)
  set(scope "")
  set(args ${ARGN})
  set(excluded "")
  list(FIND args EXCLUDING at)
  if(at GREATER -1)
    math(EXPR first "${at} + 1")
    list(SUBLIST args ${first} -1 excluded)
    list(SUBLIST args 0 ${at} args)
  endif()
  foreach(arg IN LISTS args)
    if(arg MATCHES "^(PUBLIC|PRIVATE|INTERFACE)$")
      set(scope ${arg})
      continue()
    endif()
    if(scope STREQUAL "")
      message(FATAL_ERROR "gnmr_layer_include(${target}): scope before ${arg}")
    endif()
    if(NOT EXISTS ${PROJECT_SOURCE_DIR}/${arg})
      message(FATAL_ERROR "gnmr_layer_include(${target}): no ${PROJECT_SOURCE_DIR}/${arg}")
    endif()
    set(root ${PROJECT_BINARY_DIR}/layer_include/${target})
    if(scope STREQUAL "PRIVATE")
      string(APPEND root ".private")
    endif()
    # The first use of a root in this configure removes the stale links of
    # an earlier one (REMOVE_RECURSE removes links, never what they point to).
    get_property(roots GLOBAL PROPERTY GNMR_LAYER_INCLUDE_ROOTS)
    if(NOT root IN_LIST roots)
      file(REMOVE_RECURSE ${root})
      set_property(GLOBAL APPEND PROPERTY GNMR_LAYER_INCLUDE_ROOTS ${root})
      target_include_directories(${target} ${scope} $<BUILD_INTERFACE:${root}>)
    endif()
    get_filename_component(parent ${root}/${arg} DIRECTORY)
    file(MAKE_DIRECTORY ${parent})
    if(excluded STREQUAL "")
      file(CREATE_LINK ${PROJECT_SOURCE_DIR}/${arg} ${root}/${arg} SYMBOLIC)
      continue()
    endif()
    file(MAKE_DIRECTORY ${root}/${arg})
    file(GLOB entries RELATIVE ${PROJECT_SOURCE_DIR} ${PROJECT_SOURCE_DIR}/${arg}/*)
    foreach(entry IN LISTS entries)
      if(NOT entry IN_LIST excluded)
        file(CREATE_LINK ${PROJECT_SOURCE_DIR}/${entry} ${root}/${entry} SYMBOLIC)
      endif()
    endforeach()
    foreach(entry IN LISTS excluded)
      if(NOT EXISTS ${PROJECT_SOURCE_DIR}/${entry})
        message(FATAL_ERROR "gnmr_layer_include(${target}): no ${PROJECT_SOURCE_DIR}/${entry}")
      endif()
    endforeach()
    set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/${arg})
  endforeach()
endfunction()
