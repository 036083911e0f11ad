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
  // The low-precision types of quantized models (float8.h). They are storage formats: a
  // kernel converts them (Cast, DequantizeLinear) before it computes.
  kFloat8E4M3FN = 17,
  kFloat8E4M3FNUZ = 18,
  kFloat8E5M2 = 19,
  kFloat8E5M2FNUZ = 20,
  kUInt4 = 21,       // packed: two per byte, element 2i in the low half of byte i
  kInt4 = 22,        // packed, as kUInt4
  kFloat4E2M1 = 23,  // packed, as kUInt4
  kFloat8E8M0 = 24,
  // Not element types: the kinds of value that are not a dense tensor, carried by a Tensor
  // of shape [] so that they travel wherever tensors do (as TensorFlow carries its lists in
  // variant tensors). ONNX numbers no tensor type below zero.
  kSequence = -1,  // seq(tensor): Tensor::sequence()
  kNone = -2,      // an optional without a value: Tensor::none()
};

// Bits per element: 4 for the packed types, 0 for types onnxtrain cannot hold in a tensor.
size_t dtype_bits(DType dtype) noexcept;
// Bytes per element; 0 for the packed 4-bit types (an element has no byte of its own) and for
// types onnxtrain cannot hold in a tensor.
size_t dtype_size(DType dtype) noexcept;
// The bytes `count` elements occupy (packed types round up to whole bytes).
inline size_t dtype_bytes(DType dtype, size_t count) noexcept {
  return (count * dtype_bits(dtype) + 7) / 8;
}
// The ONNX spelling: "float", "int64", "bfloat16", "float8e4m3fn", ...
std::string_view dtype_name(DType dtype) noexcept;
// True for the element types a Tensor can hold.
bool is_supported(DType dtype) noexcept;
// True for kSequence and kNone: values a kernel reads only when it says it takes them.
inline bool is_container(DType dtype) noexcept {
  return dtype == DType::kSequence || dtype == DType::kNone;
}
// float, double, float16, bfloat16: the types kernels compute in and gradients flow through.
bool is_floating(DType dtype) noexcept;
// The float8 formats and float4e2m1: floating-point storage formats, no arithmetic.
bool is_narrow_float(DType dtype) noexcept;
bool is_integer(DType dtype) noexcept;  // signed or unsigned, 4 to 64 bits, not bool
bool is_signed(DType dtype) noexcept;
// int4, uint4, float4e2m1: two elements per byte. Only kernels that declare it see them.
bool is_packed(DType dtype) noexcept;
// Maps an ONNX TensorProto.DataType code; kUndefined when onnxtrain does not know it.
DType dtype_from_onnx(int32_t code) noexcept;

}  // namespace onnxtrain
