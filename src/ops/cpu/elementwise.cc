// Elementwise kernels: arithmetic, math functions, comparisons, logic, selection.
// The loops live in elementwise.h; this file says what each op computes.
#include "ops/cpu/elementwise.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "core/dispatch.h"
#include "ops/cpu/vector_math.h"
#include "ops/kernel_registry.h"

namespace onnxtrain {
namespace {

using elementwise::binary;
using elementwise::broadcast_map;
using elementwise::Operand;
using elementwise::require_same_dtype;
using elementwise::unary;

#define ONNXTRAIN_UNSIGNED_INT_TYPES uint8_t, uint16_t, uint32_t, uint64_t

// ---- integer arithmetic that wraps instead of overflowing (signed overflow is undefined) ----

template <typename T>
constexpr bool is_signed_int = std::is_signed_v<T> && !std::is_floating_point_v<T>;

template <typename T>
T wrapping_add(T x, T y) {
  if constexpr (is_signed_int<T>) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(static_cast<U>(x) + static_cast<U>(y)));
  } else {
    return x + y;
  }
}

template <typename T>
T wrapping_sub(T x, T y) {
  if constexpr (is_signed_int<T>) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(static_cast<U>(x) - static_cast<U>(y)));
  } else {
    return x - y;
  }
}

template <typename T>
T wrapping_mul(T x, T y) {
  if constexpr (is_signed_int<T>) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(static_cast<U>(x) * static_cast<U>(y)));
  } else {
    return x * y;
  }
}

// Integer division truncates toward zero; the one quotient that overflows (min / -1)
// wraps to min instead of trapping.
template <typename T>
T integer_divide(T x, T y) {
  if constexpr (is_signed_int<T>) {
    if (y == -1) return wrapping_sub(T(0), x);
  }
  return static_cast<T>(x / y);
}

// The remainder with the dividend's sign (C's %, ONNX Mod with fmod=1).
template <typename T>
T truncated_remainder(T x, T y) {
  if constexpr (is_signed_int<T>) {
    if (y == -1) return 0;
  }
  return static_cast<T>(x % y);
}

// The remainder with the divisor's sign (Python's %, ONNX Mod with fmod=0).
template <typename T>
T floored_remainder(T x, T y) {
  const T r = truncated_remainder(x, y);
  if constexpr (is_signed_int<T>) {
    if (r != 0 && ((r < 0) != (y < 0))) return static_cast<T>(r + y);
  }
  return r;
}

// Integer division by zero traps on the CPU; check the divisor first.
template <typename T>
void require_nonzero_divisor(KernelContext& ctx, const Tensor& divisor) {
  if constexpr (std::is_integral_v<T>) {
    const T* d = divisor.data<T>();
    const int64_t n = divisor.numel();
    bool zero = false;
    for (int64_t i = 0; i < n; ++i) zero |= d[i] == 0;
    if (zero) ctx.fail("integer division by zero: input 1 (the divisor) holds a 0");
  }
}

// ---- Add, Sub, Mul, Div ----

// A kernel for same-typed operands of `Types`; op(x, y) on compute types.
template <typename... Types, typename Op>
std::unique_ptr<OpKernel> same_type_binary(Op op) {
  return make_kernel([op](KernelContext& ctx) {
    require_same_dtype(ctx, 0, 1);
    dispatch<Types...>(ctx.input(0).dtype(), ctx.node().op_type, [&]<typename T>() { binary<T, T, T>(ctx, op); });
  });
}

template <typename Op>
KernelFactory arithmetic(Op op) {
  return [op](const KernelInfo&) { return same_type_binary<ONNXTRAIN_NUMERIC_TYPES>(op); };
}

const KernelRegistration kAdd{"", "Add", 7, kLatestOpset,
                              arithmetic([](auto x, auto y) { return wrapping_add(x, y); })};
const KernelRegistration kSub{"", "Sub", 7, kLatestOpset,
                              arithmetic([](auto x, auto y) { return wrapping_sub(x, y); })};
const KernelRegistration kMul{"", "Mul", 7, kLatestOpset,
                              arithmetic([](auto x, auto y) { return wrapping_mul(x, y); })};

