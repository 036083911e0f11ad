// Activation functions (Relu and its relatives, sigmoids, Gelu, PRelu) and Dropout, with
// onnxruntime-training's relatives (com.microsoft: Gelu, FastGelu, BiasGelu, QuickGelu and
// QuickGeluGrad, BiasDropout). Parameters are read once when the kernel is created; the loops
// live in elementwise.h.
#include <atomic>
#include <cmath>
#include <limits>
#include <random>
#include <string>

#include "core/dispatch.h"
#include "ops/cpu/elementwise.h"
#include "ops/cpu/vector_math.h"
#include "ops/kernel_registry.h"

namespace onnxtrain {
namespace {

using elementwise::binary;
using elementwise::unary;

// A kernel applying op(x) to the float types; op sees float for the 16-bit floats and
// double for double. The ops compute every value before choosing one, as a select: under
// GCC's default -ftrapping-math a float operation on one side of a condition stops the
// loop from vectorizing.
template <typename Op>
std::unique_ptr<OpKernel> float_activation(Op op) {
  return make_kernel([op](KernelContext& ctx) {
    dispatch<ONNXTRAIN_FLOAT_TYPES>(ctx.input(0).dtype(), ctx.node().op_type, [&]<typename T>() { unary<T>(ctx, op); });
  });
}

const KernelRegistration kRelu{
    "", "Relu", 6, kLatestOpset, [](const KernelInfo&) {
      return make_kernel([](KernelContext& ctx) {
        dispatch<ONNXTRAIN_FLOAT_TYPES, ONNXTRAIN_SIGNED_INT_TYPES>(ctx.input(0).dtype(), "Relu", [&]<typename T>() {
          unary<T>(ctx, [](auto x) { return x < decltype(x)(0) ? decltype(x)(0) : x; });  // NaN stays NaN
        });
      });
    }};

const KernelRegistration kLeakyRelu{"", "LeakyRelu", 6, kLatestOpset, [](const KernelInfo& info) {
                                      const float alpha = info.float_attribute("alpha", 0.01f);
                                      return float_activation([alpha](auto x) {
                                        using F = decltype(x);
                                        const F scaled = F(alpha) * x;
                                        return x >= F(0) ? x : scaled;
                                      });
                                    }};

const KernelRegistration kElu{"", "Elu", 6, kLatestOpset, [](const KernelInfo& info) {
                                const float alpha = info.float_attribute("alpha", 1.0f);
                                return float_activation([alpha](auto x) {
                                  using F = decltype(x);
                                  const F negative = F(alpha) * vector_math::expm1(x);
                                  return x >= F(0) ? x : negative;
                                });
                              }};

const KernelRegistration kSelu{"", "Selu", 6, kLatestOpset, [](const KernelInfo& info) {
                                 const float alpha = info.float_attribute("alpha", 1.67326319217681884765625f);
                                 const float gamma = info.float_attribute("gamma", 1.05070102214813232421875f);
                                 return float_activation([alpha, gamma](auto x) {
                                   using F = decltype(x);
                                   const F positive = F(gamma) * x;
                                   const F negative = F(gamma) * F(alpha) * vector_math::expm1(x);
                                   return x > F(0) ? positive : negative;
                                 });
                               }};

const KernelRegistration kCelu{"", "Celu", 12, kLatestOpset, [](const KernelInfo& info) {
                                 const float alpha = info.float_attribute("alpha", 1.0f);
                                 if (alpha == 0) info.fail("attribute 'alpha' is 0, expected a non-zero value");
                                 return float_activation([alpha](auto x) {
                                   using F = decltype(x);
                                   const F negative = F(alpha) * vector_math::expm1(x / F(alpha));
                                   return x > F(0) ? x : negative;
                                 });
                               }};

const KernelRegistration kThresholdedRelu{"", "ThresholdedRelu", 10, kLatestOpset, [](const KernelInfo& info) {
                                            const float alpha = info.float_attribute("alpha", 1.0f);
                                            return float_activation([alpha](auto x) {
                                              using F = decltype(x);
                                              return x > F(alpha) ? x : F(0);
                                            });
                                          }};

const KernelRegistration kSigmoid{"", "Sigmoid", 6, kLatestOpset, [](const KernelInfo&) {
                                    return float_activation([](auto x) { return vector_math::sigmoid(x); });
                                  }};

template <typename F>
ONNXTRAIN_VECTOR_INLINE F hard_sigmoid(F x, F alpha, F beta) {
  const F v = alpha * x + beta;
  return v < F(0) ? F(0) : (v > F(1) ? F(1) : v);  // NaN stays NaN
}

const KernelRegistration kHardSigmoid{"", "HardSigmoid", 6, kLatestOpset, [](const KernelInfo& info) {
                                        const float alpha = info.float_attribute("alpha", 0.2f);
                                        const float beta = info.float_attribute("beta", 0.5f);
                                        return float_activation([alpha, beta](auto x) {
                                          using F = decltype(x);
                                          return hard_sigmoid(x, F(alpha), F(beta));
                                        });
                                      }};

const KernelRegistration kHardSwish{"", "HardSwish", 14, kLatestOpset, [](const KernelInfo&) {
                                      return float_activation([](auto x) {
                                        using F = decltype(x);
                                        return x * hard_sigmoid(x, F(1) / F(6), F(0.5));
                                      });
                                    }};

// log(1 + e^x) = max(x, 0) + log(1 + e^-|x|), which neither overflows nor loses small values.
template <typename F>
ONNXTRAIN_VECTOR_INLINE F softplus(F x) {
  const F a = x < F(0) ? -x : x;
  return std::max(x, F(0)) + vector_math::log1p_nonnegative(vector_math::exp(-a));
}

const KernelRegistration kSoftplus{"", "Softplus", 1, kLatestOpset, [](const KernelInfo&) {
                                     return float_activation([](auto x) { return softplus(x); });
                                   }};

const KernelRegistration kSoftsign{"", "Softsign", 1, kLatestOpset, [](const KernelInfo&) {
                                     return float_activation([](auto x) { return x / (decltype(x)(1) + std::abs(x)); });
                                   }};

const KernelRegistration kMish{"", "Mish", 18, kLatestOpset, [](const KernelInfo&) {
                                 return float_activation([](auto x) { return x * vector_math::tanh(softplus(x)); });
                               }};

// Swish (opset 24): x * sigmoid(alpha x).
const KernelRegistration kSwish{"", "Swish", 24, kLatestOpset, [](const KernelInfo& info) {
                                  const float alpha = info.float_attribute("alpha", 1.0f);
                                  return float_activation([alpha](auto x) {
                                    using F = decltype(x);
                                    return x * vector_math::sigmoid(F(alpha) * x);
                                  });
                                }};

// Shrink: x + bias below -lambd, x - bias above lambd, 0 between; integers compute in
// double and truncate, as numpy's cast does.
const KernelRegistration kShrink{
    "", "Shrink", 9, kLatestOpset, [](const KernelInfo& info) {
      const float bias = info.float_attribute("bias", 0.0f), lambd = info.float_attribute("lambd", 0.5f);
      return make_kernel([bias, lambd](KernelContext& ctx) {
        dispatch<ONNXTRAIN_FLOAT_TYPES, ONNXTRAIN_INT_TYPES>(ctx.input(0).dtype(), "Shrink", [&]<typename T>() {
          unary<T>(ctx, [bias, lambd](auto x) {
            using F = decltype(x);
            if constexpr (std::is_floating_point_v<F>) {
              const F below = x + F(bias), above = x - F(bias);
              return x < F(-lambd) ? below : (x > F(lambd) ? above : F(0));
            } else {
              const double v = static_cast<double>(x);
              const double y = v < -double(lambd) ? v + double(bias) : (v > double(lambd) ? v - double(bias) : 0.0);
              return static_cast<F>(y);
            }
          });
        });
      });
    }};

std::unique_ptr<OpKernel> gelu(bool tanh) {
  if (tanh) {
    return float_activation([](auto x) {
      using F = decltype(x);
      const F inner = F(0.79788456080286535588) * (x + F(0.044715) * x * x * x);  // sqrt(2/pi) (x + c x^3)
      // (1 + tanh(u)) / 2 = sigmoid(2u): one exp instead of tanh's polynomial and exp, and
      // no cancellation for negative x.
      return x * vector_math::sigmoid(inner + inner);
    });
  }
  return float_activation([](auto x) {
    using F = decltype(x);
    // 1 + erf(x / sqrt 2) as erfc(-x / sqrt 2): no cancellation for negative x.
    return F(0.5) * x * vector_math::erfc(x * F(-0.70710678118654752440));
  });
}

const KernelRegistration kGelu{
    "", "Gelu", 20, kLatestOpset, [](const KernelInfo& info) {
      const std::string approximate = info.string_attribute("approximate", "none");
      if (approximate != "none" && approximate != "tanh") {
        info.fail("attribute 'approximate' is '" + approximate + "', expected 'none' or 'tanh'");
      }
      return gelu(approximate == "tanh");
    }};

// The fused GELU of models before opset 20 (src/passes/fuse_gelu.h).
const KernelRegistration kFusedGelu{"org.onnxtrain", "Gelu", 1, kLatestOpset,
                                    [](const KernelInfo&) { return gelu(false); }};
const KernelRegistration kFusedGeluTanh{"org.onnxtrain", "GeluTanh", 1, kLatestOpset,
                                        [](const KernelInfo&) { return gelu(true); }};
// onnxruntime-training's fused GELU (erf form) and its tanh approximation.
const KernelRegistration kMicrosoftGelu{"com.microsoft", "Gelu", 1, kLatestOpset,
                                        [](const KernelInfo&) { return gelu(false); }};
const KernelRegistration kMicrosoftFastGelu{"com.microsoft", "FastGelu", 1, kLatestOpset, [](const KernelInfo& info) {
                                              if (info.node().inputs.size() > 1 && !info.node().inputs[1].empty()) {
                                                info.fail("FastGelu with a bias input is not supported");
                                              }
                                              return gelu(true);
                                            }};

// com.microsoft::QuickGelu <alpha = 1.702> (X): x * sigmoid(alpha x) (SiLU for alpha 1, which
// ORT's graph transformers fuse into it), and its gradient QuickGeluGrad (dY, X):
// dY * s * (1 + alpha x (1 - s)) with s = sigmoid(alpha x).
float quick_gelu_alpha(const KernelInfo& info) {
  return info.float_attribute("alpha", 1.702f);
}

const KernelRegistration kMicrosoftQuickGelu{"com.microsoft", "QuickGelu", 1, kLatestOpset, [](const KernelInfo& info) {
                                               const float alpha = quick_gelu_alpha(info);
                                               return float_activation([alpha](auto x) {
                                                 using F = decltype(x);
                                                 return x * vector_math::sigmoid(F(alpha) * x);
                                               });
                                             }};

const KernelRegistration kMicrosoftQuickGeluGrad{
    "com.microsoft", "QuickGeluGrad", 1, kLatestOpset, [](const KernelInfo& info) {
      const float alpha = quick_gelu_alpha(info);
      return make_kernel([alpha](KernelContext& ctx) {
        elementwise::require_same_dtype(ctx, 0, 1);
        dispatch<ONNXTRAIN_FLOAT_TYPES>(ctx.input(0).dtype(), "QuickGeluGrad", [&]<typename T>() {
          binary<T, T, T>(ctx, [alpha](auto dy, auto x) {
            using F = decltype(x);
            const F ax = F(alpha) * x;
            const F s = vector_math::sigmoid(ax);
            return dy * (s * (F(1) + ax * (F(1) - s)));
          });
        });
      });
    }};

// y = x for x >= 0, slope * x otherwise; the slope broadcasts to x's shape (one direction only).
const KernelRegistration kPRelu{"", "PRelu", 7, kLatestOpset, [](const KernelInfo&) {
                                  return make_kernel([](KernelContext& ctx) {
                                    elementwise::require_same_dtype(ctx, 0, 1);
                                    const Tensor& x = ctx.input(0);
                                    const Tensor& slope = ctx.input(1);
                                    if (broadcast_shapes(x.shape(), slope.shape()) != x.shape()) {
                                      ctx.fail("input 1 (slope) has shape " + shape_string(slope.shape()) +
                                               ", which does not broadcast to X's shape " + shape_string(x.shape()));
                                    }
                                    dispatch<ONNXTRAIN_FLOAT_TYPES, ONNXTRAIN_SIGNED_INT_TYPES>(
                                        x.dtype(), "PRelu", [&]<typename T>() {
                                          binary<T, T, T>(ctx, [](auto v, auto s) {
                                            const auto scaled = s * v;
                                            return v < decltype(v)(0) ? scaled : v;
                                          });
                                        });
                                  });
                                }};

// ---- Dropout ----

// Output 1 (the mask), when the graph uses it, filled with "keep" (true, or 1 before opset 10).
void keep_everything(KernelContext& ctx, DType mask_dtype) {
  if (!ctx.has_output(1)) return;
  Tensor& mask = ctx.allocate_output(1, mask_dtype, ctx.input(0).shape());
  dispatch<ONNXTRAIN_FLOAT_TYPES, bool>(mask_dtype, "Dropout mask", [&]<typename M>() {
    M* m = mask.data<M>();
    const M one = static_cast<M>(1.0f);
    parallel_for(mask.numel(), elementwise::kGrain, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) m[i] = one;
    });
  });
}

