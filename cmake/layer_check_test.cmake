# The layer check's own test (ctest: layer_check_fails_on_a_call_up). In a copy of the library's
# folders it builds lib's layer check (cmake/tapegrad_rooms.cmake), which must link; then it plants
# a function in lib/ that calls one in ops/, the room above, and a function in ops/ that calls the
# one in lib/. ops' layer check must still link (a call down the layers is fine), and lib's must
# fail on the undefined reference to the ops function.
#
# cmake -DSOURCE_DIR=<tapegrad> -DFOLDERS=lib,ops,... -DWORK_DIR=<scratch> -DC_COMPILER=<cc>
#       -P cmake/layer_check_test.cmake
# WORK_DIR/build is kept between runs, so that a run rebuilds only what changed.
foreach(var SOURCE_DIR FOLDERS WORK_DIR C_COMPILER)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "layer_check_test.cmake: -D${var}=... is missing")
  endif()
endforeach()
string(REPLACE "," ";" FOLDERS "${FOLDERS}")
set(src ${WORK_DIR}/src)
set(build ${WORK_DIR}/build)

# the copy: the top-level CMakeLists.txt, cmake/, include/ and the library's folders (file(COPY)
# keeps the files' times, so an unchanged file is not compiled again)
file(REMOVE_RECURSE ${src})
file(COPY ${SOURCE_DIR}/CMakeLists.txt ${SOURCE_DIR}/cmake ${SOURCE_DIR}/include DESTINATION ${src})
foreach(folder ${FOLDERS})
  get_filename_component(parent ${src}/${folder} DIRECTORY)
  file(COPY ${SOURCE_DIR}/${folder} DESTINATION ${parent})
endforeach()

# runs a command; stops the test with its output unless it exits as `expect` (0 or "nonzero")
function(run expect what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if((expect STREQUAL "0" AND NOT rc EQUAL 0) OR (expect STREQUAL "nonzero" AND rc EQUAL 0))
    message(FATAL_ERROR "${what}: exit ${rc}, expected ${expect}\n${out}")
  endif()
  set(output "${out}" PARENT_SCOPE)
endfunction()

run(0 "configure the copy" ${CMAKE_COMMAND} -S ${src} -B ${build} -DCMAKE_C_COMPILER=${C_COMPILER}
  -DCMAKE_BUILD_TYPE=Debug -DTAPEGRAD_MPI=OFF -DTAPEGRAD_BUILD_CLI=OFF -DTAPEGRAD_BUILD_TESTS=OFF
  -DTAPEGRAD_BUILD_EXAMPLES=OFF -DTAPEGRAD_BUILD_BENCH=OFF -DTAPEGRAD_INSTALL=OFF -DTAPEGRAD_LAYER_CHECK=ON)
run(0 "lib's layer check, before the plant" ${CMAKE_COMMAND} --build ${build} --target tapegrad_lib_layer -j2)

file(WRITE ${src}/lib/tg_layer_check_plant.c
  "/* Planted by cmake/layer_check_test.cmake: lib/ calls ops/, the room above. */\n"
  "int tg_layer_check_planted_in_ops(void);\n"
  "int tg_layer_check_planted_in_lib(void);\n"
  "int tg_layer_check_planted_in_lib(void) { return tg_layer_check_planted_in_ops() + 1; }\n")
file(WRITE ${src}/ops/tg_layer_check_plant.c
  "/* Planted by cmake/layer_check_test.cmake: ops/ calls lib/, the room below. */\n"
  "int tg_layer_check_planted_in_lib(void);\n"
  "int tg_layer_check_planted_in_ops(void);\n"
  "int tg_layer_check_calls_down(void);\n"
  "int tg_layer_check_planted_in_ops(void) { return 1; }\n"
  "int tg_layer_check_calls_down(void) { return tg_layer_check_planted_in_lib(); }\n")

run(0 "ops' layer check, with a call down to lib" ${CMAKE_COMMAND} --build ${build} --target tapegrad_ops_layer -j2)
run(nonzero "lib's layer check, with a call up to ops" ${CMAKE_COMMAND} --build ${build} --target tapegrad_lib_layer -j2)
if(NOT output MATCHES "undefined reference to `tg_layer_check_planted_in_ops'")
  message(FATAL_ERROR "lib's layer check failed, but not on the call up to ops:\n${output}")
endif()
message(STATUS "layer check: lib's check fails on its call up to ops; ops' check links its call down to lib")