const KernelRegistration kDiv{"", "Div", 7, kLatestOpset, [](const KernelInfo&) {
                                return make_kernel([](KernelContext& ctx) {
                                  require_same_dtype(ctx, 0, 1);
                                  dispatch<ONNXTRAIN_NUMERIC_TYPES>(ctx.input(0).dtype(), "Div", [&]<typename T>() {
                                    require_nonzero_divisor<T>(ctx, ctx.input(1));
                                    binary<T, T, T>(ctx, [](auto x, auto y) {
                                      if constexpr (std::is_integral_v<decltype(x)>) {
                                        return integer_divide(x, y);
                                      } else {
                                        return x / y;
                                      }
                                    });
                                  });
                                });
                              }};

// ---- Pow: base type T, exponent type E (equal before opset 12) ----

// x^n for an integer base and exponent, exactly (wrapping on overflow); a negative n
// truncates 1/x^|n| toward zero.
template <typename T, typename E>
T integer_power(T x, E n) {
  if constexpr (std::is_signed_v<E>) {
    if (n < 0) {
      if (x == 1) return 1;
      if constexpr (std::is_signed_v<T>) {
        if (x == -1) return (n & 1) ? T(-1) : T(1);
      }
      return 0;
    }
  }
  T result = 1;
  for (auto e = static_cast<std::make_unsigned_t<E>>(n); e != 0; e >>= 1) {
    if (e & 1) result = wrapping_mul(result, x);
    x = wrapping_mul(x, x);
  }
  return result;
}

// A floating-point value in T's range, truncated toward zero (NaN becomes 0).
template <typename T>
T float_to_integer(double v) {
  if (!(v == v)) return 0;
  if (v <= static_cast<double>(std::numeric_limits<T>::lowest())) return std::numeric_limits<T>::lowest();
  if (v >= static_cast<double>(std::numeric_limits<T>::max())) return std::numeric_limits<T>::max();
  return static_cast<T>(v);
}

template <typename T, typename E>
void power(KernelContext& ctx) {
  using CT = compute_type_t<T>;
  using CE = compute_type_t<E>;
  const Tensor& exponent = ctx.input(1);
  if constexpr (std::is_floating_point_v<CT>) {
    // Models raise to small constant powers (x^2 in variances and L2 terms, x^3 in GPT-2's
    // GELU): multiplies vectorize, where std::pow costs ~10 ns an element. They differ
    // from pow by an ulp or two at most.
    const double e = exponent.numel() == 1 ? static_cast<double>(CE(exponent.data<E>()[0])) : 0.0;
    if (e == 2.0) {
      binary<T, E, T>(ctx, [](CT x, CE) { return x * x; });
      return;
    }
    if (e == 3.0) {
      binary<T, E, T>(ctx, [](CT x, CE) { return x * x * x; });
      return;
    }
    if (e == 4.0) {
      binary<T, E, T>(ctx, [](CT x, CE) { return (x * x) * (x * x); });
      return;
    }
    binary<T, E, T>(ctx, [](CT x, CE y) {
      using P = std::conditional_t<std::is_same_v<CE, double>, double, CT>;
      return static_cast<CT>(std::pow(static_cast<P>(x), static_cast<P>(y)));
    });
  } else if constexpr (std::is_integral_v<CE>) {
    binary<T, E, T>(ctx, [](CT x, CE y) { return integer_power(x, y); });
  } else {
    binary<T, E, T>(
        ctx, [](CT x, CE y) { return float_to_integer<CT>(std::pow(static_cast<double>(x), static_cast<double>(y))); });
  }
}

const KernelRegistration kPow{"", "Pow", 7, kLatestOpset, [](const KernelInfo&) {
                                return make_kernel([](KernelContext& ctx) {
                                  const DType base = ctx.input(0).dtype();
                                  const DType exponent = ctx.input(1).dtype();
                                  dispatch<ONNXTRAIN_NUMERIC_TYPES>(base, "Pow base", [&]<typename T>() {
                                    dispatch<ONNXTRAIN_NUMERIC_TYPES>(exponent, "Pow exponent",
                                                                      [&]<typename E>() { power<T, E>(ctx); });
                                  });
                                });
                              }};

// ---- Mod ----