// Opset 7-11 have no training mode: at inference Dropout passes its input through, and its
// 'ratio' attribute does not matter.
const KernelRegistration kDropout7{"", "Dropout", 7, 11, [](const KernelInfo& info) {
                                     const bool typed_mask = info.opset() < 10;  // mask has the data's type
                                     return make_kernel([typed_mask](KernelContext& ctx) {
                                       ctx.set_output(0, ctx.input(0));
                                       keep_everything(ctx, typed_mask ? ctx.input(0).dtype() : DType::kBool);
                                     });
                                   }};

// A counter-based generator: element i's draw is splitmix64's i-th output from the run's
// stream, so the mask is the same however the work is split across threads.
constexpr uint64_t kGoldenGamma = 0x9e3779b97f4a7c15ull;
inline uint64_t mix64(uint64_t z) {  // splitmix64's finalizer
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Opset 12+: ratio and training_mode are optional inputs; in training mode a random mask
// keeps each element with probability 1 - ratio and scales the kept ones by 1 / (1 - ratio).
// com.microsoft::BiasDropout (data, bias, residual?, ratio?, training_mode?) <seed> is the
// same on data + bias (bias the last axis of data, or its whole shape), plus residual
// (data's shape) after the dropout: ORT's fusion of the pattern transformers have.
class DropoutKernel final : public OpKernel {
 public:
  DropoutKernel(const KernelInfo& info, bool biased) : biased_(biased), ratio_input_(biased ? 3 : 1) {
    // Without a seed every kernel draws its own streams; with one, the sequence of masks a
    // session draws run after run is reproducible.
    seed_ = info.has_attribute("seed") ? static_cast<uint64_t>(info.int_attribute("seed"))
                                       : (static_cast<uint64_t>(std::random_device{}()) << 32) ^ std::random_device{}();
  }

  void compute(KernelContext& ctx) override {
    const double ratio = read_ratio(ctx);
    const bool training = read_training_mode(ctx);
    const bool drop = training && ratio != 0;
    if (!biased_ && !drop) {
      ctx.set_output(0, ctx.input(0));
      keep_everything(ctx, DType::kBool);
      return;
    }
    const Tensor& x = ctx.input(0);
    if (biased_) check_bias_and_residual(ctx);
    Tensor& y = ctx.allocate_output(0, x.dtype(), x.shape());
    Tensor mask;
    if (drop) {
      // Draws 24-bit uniforms u in [0, 1); an element is kept when u >= ratio.
      const auto threshold = static_cast<uint32_t>(std::ceil(ratio * double(1u << 24)));
      const uint64_t stream = mix64(seed_ + kGoldenGamma * (runs_.fetch_add(1) + 1));
      mask = ctx.has_output(1) ? ctx.allocate_output(1, DType::kBool, x.shape())
                               : ctx.allocate_scratch(DType::kBool, x.shape());
      bool* keep = mask.data<bool>();
      parallel_for(x.numel(), elementwise::kGrain, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) {
          const uint64_t draw = mix64(stream + kGoldenGamma * static_cast<uint64_t>(i + 1));
          keep[i] = static_cast<uint32_t>(draw >> 40) >= threshold;
        }
      });
    } else {
      keep_everything(ctx, DType::kBool);
    }
    dispatch<ONNXTRAIN_FLOAT_TYPES>(x.dtype(), ctx.node().op_type, [&]<typename T>() {
      using F = compute_type_t<T>;
      using elementwise::Operand;
      const Operand<T> data{x.data<T>(), &x.shape()};
      if (!biased_) {
        const F scale = static_cast<F>(1.0 / (1.0 - ratio));
        elementwise::broadcast_map(
            y.data<T>(), x.shape(),
            [scale](F v, bool k) {
              const F scaled = v * scale;
              return k ? scaled : F(0);
            },
            data, Operand<bool>{mask.data<bool>(), &x.shape()});
        return;
      }
      const Tensor& bias = ctx.input(1);
      const Operand<T> b{bias.data<T>(), &bias.shape()};
      const bool residual = ctx.has_input(2);
      const F scale = drop ? static_cast<F>(1.0 / (1.0 - ratio)) : F(1);
      const auto dropped = [scale](F v, F bv, bool k) {
        const F scaled = (v + bv) * scale;
        return k ? scaled : F(0);
      };
      if (drop && residual) {
        const Tensor& r = ctx.input(2);
        elementwise::broadcast_map(
            y.data<T>(), x.shape(), [dropped](F v, F bv, bool k, F rv) { return dropped(v, bv, k) + rv; }, data, b,
            Operand<bool>{mask.data<bool>(), &x.shape()}, Operand<T>{r.data<T>(), &r.shape()});
      } else if (drop) {
        elementwise::broadcast_map(y.data<T>(), x.shape(), dropped, data, b,
                                   Operand<bool>{mask.data<bool>(), &x.shape()});
      } else if (residual) {
        const Tensor& r = ctx.input(2);
        elementwise::broadcast_map(
            y.data<T>(), x.shape(), [](F v, F bv, F rv) { return (v + bv) + rv; }, data, b,
            Operand<T>{r.data<T>(), &r.shape()});
      } else {
        elementwise::broadcast_map(
            y.data<T>(), x.shape(), [](F v, F bv) { return v + bv; }, data, b);
      }
    });
  }

 private:
  static void check_bias_and_residual(KernelContext& ctx) {
    const Tensor& x = ctx.input(0);
    const Tensor& bias = ctx.input(1);
    const bool last_axis = x.rank() > 0 && bias.shape() == Shape{x.dim(static_cast<int64_t>(x.rank()) - 1)};
    if (bias.dtype() != x.dtype() || !(last_axis || bias.shape() == x.shape())) {
      ctx.fail("bias is " + std::string(dtype_name(bias.dtype())) + shape_string(bias.shape()) + "; expected " +
               std::string(dtype_name(x.dtype())) + " of data's last axis or of data's shape " +
               shape_string(x.shape()));
    }
    if (ctx.has_input(2)) {
      const Tensor& r = ctx.input(2);
      if (r.dtype() != x.dtype() || r.shape() != x.shape()) {
        ctx.fail("residual is " + std::string(dtype_name(r.dtype())) + shape_string(r.shape()) + "; expected " +
                 std::string(dtype_name(x.dtype())) + shape_string(x.shape()) + " like data");
      }
    }
  }

  double read_ratio(KernelContext& ctx) const {
    if (!ctx.has_input(ratio_input_)) return 0.5;
    const Tensor& r = ctx.input(ratio_input_);
    const std::string what = "input " + std::to_string(ratio_input_) + " (ratio)";
    if (r.numel() != 1 || !is_floating(r.dtype())) {
      ctx.fail(what + " is a " + std::string(dtype_name(r.dtype())) + " tensor of shape " + shape_string(r.shape()) +
               ", expected a floating-point scalar");
    }
    double ratio = 0;
    dispatch<ONNXTRAIN_FLOAT_TYPES>(r.dtype(), "Dropout ratio", [&]<typename T>() {
      ratio = static_cast<double>(compute_type_t<T>(r.data<T>()[0]));
    });
    if (!(ratio >= 0 && ratio < 1)) ctx.fail(what + " is " + std::to_string(ratio) + ", expected a value in [0, 1)");
    return ratio;
  }

  bool read_training_mode(KernelContext& ctx) const {
    const size_t input = ratio_input_ + 1;
    if (!ctx.has_input(input)) return false;
    const Tensor& t = ctx.input(input);
    if (t.numel() != 1 || t.dtype() != DType::kBool) {
      ctx.fail("input " + std::to_string(input) + " (training_mode) is a " + std::string(dtype_name(t.dtype())) +
               " tensor of shape " + shape_string(t.shape()) + ", expected a bool scalar");
    }
    return t.data<bool>()[0];
  }

  bool biased_;
  size_t ratio_input_;
  uint64_t seed_ = 0;
  std::atomic<uint64_t> runs_{0};
};

