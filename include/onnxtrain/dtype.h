// Element types. The numeric values are ONNX's TensorProto.DataType codes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace onnxtrain {

enum class DType : int32_t {
  kUndefined = 0,
  kFloat32 = 1,
  kUInt8 = 2,
  kInt8 = 3,
  kUInt16 = 4,
  kInt16 = 5,
  kInt32 = 6,
  kInt64 = 7,
  kString = 8,
  kBool = 9,
  kFloat16 = 10,
  kFloat64 = 11,
  kUInt32 = 12,
  kUInt64 = 13,
  kBFloat16 = 16,
};

// Bytes per element; 0 for types onnxtrain cannot hold in a tensor.
size_t dtype_size(DType dtype) noexcept;
// The ONNX spelling: "float", "int64", "bfloat16", ...
std::string_view dtype_name(DType dtype) noexcept;
// True for the element types a Tensor can hold.
bool is_supported(DType dtype) noexcept;
bool is_floating(DType dtype) noexcept;
bool is_integer(DType dtype) noexcept;  // signed or unsigned, not bool
bool is_signed(DType dtype) noexcept;
// Maps an ONNX TensorProto.DataType code; kUndefined when onnxtrain does not know it.
DType dtype_from_onnx(int32_t code) noexcept;

}  // namespace onnxtrain