const KernelRegistration kMod{
    "", "Mod", 10, kLatestOpset, [](const KernelInfo& info) {
      const bool fmod = info.bool_attribute("fmod", false);
      return make_kernel([fmod](KernelContext& ctx) {
        require_same_dtype(ctx, 0, 1);
        dispatch<ONNXTRAIN_NUMERIC_TYPES>(ctx.input(0).dtype(), "Mod", [&]<typename T>() {
          using CT = compute_type_t<T>;
          if constexpr (std::is_floating_point_v<CT>) {
            if (!fmod) ctx.fail("fmod=0 is only valid for integer inputs; floating-point inputs need fmod=1");
            binary<T, T, T>(ctx, [](CT x, CT y) { return std::fmod(x, y); });
          } else {
            require_nonzero_divisor<T>(ctx, ctx.input(1));
            if (fmod) {
              binary<T, T, T>(ctx, [](CT x, CT y) { return truncated_remainder(x, y); });
            } else {
              binary<T, T, T>(ctx, [](CT x, CT y) { return floored_remainder(x, y); });
            }
          }
        });
      });
    }};

// ---- BitShift ----

const KernelRegistration kBitShift{
    "", "BitShift", 11, kLatestOpset, [](const KernelInfo& info) {
      const std::string direction = info.string_attribute("direction");
      if (direction != "LEFT" && direction != "RIGHT") {
        info.fail("attribute 'direction' is '" + direction + "', expected 'LEFT' or 'RIGHT'");
      }
      const bool left = direction == "LEFT";
      return make_kernel([left](KernelContext& ctx) {
        require_same_dtype(ctx, 0, 1);
        dispatch<ONNXTRAIN_UNSIGNED_INT_TYPES>(ctx.input(0).dtype(), "BitShift", [&]<typename T>() {
          // Shifting by the width or more is undefined in C++; every bit is shifted out.
          constexpr T bits = sizeof(T) * 8;
          if (left) {
            binary<T, T, T>(ctx, [](T x, T y) { return y < bits ? static_cast<T>(x << y) : T(0); });
          } else {
            binary<T, T, T>(ctx, [](T x, T y) { return y < bits ? static_cast<T>(x >> y) : T(0); });
          }
        });
      });
    }};

// ---- Min, Max, Sum, Mean: variadic, broadcasting ----

// True when another input of the node is the same buffer as input i (Sum(x, y, x)).
bool read_twice(KernelContext& ctx, size_t i) {
  for (size_t k = 0; k < ctx.input_count(); ++k) {
    if (k != i && ctx.input(k).raw_data() == ctx.input(i).raw_data()) return true;
  }
  return false;
}

// Folds op over every input into output 0, broadcasting all of them. Starts from an input
// of the output's shape, whose buffer the output may take, except when the node reads that
// buffer again through another input: the passes after the first overwrite it.
template <typename T, typename Op>
Tensor& fold_inputs(KernelContext& ctx, const Op& op) {
  const size_t n = ctx.input_count();
  std::vector<Shape> shapes;
  for (size_t i = 0; i < n; ++i) shapes.push_back(ctx.input(i).shape());
  const Shape shape = broadcast_shapes(shapes);
  const auto full = std::find(shapes.begin(), shapes.end(), shape);
  const size_t start = full == shapes.end() ? 0 : static_cast<size_t>(full - shapes.begin());
  Tensor& out = full != shapes.end() && !read_twice(ctx, start)
                    ? ctx.allocate_output_in_place(0, start, dtype_of<T>(), shape)
                    : ctx.allocate_output(0, dtype_of<T>(), shape);
  if (n == 1) {
    out.copy_from(ctx.input(0));  // a no-op when in place
    return out;
  }
  // Pass one: out = op(input start, next input); each later pass folds one more input in.
  const Tensor& a = ctx.input(start);
  bool initialized = false;
  for (size_t i = 0; i < n; ++i) {
    if (i == start) continue;
    const Tensor& b = ctx.input(i);
    const Operand<T> acc = initialized ? Operand<T>{out.data<T>(), &out.shape()} : Operand<T>{a.data<T>(), &a.shape()};
    broadcast_map(out.data<T>(), shape, op, acc, Operand<T>{b.data<T>(), &b.shape()});
    initialized = true;
  }
  return out;
}