const KernelRegistration kDropout12{"", "Dropout", 12, kLatestOpset, [](const KernelInfo& info) {
                                      return std::make_unique<DropoutKernel>(info, false);
                                    }};
const KernelRegistration kMicrosoftBiasDropout{
    "com.microsoft", "BiasDropout", 1, kLatestOpset,
    [](const KernelInfo& info) { return std::make_unique<DropoutKernel>(info, true); }};

// com.microsoft::BiasGelu (A, B): GELU (erf form) of A + B, B broadcast along the last axis.
const KernelRegistration kMicrosoftBiasGelu{
    "com.microsoft", "BiasGelu", 1, kLatestOpset, [](const KernelInfo&) {
      return make_kernel([](KernelContext& ctx) {
        const Tensor& a = ctx.input(0);
        const Tensor& b = ctx.input(1);
        if (a.rank() == 0 || b.rank() != 1 || b.dim(0) != a.dim(a.rank() - 1) || b.dtype() != a.dtype()) {
          ctx.fail("B must be a vector of A's last dimension and element type");
        }
        Tensor& y = ctx.allocate_output(0, a.dtype(), a.shape());
        dispatch<float, double>(a.dtype(), "BiasGelu", [&]<typename T>() {
          const T* av = a.data<T>();
          const T* bv = b.data<T>();
          T* out = y.data<T>();
          const int64_t n = b.numel();
          for (int64_t i = 0; i < a.numel(); ++i) {
            const T x = av[i] + bv[i % n];
            out[i] = T(0.5) * x * vector_math::erfc(x * T(-0.70710678118654752440));
          }
        });
      });
    }};

