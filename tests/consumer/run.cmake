# Installs the already-built library into WORK_DIR/prefix, then uses it as a user would: checks
# that every public header was installed with its library, configures, builds and runs the
# consumer project against it with find_package(distsampler) (each exported target; the MPI one
# under mpirun -np 2; every installed header under -Wpedantic -Werror), and builds main.cc
# through pkg-config, with the command README.md documents.
# -D arguments: SOURCE_DIR BINARY_DIR WORK_DIR VERSION LOADER MPI LIBTORCH (ON/OFF or 1/0: built),
# MPIEXEC.
file(REMOVE_RECURSE ${WORK_DIR})
function(step)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "failed (${rc}): ${ARGN}")
  endif()
endfunction()
set(prefix ${WORK_DIR}/prefix)
step(${CMAKE_COMMAND} --install ${BINARY_DIR} --prefix ${prefix})

# Every header of include/ is installed when its library is, and no other.
file(GLOB_RECURSE want RELATIVE ${SOURCE_DIR}/include ${SOURCE_DIR}/include/distsampler/*.h)
if(NOT LOADER)
  list(FILTER want EXCLUDE REGEX "^distsampler/loader/")
endif()
if(NOT MPI)
  list(REMOVE_ITEM want distsampler/launch/mpi.h)
endif()
if(NOT LIBTORCH)
  list(FILTER want EXCLUDE REGEX "^distsampler/libtorch/")
endif()
list(APPEND want distsampler/version.h)
file(GLOB_RECURSE got RELATIVE ${prefix}/include ${prefix}/include/*)
list(SORT want)
list(SORT got)
if(NOT want STREQUAL got)
  message(FATAL_ERROR "installed headers differ from include/:\n want ${want}\n got  ${got}")
endif()

step(${CMAKE_COMMAND} -S ${SOURCE_DIR}/tests/consumer -B ${WORK_DIR}/build
     -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_BUILD_TYPE=Release -DEXPECT_LIBTORCH=${LIBTORCH})
step(${CMAKE_COMMAND} --build ${WORK_DIR}/build)
step(${WORK_DIR}/build/consumer)
step(${WORK_DIR}/build/all_headers)
foreach(layer LOADER MPI)
  string(TOLOWER ${layer} name)
  if(${layer} AND NOT EXISTS ${WORK_DIR}/build/consumer_${name})
    message(FATAL_ERROR "distsampler::${name} was not exported (no consumer_${name} built)")
  endif()
endforeach()
if(LOADER)
  step(${WORK_DIR}/build/consumer_loader)
endif()
if(MPI)
  step(${MPIEXEC} --allow-run-as-root --oversubscribe -np 2 ${WORK_DIR}/build/consumer_mpi)
endif()

# pkg-config: the version, then a program built with nothing but its flags.
file(GLOB_RECURSE pc ${prefix}/*/distsampler.pc)
get_filename_component(pc_dir "${pc}" DIRECTORY)
set(ENV{PKG_CONFIG_PATH} ${pc_dir})
execute_process(COMMAND pkg-config --modversion distsampler OUTPUT_VARIABLE pc_version
                OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE rc)
if(NOT rc EQUAL 0 OR NOT pc_version STREQUAL VERSION)
  message(FATAL_ERROR "pkg-config --modversion distsampler: '${pc_version}' (${rc}), "
                      "want ${VERSION}")
endif()
file(COPY ${SOURCE_DIR}/tests/consumer/main.cc DESTINATION ${WORK_DIR}/pkg-config)
set(command "c++ -std=c++17 -o consumer main.cc $(pkg-config --cflags --libs distsampler)")
execute_process(COMMAND sh -c "${command}" WORKING_DIRECTORY ${WORK_DIR}/pkg-config RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "building main.cc with pkg-config --cflags --libs distsampler failed (${rc})")
endif()
step(${WORK_DIR}/pkg-config/consumer)