template <typename Op>
std::unique_ptr<OpKernel> variadic(const KernelInfo& info, Op op) {
  if (info.input_count() == 0) info.fail("needs at least one input");
  return make_kernel([op](KernelContext& ctx) {
    require_same_dtype(ctx, 0, ctx.input_count() - 1);
    dispatch<ONNXTRAIN_NUMERIC_TYPES>(ctx.input(0).dtype(), ctx.node().op_type,
                                      [&]<typename T>() { fold_inputs<T>(ctx, op); });
  });
}

// NaN wins, like numpy's minimum/maximum (and onnxruntime). (| rather than ||: no branch.)
template <typename T>
T nan_min(T x, T y) {
  if constexpr (std::is_floating_point_v<T>) {
    return ((x < y) | (x != x)) ? x : y;
  } else {
    return std::min(x, y);
  }
}
template <typename T>
T nan_max(T x, T y) {
  if constexpr (std::is_floating_point_v<T>) {
    return ((x > y) | (x != x)) ? x : y;
  } else {
    return std::max(x, y);
  }
}

const KernelRegistration kMin{"", "Min", 6, kLatestOpset, [](const KernelInfo& info) {
                                return variadic(info, [](auto x, auto y) { return nan_min(x, y); });
                              }};
const KernelRegistration kMax{"", "Max", 6, kLatestOpset, [](const KernelInfo& info) {
                                return variadic(info, [](auto x, auto y) { return nan_max(x, y); });
                              }};
const KernelRegistration kSum{"", "Sum", 6, kLatestOpset, [](const KernelInfo& info) {
                                return variadic(info, [](auto x, auto y) { return wrapping_add(x, y); });
                              }};

const KernelRegistration kMean{"", "Mean", 6, kLatestOpset, [](const KernelInfo& info) {
                                 if (info.input_count() == 0) info.fail("needs at least one input");
                                 return make_kernel([](KernelContext& ctx) {
                                   require_same_dtype(ctx, 0, ctx.input_count() - 1);
                                   dispatch<ONNXTRAIN_FLOAT_TYPES>(ctx.input(0).dtype(), "Mean", [&]<typename T>() {
                                     Tensor& out = fold_inputs<T>(ctx, [](auto x, auto y) { return x + y; });
                                     const auto count = static_cast<compute_type_t<T>>(ctx.input_count());
                                     elementwise::map(out.data<T>(), out.data<T>(), out.numel(),
                                                      [count](auto x) { return x / count; });
                                   });
                                 });
                               }};

// ---- comparisons and logic: bool out ----

template <typename... Types, typename Op>
KernelFactory comparison(Op op) {
  return [op](const KernelInfo&) {
    return make_kernel([op](KernelContext& ctx) {
      require_same_dtype(ctx, 0, 1);
      dispatch<Types...>(ctx.input(0).dtype(), ctx.node().op_type, [&]<typename T>() { binary<T, T, bool>(ctx, op); });
    });
  };
}

const KernelRegistration kEqual{"", "Equal", 7, kLatestOpset,
                                comparison<ONNXTRAIN_ALL_TYPES>([](auto x, auto y) { return x == y; })};
const KernelRegistration kLess{"", "Less", 7, kLatestOpset,
                               comparison<ONNXTRAIN_NUMERIC_TYPES>([](auto x, auto y) { return x < y; })};
const KernelRegistration kLessOrEqual{"", "LessOrEqual", 12, kLatestOpset,
                                      comparison<ONNXTRAIN_NUMERIC_TYPES>([](auto x, auto y) { return x <= y; })};
const KernelRegistration kGreater{"", "Greater", 7, kLatestOpset,
                                  comparison<ONNXTRAIN_NUMERIC_TYPES>([](auto x, auto y) { return x > y; })};
const KernelRegistration kGreaterOrEqual{"", "GreaterOrEqual", 12, kLatestOpset,
                                         comparison<ONNXTRAIN_NUMERIC_TYPES>([](auto x, auto y) { return x >= y; })};

const KernelRegistration kAnd{"", "And", 7, kLatestOpset, comparison<bool>([](bool x, bool y) { return x & y; })};
const KernelRegistration kOr{"", "Or", 7, kLatestOpset, comparison<bool>([](bool x, bool y) { return x | y; })};
const KernelRegistration kXor{"", "Xor", 7, kLatestOpset, comparison<bool>([](bool x, bool y) { return x != y; })};