// ---- gradients: dX = f(dY, Y or X) ----

template <typename F>
KernelFactory elementwise_grad(const char* name, F f) {
  return [name, f](const KernelInfo&) {
    return make_kernel([name, f](KernelContext& ctx) {
      ctx.require_alike(ctx.input(0), ctx.input(1), name);
      dispatch<ONNXTRAIN_FLOAT_TYPES>(ctx.input(0).dtype(), name,
                                      [&]<typename T>() { elementwise::binary<T, T, T>(ctx, f); });
    });
  };
}

const KernelRegistration kReluGrad{
    "org.onnxtrain", "ReluGrad", 1, kLatestOpset,
    elementwise_grad("ReluGrad", [](auto dy, auto y) { return y > decltype(y)(0) ? dy : decltype(y)(0); })};

const KernelRegistration kSigmoidGrad{
    "org.onnxtrain", "SigmoidGrad", 1, kLatestOpset,
    elementwise_grad("SigmoidGrad", [](auto dy, auto y) { return dy * (y * (decltype(y)(1) - y)); })};

const KernelRegistration kTanhGrad{
    "org.onnxtrain", "TanhGrad", 1, kLatestOpset,
    elementwise_grad("TanhGrad", [](auto dy, auto y) { return dy * (decltype(y)(1) - y * y); })};

