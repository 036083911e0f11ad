# Generates C++ for onnx-ml.proto: from the `onnx` Python package when it is installed
# (the newest schema), else from Debian's libonnx-dev.
set(ONNXTRAIN_ONNX_PROTO "" CACHE FILEPATH "onnx-ml.proto to generate the ONNX C++ classes from")
if(NOT ONNXTRAIN_ONNX_PROTO AND Python_EXECUTABLE)
  execute_process(
    COMMAND ${Python_EXECUTABLE} -c "import onnx, os; print(os.path.join(os.path.dirname(onnx.__file__), 'onnx-ml.proto'))"
    OUTPUT_VARIABLE _proto OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE _status)
  if(_status EQUAL 0 AND EXISTS "${_proto}")
    set(ONNXTRAIN_ONNX_PROTO "${_proto}")
  endif()
endif()
if(NOT ONNXTRAIN_ONNX_PROTO)
  find_file(ONNXTRAIN_ONNX_PROTO onnx-ml.proto PATHS /usr/include/onnx NO_DEFAULT_PATH)
endif()
if(NOT ONNXTRAIN_ONNX_PROTO)
  message(FATAL_ERROR "onnx-ml.proto not found: install the onnx Python package or libonnx-dev")
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
