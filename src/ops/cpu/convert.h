// Conversions between element types, the one place for them: Cast, CastLike and the
// quantization kernels (quantize.cc) use them.
//
// Every element type a tensor holds has an accessor that reads element i as a compute value
// and writes element i from one:
//   Standard<T>  the types elementwise.h loads and stores (float16/bfloat16 compute in float);
//   Narrow<T>    the float8 formats (float8.h), read exactly as float;
//   Int4, UInt4  read as int32;  Float4E2M1  read exactly as float.
// The last three are packed two per byte (core/packed.h): they are written a pair of
// elements at a time (write_range), never element by element.
//
// Rules (ONNX leaves out-of-range float -> integer undefined; these are the well-defined
// choices onnxtrain makes everywhere):
// - floating point to an integer of 8 bits or more truncates toward zero and saturates; NaN
//   gives 0;
// - floating point to int4/uint4 truncates toward zero and keeps the low 4 bits, as integer
//   sources do (onnx.reference and onnxruntime wrap there too);
// - integers to integers wrap (two's complement), like numpy;
// - to a float type narrower than the source: one rounding to nearest even from the exact
//   source value (never through float with a second rounding);
// - to a float8 type: saturate and, for float8e8m0, the rounding mode as Options says.
#pragma once

#include <onnxtrain/float8.h>
#include <onnxtrain/packed.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>

#include "core/dispatch.h"
#include "ops/cpu/elementwise.h"

