# Installs the already-built library into WORK_DIR/prefix, then configures, builds and runs the
# consumer project against it with find_package(distsampler).
file(REMOVE_RECURSE ${WORK_DIR})
function(step)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "failed (${rc}): ${ARGN}")
  endif()
endfunction()
step(${CMAKE_COMMAND} --install ${BINARY_DIR} --prefix ${WORK_DIR}/prefix)
step(${CMAKE_COMMAND} -S ${SOURCE_DIR}/tests/consumer -B ${WORK_DIR}/build
     -DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix -DCMAKE_BUILD_TYPE=Release)
step(${CMAKE_COMMAND} --build ${WORK_DIR}/build)
step(${WORK_DIR}/build/consumer)
if(EXISTS ${WORK_DIR}/build/consumer_loader)
  step(${WORK_DIR}/build/consumer_loader)
else()
  message(FATAL_ERROR "distsampler::loader was not exported (no consumer_loader built)")
endif()