const KernelRegistration kNot{"", "Not", 1, kLatestOpset, [](const KernelInfo&) {
                                return make_kernel([](KernelContext& ctx) {
                                  dispatch<bool>(ctx.input(0).dtype(), "Not",
                                                 [&]<typename T>() { unary<T>(ctx, [](bool x) { return !x; }); });
                                });
                              }};

// ---- Where ----

// Where moves elements and never looks at their values: B is the unsigned integer as wide as
// the element type.
template <typename B>
void where_select(KernelContext& ctx) {
  const Tensor& condition = ctx.input(0);
  const Tensor& x = ctx.input(1);
  const Tensor& y = ctx.input(2);
  const std::array<const Shape*, 3> shapes{&condition.shape(), &x.shape(), &y.shape()};
  const Shape shape = broadcast_shapes(std::span<const Shape* const>(shapes));
  Tensor& out = x.shape() == shape   ? ctx.allocate_output_in_place(0, 1, x.dtype(), shape)
                : y.shape() == shape ? ctx.allocate_output_in_place(0, 2, x.dtype(), shape)
                                     : ctx.allocate_output(0, x.dtype(), shape);
  broadcast_map(
      static_cast<B*>(out.raw_data()), shape, [](bool c, B a, B b) { return c ? a : b; },
      Operand<bool>{condition.data<bool>(), &condition.shape()},
      Operand<B>{static_cast<const B*>(x.raw_data()), &x.shape()},
      Operand<B>{static_cast<const B*>(y.raw_data()), &y.shape()});
}

const KernelRegistration kWhere{
    "", "Where", 9, kLatestOpset, [](const KernelInfo&) {
      return make_kernel([](KernelContext& ctx) {
        if (ctx.input(0).dtype() != DType::kBool) {
          ctx.fail("input 0 (condition) has element type " + std::string(dtype_name(ctx.input(0).dtype())) +
                   ", expected bool");
        }
        require_same_dtype(ctx, 1, 2);
        switch (dtype_size(ctx.input(1).dtype())) {
          case 1:
            return where_select<uint8_t>(ctx);
          case 2:
            return where_select<uint16_t>(ctx);
          case 4:
            return where_select<uint32_t>(ctx);
          case 8:
            return where_select<uint64_t>(ctx);
          default:
            ctx.fail("unsupported element type " + std::string(dtype_name(ctx.input(1).dtype())));
        }
      });
    }};

// ---- unary math ----

template <typename... Types, typename Op>
KernelFactory math(Op op) {
  return [op](const KernelInfo&) {
    return make_kernel([op](KernelContext& ctx) {
      dispatch<Types...>(ctx.input(0).dtype(), ctx.node().op_type, [&]<typename T>() { unary<T>(ctx, op); });
    });
  };
}

template <typename Op>
KernelFactory float_math(Op op) {
  return math<ONNXTRAIN_FLOAT_TYPES>(op);
}

const KernelRegistration kNeg{"", "Neg", 6, kLatestOpset,
                              math<ONNXTRAIN_FLOAT_TYPES, ONNXTRAIN_SIGNED_INT_TYPES>([](auto x) {
                                if constexpr (std::is_floating_point_v<decltype(x)>) {
                                  return -x;
                                } else {
                                  return wrapping_sub(decltype(x)(0), x);
                                }
                              })};
const KernelRegistration kAbs{"", "Abs", 6, kLatestOpset, math<ONNXTRAIN_NUMERIC_TYPES>([](auto x) {
                                using T = decltype(x);
                                if constexpr (std::is_floating_point_v<T>) {
                                  return std::abs(x);
                                } else if constexpr (std::is_signed_v<T>) {
                                  return x < 0 ? wrapping_sub(T(0), x) : x;
                                } else {
                                  return x;
                                }
                              })};
