// Calls a templated lambda with the C++ type that matches a runtime DType:
//   dispatch<float, double>(dtype, "Relu", [&]<typename T>() { ... });
// Unlisted dtypes raise an Error naming the op and the types it accepts.
#pragma once

#include <onnxtrain/tensor.h>

#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>

namespace onnxtrain {

template <typename... Ts>
std::string dtype_list() {
  std::string names;
  ((names += (names.empty() ? "" : ", ") + std::string(dtype_name(dtype_of<Ts>()))), ...);
  return names;
}

template <typename F, typename... Ts>
using dispatch_result_t =
    decltype(std::declval<F&>().template operator()<std::tuple_element_t<0, std::tuple<Ts...>>>());

template <typename... Ts, typename F>
dispatch_result_t<F, Ts...> dispatch(DType dtype, std::string_view what, F&& f) {
  using Result = dispatch_result_t<F, Ts...>;
  if constexpr (std::is_void_v<Result>) {
    bool matched = false;
    ((!matched && dtype == dtype_of<Ts>() ? (f.template operator()<Ts>(), matched = true) : false), ...);
    if (matched) return;
  } else {
    std::optional<Result> result;
    ((!result && dtype == dtype_of<Ts>() ? (result.emplace(f.template operator()<Ts>()), true) : false), ...);
    if (result) return std::move(*result);
  }
  throw Error(std::string(what) + ": unsupported element type " + std::string(dtype_name(dtype)) +
                  " (expected one of: " + dtype_list<Ts...>() + ")",
              ErrorKind::kInvalidArgument);
}

// Common type lists.
#define ONNXTRAIN_FLOAT_TYPES float, double, Float16, BFloat16
#define ONNXTRAIN_SIGNED_INT_TYPES int8_t, int16_t, int32_t, int64_t
#define ONNXTRAIN_INT_TYPES ONNXTRAIN_SIGNED_INT_TYPES, uint8_t, uint16_t, uint32_t, uint64_t
#define ONNXTRAIN_NUMERIC_TYPES ONNXTRAIN_FLOAT_TYPES, ONNXTRAIN_INT_TYPES
#define ONNXTRAIN_ALL_TYPES ONNXTRAIN_NUMERIC_TYPES, bool

// The type arithmetic on T happens in: float for the 16-bit floats, T otherwise.
template <typename T>
using compute_type_t = std::conditional_t<std::is_same_v<T, Float16> || std::is_same_v<T, BFloat16>, float, T>;

}  // namespace onnxtrain