// Phi(x) + x phi(x), Phi and phi the standard normal CDF and density.
const KernelRegistration kGeluGrad{"org.onnxtrain", "GeluGrad", 1, kLatestOpset,
                                   elementwise_grad("GeluGrad", [](auto dy, auto x) {
                                     using C = decltype(x);
                                     const C cdf = C(0.5) * vector_math::erfc(x * C(-0.70710678118654752));
                                     const C density = vector_math::exp(C(-0.5) * x * x) * C(0.39894228040143268);
                                     return dy * (cdf + x * density);
                                   })};

const KernelRegistration kGeluTanhGrad{"org.onnxtrain", "GeluTanhGrad", 1, kLatestOpset,
                                       elementwise_grad("GeluTanhGrad", [](auto dy, auto x) {
                                         using C = decltype(x);
                                         const C k = C(0.79788456080286536);
                                         const C t = vector_math::tanh(k * (x + C(0.044715) * x * x * x));
                                         const C du = k * (C(1) + C(0.134145) * x * x);
                                         return dy * (C(0.5) * (C(1) + t) + C(0.5) * x * (C(1) - t * t) * du);
                                       })};

// com.microsoft's gradient ops (onnxruntime-training's artifacts): where one computes what an
// org.onnxtrain op computes, the same kernel runs it.
const KernelRegistration kMicrosoftGeluGrad{"com.microsoft", "GeluGrad", 1, kLatestOpset,
                                            same_kernel_as("org.onnxtrain", "GeluGrad")};