const KernelRegistration kSqrt{"", "Sqrt", 6, kLatestOpset, float_math([](auto x) { return std::sqrt(x); })};
const KernelRegistration kExp{"", "Exp", 6, kLatestOpset, float_math([](auto x) { return vector_math::exp(x); })};
const KernelRegistration kLog{"", "Log", 6, kLatestOpset, float_math([](auto x) { return vector_math::log(x); })};
const KernelRegistration kSin{"", "Sin", 7, kLatestOpset, float_math([](auto x) { return std::sin(x); })};
const KernelRegistration kCos{"", "Cos", 7, kLatestOpset, float_math([](auto x) { return std::cos(x); })};
const KernelRegistration kTan{"", "Tan", 7, kLatestOpset, float_math([](auto x) { return std::tan(x); })};
const KernelRegistration kAsin{"", "Asin", 7, kLatestOpset, float_math([](auto x) { return std::asin(x); })};
const KernelRegistration kAcos{"", "Acos", 7, kLatestOpset, float_math([](auto x) { return std::acos(x); })};
const KernelRegistration kAtan{"", "Atan", 7, kLatestOpset, float_math([](auto x) { return std::atan(x); })};
const KernelRegistration kSinh{"", "Sinh", 9, kLatestOpset, float_math([](auto x) { return std::sinh(x); })};
const KernelRegistration kCosh{"", "Cosh", 9, kLatestOpset, float_math([](auto x) { return std::cosh(x); })};
const KernelRegistration kAsinh{"", "Asinh", 9, kLatestOpset, float_math([](auto x) { return std::asinh(x); })};
const KernelRegistration kAcosh{"", "Acosh", 9, kLatestOpset, float_math([](auto x) { return std::acosh(x); })};
const KernelRegistration kAtanh{"", "Atanh", 9, kLatestOpset, float_math([](auto x) { return std::atanh(x); })};
const KernelRegistration kTanh{"", "Tanh", 6, kLatestOpset, float_math([](auto x) { return vector_math::tanh(x); })};
const KernelRegistration kErf{"", "Erf", 9, kLatestOpset, float_math([](auto x) { return vector_math::erf(x); })};
const KernelRegistration kReciprocal{"", "Reciprocal", 6, kLatestOpset,
                                     float_math([](auto x) { return decltype(x)(1) / x; })};
// Floor and ceil from nearbyint, which vectorizes (std::floor and std::ceil do not under
// GCC's default -ftrapping-math).
const KernelRegistration kFloor{"", "Floor", 6, kLatestOpset, float_math([](auto x) {
                                  const auto r = std::nearbyint(x);
                                  const auto below = r - decltype(x)(1);
                                  return r > x ? below : r;
                                })};
const KernelRegistration kCeil{"", "Ceil", 6, kLatestOpset, float_math([](auto x) {
                                 const auto r = std::nearbyint(x);
                                 const auto above = r + decltype(x)(1);
                                 return r < x ? above : r;
                               })};
// Halves round to even: the default rounding mode.
const KernelRegistration kRound{"", "Round", 11, kLatestOpset, float_math([](auto x) { return std::nearbyint(x); })};

// -1, 0 or 1 (NaN stays NaN).
const KernelRegistration kSign{"", "Sign", 9, kLatestOpset, math<ONNXTRAIN_NUMERIC_TYPES>([](auto x) {
                                 using T = decltype(x);
                                 if constexpr (std::is_unsigned_v<T>) {
                                   return T(x > 0);
                                 } else {
                                   return x > T(0) ? T(1) : x < T(0) ? T(-1) : x;
                                 }
                               })};

const KernelRegistration kIsNaN{"", "IsNaN", 9, kLatestOpset, [](const KernelInfo&) {
                                  return make_kernel([](KernelContext& ctx) {
                                    dispatch<ONNXTRAIN_FLOAT_TYPES>(ctx.input(0).dtype(), "IsNaN", [&]<typename T>() {
                                      unary<T, bool>(ctx, [](auto x) { return x != x; });
                                    });
                                  });
                                }};

const KernelRegistration kIsInf{
    "", "IsInf", 10, kLatestOpset, [](const KernelInfo& info) {
      const bool negative = info.bool_attribute("detect_negative", true);
      const bool positive = info.bool_attribute("detect_positive", true);
      return make_kernel([negative, positive](KernelContext& ctx) {
        dispatch<ONNXTRAIN_FLOAT_TYPES>(ctx.input(0).dtype(), "IsInf", [&]<typename T>() {
          using CT = compute_type_t<T>;
          constexpr CT inf = std::numeric_limits<CT>::infinity();
          unary<T, bool>(ctx, [=](CT x) { return (positive & (x == inf)) | (negative & (x == -inf)); });
        });
      });
    }};

