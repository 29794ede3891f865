# The settings every target of tapegrad's own code shares, and the function that makes a folder of
# the source tree its layer (a room). Included by the top-level CMakeLists.txt.

# tapegrad_code_settings(<target>): the warnings, -Werror (TAPEGRAD_WERROR), the sanitizers
# (TAPEGRAD_SANITIZE) or libFuzzer's hooks (TAPEGRAD_FUZZ) and -march=native (TAPEGRAD_NATIVE) on
# one target of tapegrad's own code. Target-scoped: a project that adds tapegrad with
# add_subdirectory keeps its own flags, and its targets get none of these.
function(tapegrad_code_settings target)
  target_compile_definitions(${target} PRIVATE _GNU_SOURCE)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wno-unused-parameter)
  if(TAPEGRAD_WERROR)
    target_compile_options(${target} PRIVATE -Werror)
  endif()
  if(TAPEGRAD_NATIVE AND NOT TAPEGRAD_SANITIZE AND NOT TAPEGRAD_FUZZ)
    target_compile_options(${target} PRIVATE -march=native)
  endif()
  if(TAPEGRAD_SANITIZE)
    target_compile_options(${target} PRIVATE -fsanitize=address,undefined -fno-omit-frame-pointer
                           -fno-sanitize-recover=undefined)
    target_link_options(${target} PRIVATE -fsanitize=address,undefined)
  endif()
  if(TAPEGRAD_FUZZ)
    # the library gets libFuzzer's coverage hooks; only the harnesses link libFuzzer's main
    target_compile_options(${target} PRIVATE -fsanitize=fuzzer-no-link,address,undefined
                           -fno-sanitize-recover=undefined -fno-omit-frame-pointer -g)
    target_link_options(${target} PRIVATE -fsanitize=address,undefined)
  endif()
endfunction()

# tapegrad_source_tree_includes(<target>): the include path of tapegrad's own code, the source
# root ("lib/kernels.h") and include/ ("tapegrad/tape.h"). Private to each target that uses it:
# the libraries a program links (tapegrad, tapegrad_static) give include/ alone.
function(tapegrad_source_tree_includes target)
  target_include_directories(${target} PRIVATE ${PROJECT_SOURCE_DIR} ${PROJECT_SOURCE_DIR}/include)
endfunction()

# tapegrad_add_room(<room> [BELOW <room>...] [LIBS <library>...] [OBJECTS <objects>...]
#                   [FAULT_ONLY <source>...] [PROGRAM])
#
# Called by a folder's CMakeLists.txt: makes tapegrad_<room>, a static library of the folder's *.c
# (and OBJECTS) that links the room(s) directly below it (BELOW, rooms made before this one) and
# the outside libraries its own code calls (LIBS), and nothing else. A room of the library (not
# PROGRAM) is compiled position-independent with every symbol hidden but those the public headers
# declare; the libraries tapegrad and tapegrad_static are linked from the objects of every such
# room (the global property TAPEGRAD_LIBRARY_OBJECTS).
#
# The layer check (TAPEGRAD_LAYER_CHECK): tapegrad_<room>_layer is an executable of every object
# of the room, linked with BELOW and LIBS alone. A call from the room to a room above it is then an
# undefined reference, and the build fails; cmake/layer_check_test.cmake plants one to show it.
#
# The faults the tests inject (support/fault.h) exist in a test variant only. A source of the room
# that asks for one (found by its include of support/fault.h) is compiled twice: into the room, where
# each question is a constant `false`, and with TAPEGRAD_FAULT_INJECTION, together with
# FAULT_ONLY, into tapegrad_<room>_faults, from which tests/CMakeLists.txt links the test variant
# (the global property TAPEGRAD_FAULT_LIBRARY_OBJECTS).
function(tapegrad_add_room room)
  cmake_parse_arguments(PARSE_ARGV 1 arg "PROGRAM" "" "BELOW;LIBS;OBJECTS;FAULT_ONLY")
  set(target tapegrad_${room})
  set(below "")
  foreach(lower ${arg_BELOW})
    if(NOT TARGET tapegrad_${lower})
      message(FATAL_ERROR "${room} links ${lower}, which is no room below it (rooms are added from the bottom up)")
    endif()
    list(APPEND below tapegrad_${lower})
  endforeach()

  file(GLOB sources CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/*.c)
  set(fault_only "")
  foreach(src ${arg_FAULT_ONLY})
    list(APPEND fault_only ${CMAKE_CURRENT_SOURCE_DIR}/${src})
  endforeach()
  list(REMOVE_ITEM sources ${fault_only})
  set(fault_sources "")
  foreach(src ${sources})
    file(STRINGS ${src} asks_for_faults REGEX "^#include \"support/fault\\.h\"")
    if(asks_for_faults)
      list(APPEND fault_sources ${src})
    endif()
  endforeach()
  list(REMOVE_ITEM sources ${fault_sources})

  set(objects ${arg_OBJECTS})
  set(fault_objects ${arg_OBJECTS})
  set(parts ${target})
  if(fault_sources)
    add_library(${target}_faultfree OBJECT ${fault_sources})
    list(APPEND parts ${target}_faultfree)
    list(APPEND objects $<TARGET_OBJECTS:${target}_faultfree>)
  endif()
  if(fault_sources OR fault_only)
    add_library(${target}_faults OBJECT EXCLUDE_FROM_ALL ${fault_sources} ${fault_only})
    target_compile_definitions(${target}_faults PRIVATE TAPEGRAD_FAULT_INJECTION)
    list(APPEND parts ${target}_faults)
    list(APPEND fault_objects $<TARGET_OBJECTS:${target}_faults>)
  endif()
  add_library(${target} STATIC ${sources} ${objects})
  foreach(part ${parts})
    if(NOT arg_PROGRAM)
      set_target_properties(${part} PROPERTIES POSITION_INDEPENDENT_CODE ON C_VISIBILITY_PRESET hidden)
    endif()
    tapegrad_code_settings(${part})
    tapegrad_source_tree_includes(${part})
  endforeach()
  target_link_libraries(${target} PUBLIC ${below} PRIVATE ${arg_LIBS})
  # the objects compiled apart get the room's usage requirements (include paths of LIBS)
  list(REMOVE_ITEM parts ${target})
  foreach(part ${parts})
    target_link_libraries(${part} PRIVATE ${below} ${arg_LIBS})
  endforeach()

  if(NOT arg_PROGRAM)
    set_property(GLOBAL APPEND PROPERTY TAPEGRAD_LIBRARY_OBJECTS $<TARGET_OBJECTS:${target}> ${objects})
    set_property(GLOBAL APPEND PROPERTY TAPEGRAD_FAULT_LIBRARY_OBJECTS $<TARGET_OBJECTS:${target}> ${fault_objects})
    set_property(GLOBAL APPEND PROPERTY TAPEGRAD_LIBRARY_DEPENDENCIES ${arg_LIBS})
    file(RELATIVE_PATH folder ${PROJECT_SOURCE_DIR} ${CMAKE_CURRENT_SOURCE_DIR})
    set_property(GLOBAL APPEND PROPERTY TAPEGRAD_LIBRARY_FOLDERS ${folder})
  endif()

  if(TAPEGRAD_LAYER_CHECK)
    add_executable(${target}_layer $<TARGET_OBJECTS:tapegrad_layer_check_main> $<TARGET_OBJECTS:${target}> ${objects})
    target_link_libraries(${target}_layer PRIVATE ${below} ${arg_LIBS})
    tapegrad_code_settings(${target}_layer)
    set_target_properties(${target}_layer PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/layer_check)
  endif()
endfunction()
