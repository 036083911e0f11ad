#include <onnxtrain/dtype.h>

namespace onnxtrain {

size_t dtype_bits(DType dtype) noexcept {
  switch (dtype) {
    case DType::kFloat64:
    case DType::kInt64:
    case DType::kUInt64:
      return 64;
    case DType::kFloat32:
    case DType::kInt32:
    case DType::kUInt32:
      return 32;
    case DType::kFloat16:
    case DType::kBFloat16:
    case DType::kInt16:
    case DType::kUInt16:
      return 16;
    case DType::kInt8:
    case DType::kUInt8:
    case DType::kBool:
    case DType::kFloat8E4M3FN:
    case DType::kFloat8E4M3FNUZ:
    case DType::kFloat8E5M2:
    case DType::kFloat8E5M2FNUZ:
    case DType::kFloat8E8M0:
      return 8;
    case DType::kInt4:
    case DType::kUInt4:
    case DType::kFloat4E2M1:
      return 4;
    default:
      return 0;
  }
}

size_t dtype_size(DType dtype) noexcept {
  return dtype_bits(dtype) / 8;
}

std::string_view dtype_name(DType dtype) noexcept {
  switch (dtype) {
    case DType::kFloat32:
      return "float";
    case DType::kUInt8:
      return "uint8";
    case DType::kInt8:
      return "int8";
    case DType::kUInt16:
      return "uint16";
    case DType::kInt16:
      return "int16";
    case DType::kInt32:
      return "int32";
    case DType::kInt64:
      return "int64";
    case DType::kString:
      return "string";
    case DType::kBool:
      return "bool";
    case DType::kFloat16:
      return "float16";
    case DType::kFloat64:
      return "double";
    case DType::kUInt32:
      return "uint32";
    case DType::kUInt64:
      return "uint64";
    case DType::kBFloat16:
      return "bfloat16";
    case DType::kFloat8E4M3FN:
      return "float8e4m3fn";
    case DType::kFloat8E4M3FNUZ:
      return "float8e4m3fnuz";
    case DType::kFloat8E5M2:
      return "float8e5m2";
    case DType::kFloat8E5M2FNUZ:
      return "float8e5m2fnuz";
    case DType::kUInt4:
      return "uint4";
    case DType::kInt4:
      return "int4";
    case DType::kFloat4E2M1:
      return "float4e2m1";
    case DType::kFloat8E8M0:
      return "float8e8m0";
    case DType::kSequence:
      return "sequence";
    case DType::kNone:
      return "none";
    default:
      return "undefined";
  }
}

bool is_supported(DType dtype) noexcept {
  return dtype_bits(dtype) != 0;
}

bool is_floating(DType dtype) noexcept {
  return dtype == DType::kFloat32 || dtype == DType::kFloat64 || dtype == DType::kFloat16 || dtype == DType::kBFloat16;
}

bool is_narrow_float(DType dtype) noexcept {
  switch (dtype) {
    case DType::kFloat8E4M3FN:
    case DType::kFloat8E4M3FNUZ:
    case DType::kFloat8E5M2:
    case DType::kFloat8E5M2FNUZ:
    case DType::kFloat8E8M0:
    case DType::kFloat4E2M1:
      return true;
    default:
      return false;
  }
}

bool is_integer(DType dtype) noexcept {
  switch (dtype) {
    case DType::kInt4:
    case DType::kInt8:
    case DType::kInt16:
    case DType::kInt32:
    case DType::kInt64:
    case DType::kUInt4:
    case DType::kUInt8:
    case DType::kUInt16:
    case DType::kUInt32:
    case DType::kUInt64:
      return true;
    default:
      return false;
  }
}

bool is_signed(DType dtype) noexcept {
  return is_floating(dtype) || (is_narrow_float(dtype) && dtype != DType::kFloat8E8M0) || dtype == DType::kInt4 ||
         dtype == DType::kInt8 || dtype == DType::kInt16 || dtype == DType::kInt32 || dtype == DType::kInt64;
}

bool is_packed(DType dtype) noexcept {
  return dtype_bits(dtype) == 4;
}

DType dtype_from_onnx(int32_t code) noexcept {
  const auto dtype = static_cast<DType>(code);
  return is_supported(dtype) || dtype == DType::kString ? dtype : DType::kUndefined;
}

}  // namespace onnxtrain