const KernelRegistration kMicrosoftFastGeluGrad{"com.microsoft", "FastGeluGrad", 1, kLatestOpset,
                                                same_kernel_as("org.onnxtrain", "GeluTanhGrad")};

// ReluGrad reads X where org.onnxtrain's reads Y: X > 0 exactly where Relu's Y > 0.
const KernelRegistration kMicrosoftReluGrad{
    "com.microsoft", "ReluGrad", 1, kLatestOpset,
    elementwise_grad("ReluGrad", [](auto dy, auto x) { return x > decltype(x)(0) ? dy : decltype(x)(0); })};

const KernelRegistration kMicrosoftSigmoidGrad{
    "com.microsoft", "SigmoidGrad", 1, kLatestOpset,
    elementwise_grad("SigmoidGrad", [](auto dy, auto y) { return dy * (y * (decltype(y)(1) - y)); })};

const KernelRegistration kMicrosoftTanhGrad{
    "com.microsoft", "TanhGrad", 1, kLatestOpset,
    elementwise_grad("TanhGrad", [](auto dy, auto y) { return dy * (decltype(y)(1) - y * y); })};

// dY * GeluGrad(X + B), B broadcast along the last axis (ORT fuses the bias of a Gemm/MatMul).
const KernelRegistration kMicrosoftBiasGeluGradDx{
    "com.microsoft", "BiasGeluGrad_dX", 1, kLatestOpset, [](const KernelInfo&) {
      return make_kernel([](KernelContext& ctx) {
        const Tensor& dy = ctx.input(0);
        const Tensor& x = ctx.input(1);
        const Tensor& b = ctx.input(2);
        ctx.require_alike(dy, x, "BiasGeluGrad_dX");
        if (x.rank() == 0 || b.rank() != 1 || b.dim(0) != x.dim(x.rank() - 1) || b.dtype() != x.dtype()) {
          ctx.fail("B must be a vector of X's last dimension and element type");
        }
        Tensor& dx = ctx.allocate_output(0, x.dtype(), x.shape());
        dispatch<float, double>(x.dtype(), "BiasGeluGrad_dX", [&]<typename T>() {
          const T* g = dy.data<T>();
          const T* xv = x.data<T>();
          const T* bv = b.data<T>();
          T* out = dx.data<T>();
          const int64_t n = b.numel();
          for (int64_t i = 0; i < x.numel(); ++i) {
            const T v = xv[i] + bv[i % n];
            const T cdf = T(0.5) * vector_math::erfc(v * T(-0.70710678118654752));
            const T density = vector_math::exp(T(-0.5) * v * v) * T(0.39894228040143268);
            out[i] = g[i] * (cdf + v * density);
          }
        });
      });
    }};

