# tests/downstream/run.cmake (a CTest script): installs the build into a scratch
# prefix, moves the prefix (so nothing compiled in at install time can be used),
# then configures, builds and runs the C-only project tests/downstream against it:
#  1. shared and static, as a user would;
#  2. with find_package(CUDAToolkit) disabled: the shared library needs no CUDA
#     toolkit, and the static one falls back to the libcudart_static.a the build used;
#  3. (CUDA builds) with no libcudart_static.a to be found: a shared-only project
#     still works, and one that links mnemo::mnemo_static fails, naming what is missing.
# Each program also runs with MNEMO_TRACE set: the recorder's object is kept in
# the static link and writes its trace at exit.
file(REMOVE_RECURSE ${WORK})
execute_process(COMMAND ${CMAKE_COMMAND} --install ${BUILD} --prefix ${WORK}/first
                RESULT_VARIABLE rc OUTPUT_QUIET)
if(rc)
  message(FATAL_ERROR "install failed")
endif()
file(RENAME ${WORK}/first ${WORK}/prefix)

function(downstream name expect)
  set(dir ${WORK}/${name})
  execute_process(COMMAND ${CMAKE_COMMAND} -E env --unset=CUDA_PATH ${CMAKE_COMMAND} -S ${SRC} -B ${dir} -G Ninja
                  -DCMAKE_PREFIX_PATH=${WORK}/prefix -DCMAKE_C_COMPILER=${CC}
                  "-DCMAKE_C_FLAGS=${CFLAGS}" "-DCMAKE_EXE_LINKER_FLAGS=${LDFLAGS}" ${ARGN}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(expect STREQUAL "fail")
    if(NOT rc OR NOT err MATCHES "mnemo::cudart_static_NOT_FOUND")
      message(FATAL_ERROR "${name}: expected a configure error naming mnemo::cudart_static_NOT_FOUND (rc ${rc})\n${out}\n${err}")
    endif()
    message(STATUS "${name}: refused as expected")
    return()
  endif()
  if(rc)
    message(FATAL_ERROR "${name}: configure failed\n${out}\n${err}")
  endif()
  execute_process(COMMAND ${CMAKE_COMMAND} --build ${dir} RESULT_VARIABLE rc)
  if(rc)
    message(FATAL_ERROR "${name}: build failed")
  endif()
  file(GLOB exes ${dir}/use_*)
  foreach(exe IN LISTS exes)
    file(REMOVE ${exe}.trace)
    execute_process(COMMAND ${CMAKE_COMMAND} -E env MNEMO_TRACE=${exe}.trace ${exe} RESULT_VARIABLE rc)
    if(rc)
      message(FATAL_ERROR "${name}: ${exe} failed")
    endif()
    if(NOT EXISTS ${exe}.trace)
      message(FATAL_ERROR "${name}: ${exe} wrote no MNEMO_TRACE trace (the recorder was not linked in)")
    endif()
  endforeach()
  message(STATUS "${name}: ok")
endfunction()

downstream(as_a_user ok)
downstream(no_cuda_package ok -DCMAKE_DISABLE_FIND_PACKAGE_CUDAToolkit=ON)
if(HAS_CUDA)
  set(hide -DCMAKE_DISABLE_FIND_PACKAGE_CUDAToolkit=ON "-DCMAKE_IGNORE_PATH=${CUDA_LIBDIR}")
  downstream(no_cudart_shared_only ok ${hide} -DMNEMO_DS_STATIC=OFF)
  downstream(no_cudart_static fail ${hide})
endif()