namespace onnxtrain::convert {

// What Cast's attributes choose for float8 targets.
struct Options {
  bool saturate = true;
  narrow_float::E8M0::Round round = narrow_float::E8M0::Round::kUp;
};

// x clamped into To's range and truncated toward zero; NaN gives 0.
template <typename To, typename F>
To saturating_float_to_int(F x) {
  constexpr int digits = std::numeric_limits<To>::digits;
  constexpr int mantissa = std::numeric_limits<F>::digits;
  // 2^digits, the first value above To's maximum (exact: a power of two).
  constexpr F limit = static_cast<F>(std::numeric_limits<To>::max() / 2 + 1) * F(2);
  // The largest F below 2^digits: To's maximum with the bits F cannot hold cleared.
  constexpr int dropped = digits > mantissa ? digits - mantissa : 0;
  constexpr F below = static_cast<F>((static_cast<uint64_t>(std::numeric_limits<To>::max()) >> dropped) << dropped);
  constexpr F lo = static_cast<F>(std::numeric_limits<To>::lowest());  // 0 or -2^digits: exact
  const F clamped = x != x ? F(0) : std::min(std::max(x, lo), below);
  const auto truncated = static_cast<To>(clamped);
  return x >= limit ? std::numeric_limits<To>::max() : truncated;
}

// The float nearest to v, except that an inexact result is rounded to odd (its last bit
// set). Rounding that float to a type of at most 22 significant bits then gives the
// correctly rounded v, which converting through an ordinarily rounded float would not
// (double rounding).
template <typename V>
float round_to_odd_float(V v) {
  if constexpr (std::is_same_v<V, float> || std::is_same_v<V, bool>) {
    return static_cast<float>(v);
  } else if constexpr (std::is_floating_point_v<V>) {
    const auto f = static_cast<float>(v);
    if (static_cast<V>(f) == v || v != v) return f;
    uint32_t bits = std::bit_cast<uint32_t>(f);
    if (std::abs(static_cast<V>(f)) > std::abs(v)) --bits;  // step back toward zero
    return std::bit_cast<float>(bits | 1u);
  } else {
    const bool negative = v < V(0);
    const uint64_t a = negative ? uint64_t{0} - static_cast<uint64_t>(v) : static_cast<uint64_t>(v);
    if (a < (uint64_t{1} << 24)) return negative ? -static_cast<float>(a) : static_cast<float>(a);
    // Keep the 24 leading bits; any bit dropped makes the last kept one 1.
    const int shift = 40 - std::countl_zero(a);
    const uint64_t kept = (a >> shift) | ((a & ((uint64_t{1} << shift) - 1)) != 0);
    const float f = std::ldexp(static_cast<float>(kept), shift);
    return negative ? -f : f;
  }
}

// v (a compute value: bool, an integer, float or double) as a To of a standard type.
template <typename To, typename From>
To to_standard(From v) {
  if constexpr (std::is_same_v<To, From>) {
    return v;
  } else if constexpr (std::is_same_v<To, bool>) {
    return v != From(0);
  } else if constexpr (std::is_same_v<To, Float16> || std::is_same_v<To, BFloat16>) {
    return elementwise::store<To>(round_to_odd_float(v));
  } else if constexpr (std::is_integral_v<To> && std::is_floating_point_v<From>) {
    return saturating_float_to_int<To>(v);
  } else {
    return static_cast<To>(v);  // integers wrap (two's complement), like numpy
  }
}

// The low 4 bits of v as an integer (int4/uint4 targets).
template <typename V>
uint8_t int4_bits(V v) {
  if constexpr (std::is_floating_point_v<V>) {
    return static_cast<uint8_t>(saturating_float_to_int<int64_t>(v) & 0x0f);
  } else {
    return static_cast<uint8_t>(static_cast<uint64_t>(v) & 0x0f);
  }
}

template <typename T>
struct Standard {
  using Type = T;
  using Value = elementwise::C<T>;
  static constexpr bool kStandard = true;
  static constexpr bool kPacked = false;
  static Value read(const void* data, int64_t i) { return elementwise::load(static_cast<const T*>(data), i); }
  template <typename V>
  static void write(void* data, int64_t i, V v, const Options&) {
    static_cast<T*>(data)[i] = to_standard<T>(v);
  }
};

template <typename T>  // a Float8<Format>
struct Narrow {
  using Type = T;
  using Value = float;
  static constexpr bool kStandard = false;
  static constexpr bool kPacked = false;
  static float read(const void* data, int64_t i) { return static_cast<float>(static_cast<const T*>(data)[i]); }
  template <typename V>
  static void write(void* data, int64_t i, V v, const Options& options) {
    static_cast<T*>(data)[i] = T::from_bits(static_cast<uint8_t>(encode(round_to_odd_float(v), options)));
  }
  static uint32_t encode(float x, const Options& options) {
    if constexpr (std::is_same_v<T, Float8E8M0>) {
      return Float8E8M0Format::encode(x, options.saturate, options.round);
    } else {
      return T::NarrowFormat::encode(x, options.saturate);
    }
  }
};

template <bool kSigned>
struct FourBitInteger {
  static constexpr DType kDType = kSigned ? DType::kInt4 : DType::kUInt4;
  using Value = int32_t;
  static constexpr bool kStandard = false;
  static constexpr bool kPacked = true;
  static int32_t read(const void* data, int64_t i) { return packed::get_int(data, i, kSigned); }
  template <typename V>
  static uint8_t bits(V v, const Options&) {
    return int4_bits(v);
  }
};

using Int4 = FourBitInteger<true>;
using UInt4 = FourBitInteger<false>;

struct Float4E2M1 {
  static constexpr DType kDType = DType::kFloat4E2M1;
  using Value = float;
  static constexpr bool kStandard = false;
  static constexpr bool kPacked = true;
  static float read(const void* data, int64_t i) { return Float4E2M1Format::decode(packed::get(data, i)); }
  template <typename V>
  static uint8_t bits(V v, const Options&) {
    return static_cast<uint8_t>(Float4E2M1Format::encode(round_to_odd_float(v)));
  }
};

template <typename E>
constexpr DType dtype_of_element() {
  if constexpr (E::kPacked) {
    return E::kDType;
  } else {
    return dtype_of<typename E::Type>();
  }
}

// Writes target elements [begin, end) of `data` from value(i). Packed targets write whole
// bytes: `begin` must be even, and `end` even or the tensor's end.
template <typename Target, typename ValueOf>
void write_range(void* data, int64_t begin, int64_t end, const ValueOf& value, const Options& options) {
  if constexpr (Target::kPacked) {
    packed::write(data, begin, end, [&](int64_t i) { return Target::bits(value(i), options); });
  } else {
    for (int64_t i = begin; i < end; ++i) Target::write(data, i, value(i), options);
  }
}

// Calls f(begin, end) over [0, n) in parallel chunks that start at even indices (see
// write_range), of at least `grain` elements.
template <typename F>
void parallel_pairs(int64_t n, int64_t grain, F&& f) {
  parallel_for((n + 1) / 2, std::max<int64_t>(grain / 2, 1),
               [&](int64_t begin, int64_t end) { f(2 * begin, std::min(2 * end, n)); });
}

// Calls f.template operator()<E>() with E the accessor of `dtype`, which must be among
// `Es`; otherwise an Error names `what` and the accepted types.
template <typename... Es, typename F>
decltype(auto) dispatch_element(DType dtype, std::string_view what, F&& f) {
  using Result = decltype(f.template operator()<std::tuple_element_t<0, std::tuple<Es...>>>());
  if constexpr (std::is_void_v<Result>) {
    bool matched = false;
    ((!matched && dtype == dtype_of_element<Es>() ? (f.template operator()<Es>(), matched = true) : false), ...);
    if (matched) return;
  } else {
    std::optional<Result> result;
    ((!result && dtype == dtype_of_element<Es>() ? (result.emplace(f.template operator()<Es>()), true) : false), ...);
    if (result) return std::move(*result);
  }
  std::string names;
  ((names += (names.empty() ? "" : ", ") + std::string(dtype_name(dtype_of_element<Es>()))), ...);
  throw Error(std::string(what) + ": unsupported element type " + std::string(dtype_name(dtype)) +
                  " (expected one of: " + names + ")",
              ErrorKind::kInvalidArgument);
}

// Accessor lists.
#define ONNXTRAIN_STANDARD_ELEMENTS                                                                                  \
  convert::Standard<float>, convert::Standard<double>, convert::Standard<Float16>, convert::Standard<BFloat16>,      \
      convert::Standard<int8_t>, convert::Standard<int16_t>, convert::Standard<int32_t>, convert::Standard<int64_t>, \
      convert::Standard<uint8_t>, convert::Standard<uint16_t>, convert::Standard<uint32_t>,                          \
      convert::Standard<uint64_t>, convert::Standard<bool>
#define ONNXTRAIN_FLOAT8_ELEMENTS                                                              \
  convert::Narrow<Float8E4M3FN>, convert::Narrow<Float8E4M3FNUZ>, convert::Narrow<Float8E5M2>, \
      convert::Narrow<Float8E5M2FNUZ>, convert::Narrow<Float8E8M0>
#define ONNXTRAIN_PACKED_ELEMENTS convert::Int4, convert::UInt4, convert::Float4E2M1
#define ONNXTRAIN_ALL_ELEMENTS ONNXTRAIN_STANDARD_ELEMENTS, ONNXTRAIN_FLOAT8_ELEMENTS, ONNXTRAIN_PACKED_ELEMENTS

}  // namespace onnxtrain::convert