// Output 0 is input 0 itself (a tensor, a sequence or an optional): no copy.
const KernelRegistration kIdentity{
    "", "Identity", 1, kLatestOpset, {.packed_types = true, .containers = true}, [](const KernelInfo&) {
      return make_kernel([](KernelContext& ctx) { ctx.set_output(0, ctx.input(0)); });
    }};

// ---- Clip ----

// min(max(x, lo), hi): when lo > hi every element becomes hi (like numpy.clip); NaN stays.
template <typename T>
void clip(KernelContext& ctx, compute_type_t<T> lo, compute_type_t<T> hi) {
  unary<T>(ctx, [lo, hi](auto x) { return std::min(std::max(x, lo), hi); });
}

// Opset 6-10: bounds are float attributes.
const KernelRegistration kClip6{"", "Clip", 6, 10, [](const KernelInfo& info) {
                                  const float lo = info.float_attribute("min", std::numeric_limits<float>::lowest());
                                  const float hi = info.float_attribute("max", std::numeric_limits<float>::max());
                                  return make_kernel([lo, hi](KernelContext& ctx) {
                                    dispatch<ONNXTRAIN_FLOAT_TYPES>(ctx.input(0).dtype(), "Clip", [&]<typename T>() {
                                      using CT = compute_type_t<T>;
                                      clip<T>(ctx, static_cast<CT>(lo), static_cast<CT>(hi));
                                    });
                                  });
                                }};

// Opset 11+: bounds are optional scalar inputs of the input's type (integers from 12).
template <typename T>
compute_type_t<T> clip_bound(KernelContext& ctx, size_t i, compute_type_t<T> fallback) {
  if (!ctx.has_input(i)) return fallback;
  const Tensor& bound = ctx.input(i);
  if (bound.numel() != 1) {
    ctx.fail("input " + std::to_string(i) + (i == 1 ? " (min)" : " (max)") + " has shape " +
             shape_string(bound.shape()) + ", expected a scalar");
  }
  return compute_type_t<T>(bound.data<T>()[0]);
}

const KernelRegistration kClip11{"", "Clip", 11, kLatestOpset, [](const KernelInfo&) {
                                   return make_kernel([](KernelContext& ctx) {
                                     require_same_dtype(ctx, 0, 2);
                                     dispatch<ONNXTRAIN_NUMERIC_TYPES>(ctx.input(0).dtype(), "Clip", [&]<typename T>() {
                                       using CT = compute_type_t<T>;
                                       clip<T>(ctx, clip_bound<T>(ctx, 1, std::numeric_limits<CT>::lowest()),
                                               clip_bound<T>(ctx, 2, std::numeric_limits<CT>::max()));
                                     });
                                   });
                                 }};

// com.microsoft::Scale (X, scale) <scale_down>: X * scale, or X / scale with scale_down; the
// scalar `scale` may be of another numeric type (ORT's gradient of ReduceMean divides by an
// int64 element count). As ORT's kernel: the factor is a float (1.0f / scale for
// scale_down) and each element is multiplied by it.
const KernelRegistration kMicrosoftScale{
    "com.microsoft", "Scale", 1, kLatestOpset, [](const KernelInfo& info) {
      const bool scale_down = info.bool_attribute("scale_down", false);
      return make_kernel([scale_down](KernelContext& ctx) {
        const Tensor& x = ctx.input(0);
        const Tensor& scale = ctx.input(1);
        if (scale.numel() != 1) ctx.fail("scale has shape " + shape_string(scale.shape()) + ", expected one value");
        const auto value = static_cast<float>(scale.item_as_double());
        if (scale_down && value == 0) ctx.fail("scale_down by a zero scale");
        const float factor = scale_down ? 1.0f / value : value;
        Tensor& y = ctx.allocate_output_in_place(0, 0, x.dtype(), x.shape());
        dispatch<float, double, Float16, BFloat16>(x.dtype(), "Scale", [&]<typename T>() {
          using C = compute_type_t<T>;
          const auto s = static_cast<C>(factor);
          const T* in = x.data<T>();
          T* out = y.data<T>();
          for (int64_t i = 0; i < x.numel(); ++i) out[i] = static_cast<T>(C(in[i]) * s);
        });
      });
    }};

}  // namespace
}  // namespace onnxtrain