// DropoutGrad (dY, mask, ratio = 0.5, training_mode): dY * mask / (1 - ratio). As ORT's
// kernel, whatever training_mode says (the recorded ORT run shows it: a mask from an eval
// forward pass is all true, and ORT scales anyway).
const KernelRegistration kMicrosoftDropoutGrad{
    "com.microsoft", "DropoutGrad", 1, kLatestOpset, [](const KernelInfo&) {
      return make_kernel([](KernelContext& ctx) {
        const Tensor& dy = ctx.input(0);
        const Tensor& mask = ctx.input(1);
        if (mask.dtype() != DType::kBool || mask.shape() != dy.shape()) {
          ctx.fail("mask must be bool and of dY's shape " + shape_string(dy.shape()));
        }
        const double ratio = ctx.has_input(2) ? ctx.input(2).item_as_double() : 0.5;
        if (!(ratio >= 0 && ratio < 1)) ctx.fail("ratio must be in [0, 1), got " + std::to_string(ratio));
        Tensor& dx = ctx.allocate_output(0, dy.dtype(), dy.shape());
        dispatch<float, double>(dy.dtype(), "DropoutGrad", [&]<typename T>() {
          const T* g = dy.data<T>();
          const bool* m = mask.data<bool>();
          T* out = dx.data<T>();
          const T scale = static_cast<T>(1.0 / (1.0 - ratio));
          for (int64_t i = 0; i < dy.numel(); ++i) out[i] = m[i] ? g[i] * scale : T(0);
        });
      });
    }};

}  // namespace
}  // namespace onnxtrain
