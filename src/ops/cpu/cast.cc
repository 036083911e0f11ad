// Cast and CastLike: element type conversion between every type a Tensor holds.
//
// Floating point to integer saturates (NaN becomes 0): ONNX leaves out-of-range values
// undefined, and C++ leaves them undefined behaviour, so pick the one well-defined answer.
// Conversions to float16/bfloat16 round once, to nearest even, from the exact source value.
#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <string>
#include <type_traits>

#include "core/dispatch.h"
#include "ops/cpu/elementwise.h"
#include "ops/kernel_registry.h"

namespace onnxtrain {
namespace {

template <typename T>
constexpr bool is_half_float = std::is_same_v<T, Float16> || std::is_same_v<T, BFloat16>;

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

// The float nearest to x, except that an inexact result is rounded to odd (its last bit set).
// Rounding that float to a type with fewer bits then gives the correctly rounded result of x,
// which converting through an ordinarily rounded float would not (double rounding).
inline float round_to_odd_float(double x) {
  const auto f = static_cast<float>(x);
  if (static_cast<double>(f) == x || x != x) return f;
  uint32_t bits = std::bit_cast<uint32_t>(f);
  if (std::abs(static_cast<double>(f)) > std::abs(x)) --bits;  // step back toward zero
  return std::bit_cast<float>(bits | 1u);
}

// v (of a compute type: bool, an integer, float or double) as a To.
template <typename To, typename From>
To convert(From v) {
  if constexpr (std::is_same_v<To, From>) {
    return v;
  } else if constexpr (std::is_same_v<To, bool>) {
    return v != From(0);
  } else if constexpr (is_half_float<To>) {
    if constexpr (std::is_same_v<From, float> || (std::is_integral_v<From> && sizeof(From) <= 2)) {
      return elementwise::store<To>(static_cast<float>(v));  // v is exact as a float
    } else {
      return elementwise::store<To>(round_to_odd_float(static_cast<double>(v)));
    }
  } else if constexpr (std::is_integral_v<To> && std::is_floating_point_v<From>) {
    return saturating_float_to_int<To>(v);
  } else {
    return static_cast<To>(v);  // integers wrap (two's complement), like numpy
  }
}

// Output 0 = input 0 converted to `to`.
void cast(KernelContext& ctx, DType to) {
  const Tensor& x = ctx.input(0);
  if (x.dtype() == to) {
    ctx.set_output(0, x);
    return;
  }
  dispatch<ONNXTRAIN_ALL_TYPES>(x.dtype(), ctx.node().op_type + " input", [&]<typename From>() {
    dispatch<ONNXTRAIN_ALL_TYPES>(to, ctx.node().op_type + " target", [&]<typename To>() {
      // A buffer of its own: threads writing a narrower type over the input would overwrite
      // elements other threads have yet to read.
      Tensor& out = ctx.allocate_output(0, to, x.shape());
      elementwise::map(x.data<From>(), out.data<To>(), x.numel(), [](auto v) { return convert<To>(v); });
    });
  });
}

const KernelRegistration kCast{
    "", "Cast", 6, kLatestOpset, [](const KernelInfo& info) {
      const int64_t code = info.int_attribute("to");
      const DType to = dtype_from_onnx(static_cast<int32_t>(code));
      if (!is_supported(to)) {
        info.fail("attribute 'to' is element type " + std::to_string(code) +
                  ", which onnxtrain cannot hold (expected one of: " + dtype_list<ONNXTRAIN_ALL_TYPES>() + ")");
      }
      // 'saturate' (opset 19+) only concerns float8 targets, which onnxtrain lacks.
      return make_kernel([to](KernelContext& ctx) { cast(ctx, to); });
    }};

const KernelRegistration kCastLike{"", "CastLike", 15, kLatestOpset, [](const KernelInfo&) {
                                     return make_kernel([](KernelContext& ctx) { cast(ctx, ctx.input(1).dtype()); });
                                   }};

}  // namespace
}  // namespace onnxtrain
