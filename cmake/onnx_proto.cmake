# Generates the ONNX C++ classes from onnx-ml.proto (the ONNX schema, ONNX >= 1.16: IR
# version 10 fields). Where the file comes from, first found:
#   1. -DONNXTRAIN_ONNX_PROTO=/path/to/onnx-ml.proto: any copy of ONNX's schema, e.g.
#      onnx/onnx-ml.proto in an onnx source tree or in an installed onnx Python package;
#      this is how a C++-only build (ONNXTRAIN_BUILD_PYTHON=OFF) needs no Python;
#   2. the onnx Python package of the Python the build runs with (pyproject.toml brings it
#      into an isolated `pip install .` build), or of a python3 on PATH.
# Debian's libonnx-dev is no source: it ships onnx.proto from ONNX 1.12, older than the
# fields the loader reads.
set(ONNXTRAIN_ONNX_PROTO "" CACHE FILEPATH "onnx-ml.proto to generate the ONNX C++ classes from (ONNX >= 1.16)")
if(NOT ONNXTRAIN_ONNX_PROTO)
  set(_python ${Python_EXECUTABLE})
  if(NOT _python)
    find_package(Python3 QUIET COMPONENTS Interpreter)
    set(_python ${Python3_EXECUTABLE})
  endif()
  if(_python)
    execute_process(
      COMMAND ${_python} -c "import onnx, os; print(os.path.join(os.path.dirname(onnx.__file__), 'onnx-ml.proto'))"
      OUTPUT_VARIABLE _proto OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE _status)
    if(_status EQUAL 0 AND EXISTS "${_proto}")
      # Not cached: an isolated pip build's environment is gone by the next configure.
      set(ONNXTRAIN_ONNX_PROTO "${_proto}")
    endif()
  endif()
endif()
if(NOT ONNXTRAIN_ONNX_PROTO)
  message(FATAL_ERROR "onnx-ml.proto (the ONNX schema, ONNX >= 1.16) not found. Either pass "
                      "-DONNXTRAIN_ONNX_PROTO=/path/to/onnx-ml.proto (it is onnx/onnx-ml.proto in an onnx "
                      "source tree or an installed onnx Python package), or build with a Python that has the "
                      "onnx package (`pip install onnx`; `pip install .` brings it by itself). Debian's "
                      "libonnx-dev does not help: its onnx.proto is too old.")
endif()
if(NOT EXISTS "${ONNXTRAIN_ONNX_PROTO}")
  message(FATAL_ERROR "ONNXTRAIN_ONNX_PROTO=${ONNXTRAIN_ONNX_PROTO}: no such file")
endif()
message(STATUS "ONNX schema: ${ONNXTRAIN_ONNX_PROTO}")

set(ONNX_PROTO_INCLUDE_DIR ${CMAKE_CURRENT_BINARY_DIR}/gen)
set(_gen ${ONNX_PROTO_INCLUDE_DIR}/onnx)
file(MAKE_DIRECTORY ${_gen})
configure_file(${ONNXTRAIN_ONNX_PROTO} ${_gen}/onnx-ml.proto COPYONLY)
set(ONNX_PROTO_SRCS ${_gen}/onnx-ml.pb.cc ${_gen}/onnx-ml.pb.h)
add_custom_command(
  OUTPUT ${ONNX_PROTO_SRCS}
  COMMAND protobuf::protoc --proto_path=${ONNX_PROTO_INCLUDE_DIR} --cpp_out=${ONNX_PROTO_INCLUDE_DIR} onnx/onnx-ml.proto
  DEPENDS ${_gen}/onnx-ml.proto protobuf::protoc
  COMMENT "Generating C++ for onnx-ml.proto")
