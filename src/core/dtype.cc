#include <onnxtrain/dtype.h>

namespace onnxtrain {

size_t dtype_size(DType dtype) noexcept {
  switch (dtype) {
    case DType::kFloat64:
    case DType::kInt64:
    case DType::kUInt64: return 8;
    case DType::kFloat32:
    case DType::kInt32:
    case DType::kUInt32: return 4;
    case DType::kFloat16:
    case DType::kBFloat16:
    case DType::kInt16:
    case DType::kUInt16: return 2;
    case DType::kInt8:
    case DType::kUInt8:
    case DType::kBool: return 1;
    default: return 0;
  }
}

std::string_view dtype_name(DType dtype) noexcept {
  switch (dtype) {
    case DType::kFloat32: return "float";
    case DType::kUInt8: return "uint8";
    case DType::kInt8: return "int8";
    case DType::kUInt16: return "uint16";
    case DType::kInt16: return "int16";
    case DType::kInt32: return "int32";
    case DType::kInt64: return "int64";
    case DType::kString: return "string";
    case DType::kBool: return "bool";
    case DType::kFloat16: return "float16";
    case DType::kFloat64: return "double";
    case DType::kUInt32: return "uint32";
    case DType::kUInt64: return "uint64";
    case DType::kBFloat16: return "bfloat16";
    default: return "undefined";
  }
}

bool is_supported(DType dtype) noexcept { return dtype_size(dtype) != 0; }

bool is_floating(DType dtype) noexcept {
  return dtype == DType::kFloat32 || dtype == DType::kFloat64 || dtype == DType::kFloat16 ||
         dtype == DType::kBFloat16;
}

bool is_integer(DType dtype) noexcept {
  switch (dtype) {
    case DType::kInt8:
    case DType::kInt16:
    case DType::kInt32:
    case DType::kInt64:
    case DType::kUInt8:
    case DType::kUInt16:
    case DType::kUInt32:
    case DType::kUInt64: return true;
    default: return false;
  }
}

bool is_signed(DType dtype) noexcept {
  return is_floating(dtype) || dtype == DType::kInt8 || dtype == DType::kInt16 ||
         dtype == DType::kInt32 || dtype == DType::kInt64;
}

DType dtype_from_onnx(int32_t code) noexcept {
  const auto dtype = static_cast<DType>(code);
  return is_supported(dtype) || dtype == DType::kString ? dtype : DType::kUndefined;
}

}  // namespace onnxtrain
