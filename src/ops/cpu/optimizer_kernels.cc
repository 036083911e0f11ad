// Fused kernels for the org.onnxtrain training ops (their definitions: src/training/functions.cc):
// AccumulateGradient and the optimizer steps. Each computes what its standard-ONNX body
// computes, in one pass and in place: the accumulated gradient goes into the buffer's
// memory and the updated parameter and moments into theirs, so that the executor writes
// the updates straight into the caller's tensors. Scalar coefficients are computed in
// double as the bodies do; element-wise arithmetic runs in the parameter's type (float for
// the 16-bit floats) in the bodies' order. tests/python/training/test_artifacts.py runs
// each kernel against its body. The file is compiled with -ffp-contract=off (CMakeLists.txt):
// a fused multiply-add would round differently from the bodies and from onnxruntime-training,
// whose AdamW adam_mode 1 this file reproduces bit for bit.
#include <cmath>
#include <string>
#include <type_traits>

#include "core/dispatch.h"
#include "core/parallel.h"
#include "ops/cpu/adamw.h"
#include "ops/cpu/multiversion.h"
#include "ops/kernel_registry.h"

namespace onnxtrain {
namespace {

constexpr const char* kDomain = "org.onnxtrain";
constexpr int64_t kGrain = 16384;

#define OPTIMIZER_FLOAT_TYPES float, double, Float16, BFloat16

// A hyperparameter: a scalar tensor attribute (what the artifacts write) or a float one.
double scalar_attribute(const KernelInfo& info, const char* name) {
  const ir::Attribute* a = info.node().attribute(name);
  if (a == nullptr) info.fail(std::string("required attribute '") + name + "' is missing");
  if (a->type == ir::AttributeType::kFloat) return a->f;
  if (a->type != ir::AttributeType::kTensor || a->t.numel() != 1 || !is_floating(a->t.dtype())) {
    info.fail(std::string("attribute '") + name + "' must be a floating-point scalar");
  }
  return a->t.item_as_double();
}

void check_like(KernelContext& ctx, const Tensor& reference, size_t input, const char* what) {
  const Tensor& t = ctx.input(input);
  if (t.dtype() != reference.dtype() || t.shape() != reference.shape()) {
    ctx.fail(std::string(what) + " has " + std::string(dtype_name(t.dtype())) + shape_string(t.shape()) +
             ", expected " + std::string(dtype_name(reference.dtype())) + shape_string(reference.shape()) +
             " like the parameter");
  }
}

double scalar_input(KernelContext& ctx, size_t input, const char* what) {
  const Tensor& t = ctx.input(input);
  if (t.numel() != 1) ctx.fail(std::string(what) + " must hold one value, got shape " + shape_string(t.shape()));
  return t.item_as_double();
}

int64_t step_input(KernelContext& ctx, size_t input) {
  const Tensor& t = ctx.input(input);
  if (t.numel() != 1 || t.dtype() != DType::kInt64) ctx.fail("step must be one int64 value");
  return t.item_as_int64();
}

// ---- AccumulateGradient (grad, buffer, reset) => (out), out in the buffer's memory ----

// y = buffer + g over [begin, end) (y = g on a reset), one version per x86 level.
template <typename T>
ONNXTRAIN_MULTIVERSIONED void accumulate_range(bool reset, const T* g, const T* buffer, T* y, int64_t begin,
                                               int64_t end) {
  using C = compute_type_t<T>;
  if (reset) {
    for (int64_t i = begin; i < end; ++i) y[i] = g[i];
  } else {
    for (int64_t i = begin; i < end; ++i) y[i] = static_cast<T>(C(buffer[i]) + C(g[i]));
  }
}

const KernelRegistration kAccumulateGradient{
    kDomain, "AccumulateGradient", 1, kLatestOpset, [](const KernelInfo&) {
      return make_kernel([](KernelContext& ctx) {
        const Tensor& grad = ctx.input(0);
        check_like(ctx, grad, 1, "the accumulation buffer");
        const Tensor& reset_flag = ctx.input(2);
        if (reset_flag.numel() != 1 || reset_flag.dtype() != DType::kBool) ctx.fail("reset must be one bool value");
        const bool reset = reset_flag.data<bool>()[0];
        Tensor& out = ctx.allocate_output_in_place(0, 1, grad.dtype(), grad.shape());
        dispatch<OPTIMIZER_FLOAT_TYPES>(grad.dtype(), "AccumulateGradient", [&]<typename T>() {
          const T* g = grad.data<T>();
          const T* buffer = ctx.input(1).data<T>();
          T* y = out.data<T>();
          parallel_for(grad.numel(), kGrain,
                       [&](int64_t begin, int64_t end) { accumulate_range(reset, g, buffer, y, begin, end); });
        });
      });
    }};

// ---- AdamWStep (lr, step, p, g, m, v) => (p_out, m_out, v_out) ----

struct AdamWCoefficients {
  double decay, keep_g1, keep_g2, beta2, epsilon, step_size, bc2_sqrt;
};

// AdamWStep's update of elements [begin, end) in adam_mode 0 (torch.optim.AdamW): every
// operation rounds to T as the body's do (a no-op for float and double). The outputs may be
// the inputs (in place), element for element: `omp simd` tells the vectorizer that this is
// no dependency between iterations, and the file is compiled with -fno-math-errno
// (CMakeLists.txt) so that sqrt needs no scalar errno path either (sqrt is correctly rounded
// either way).
template <typename T>
ONNXTRAIN_MULTIVERSIONED void adamw_step_range(const AdamWCoefficients& k, const T* p, const T* g, const T* m,
                                               const T* v, T* p1, T* m1, T* v1, int64_t begin, int64_t end) {
  using C = compute_type_t<T>;
  const C decay = static_cast<C>(k.decay), keep_g1 = static_cast<C>(k.keep_g1), keep_g2 = static_cast<C>(k.keep_g2),
          b2 = static_cast<C>(k.beta2), eps = static_cast<C>(k.epsilon), step_size = static_cast<C>(k.step_size),
          bc2_sqrt = static_cast<C>(k.bc2_sqrt);
#pragma omp simd
  for (int64_t i = begin; i < end; ++i) {
    const C gi = C(g[i]);
    const C mi = C(m[i]);
    const C m_next = C(T(mi + C(T((gi - mi) * keep_g1))));
    const C v_next = C(T(C(v[i]) * b2 + C(T(gi * gi)) * keep_g2));
    const C denominator = C(T(std::sqrt(v_next) / bc2_sqrt)) + eps;
    const C update = C(T(m_next / denominator)) * step_size;
    p1[i] = static_cast<T>(C(T(C(p[i]) * decay)) - update);
    m1[i] = static_cast<T>(m_next);
    v1[i] = static_cast<T>(v_next);
  }
}

// adam_mode 1's coefficients (ops/cpu/adamw.h): values of S (float or double), held in double
// (which holds a float exactly); the range rounds each to T once, as the body's
// CastLike (s_..., p) do.
struct HuggingFaceCoefficients {
  double beta1, beta2, keep1, keep2, epsilon, rate, lr_wd;
};

template <typename S>
HuggingFaceCoefficients huggingface_coefficients(const AdamWHyperparameters& h, S lr, int64_t step) {
  S beta1 = static_cast<S>(h.beta1), beta2 = static_cast<S>(h.beta2);
  // GCC 12 at -O2 with -fno-math-errno drops the rounding to float of a value that also
  // reaches std::pow as a double (it returned beta1 = 0.9, not 0.9f; test_artifacts.py's
  // float64 adam_mode 1 cases caught it). The empty asm makes the rounded values opaque.
  asm("" : "+m"(beta1), "+m"(beta2));
  S bc1 = 1, bc2 = 1;
  if (h.bias_correction) {
    const auto t = static_cast<double>(step);
    bc1 = S(1) - static_cast<S>(std::pow(static_cast<double>(beta1), t));
    bc2 = S(1) - static_cast<S>(std::pow(static_cast<double>(beta2), t));
  }
  const S rate = lr * (std::sqrt(bc2) / bc1);
  const S lr_wd = lr * static_cast<S>(h.weight_decay);
  return {beta1, beta2, S(1) - beta1, S(1) - beta2, static_cast<S>(h.epsilon), rate, lr_wd};
}

// adam_mode 1's update of elements [begin, end), in ORT's order; every operation rounds to
// T. The outputs may be the inputs.
template <typename T>
ONNXTRAIN_MULTIVERSIONED void adamw_huggingface_range(const HuggingFaceCoefficients& k, const T* p, const T* g,
                                                      const T* m, const T* v, T* p1, T* m1, T* v1, int64_t begin,
                                                      int64_t end) {
  using C = compute_type_t<T>;
  // A float held in double converts to C exactly; C to T rounds once (a no-op unless T is 16-bit).
  const auto to_t = [](double x) { return C(T(static_cast<C>(x))); };
  const C beta1 = to_t(k.beta1), beta2 = to_t(k.beta2), keep1 = to_t(k.keep1), keep2 = to_t(k.keep2),
          eps = to_t(k.epsilon), rate = to_t(k.rate), lr_wd = to_t(k.lr_wd);
#pragma omp simd
  for (int64_t i = begin; i < end; ++i) {
    const C gi = C(g[i]);
    const C m_next = C(T(C(T(beta1 * C(m[i]))) + C(T(keep1 * gi))));
    const C v_next = C(T(C(T(beta2 * C(v[i]))) + C(T(C(T(keep2 * gi)) * gi))));
    const C denominator = C(T(C(T(std::sqrt(v_next))) + eps));
    const C updated = C(T(C(p[i]) - C(T(C(T(rate * m_next)) / denominator))));
    p1[i] = static_cast<T>(updated - C(T(lr_wd * updated)));
    m1[i] = static_cast<T>(m_next);
    v1[i] = static_cast<T>(v_next);
  }
}

const KernelRegistration kAdamWStep{
    kDomain, "AdamWStep", 1, kLatestOpset, [](const KernelInfo& info) {
      AdamWHyperparameters h;
      h.beta1 = scalar_attribute(info, "beta1");
      h.beta2 = scalar_attribute(info, "beta2");
      h.epsilon = scalar_attribute(info, "epsilon");
      h.weight_decay = scalar_attribute(info, "weight_decay");
      h.bias_correction = info.bool_attribute("bias_correction", true);
      const int64_t mode = info.int_attribute("adam_mode", 0);
      if (mode != 0 && mode != 1) {
        info.fail("adam_mode must be 0 (torch.optim.AdamW) or 1 (Hugging Face's, onnxruntime-training's), got " +
                  std::to_string(mode));
      }
      return make_kernel([=](KernelContext& ctx) {
        const Tensor& lr_tensor = ctx.input(0);
        const double lr = scalar_input(ctx, 0, "the learning rate");
        const int64_t step = step_input(ctx, 1);
        const Tensor& param = ctx.input(2);
        check_like(ctx, param, 3, "the gradient");
        check_like(ctx, param, 4, "the first moment");
        check_like(ctx, param, 5, "the second moment");
        const Tensor& grad = ctx.input(3);
        const Tensor& m_in = ctx.input(4);
        const Tensor& v_in = ctx.input(5);
        Tensor& p_out = ctx.allocate_output_in_place(0, 2, param.dtype(), param.shape());
        Tensor& m_out = ctx.allocate_output_in_place(1, 4, param.dtype(), param.shape());
        Tensor& v_out = ctx.allocate_output_in_place(2, 5, param.dtype(), param.shape());
        if (mode == 1) {
          if (!is_floating(lr_tensor.dtype())) ctx.fail("the learning rate must be a floating-point scalar");
          const DType scalar_type = lr_tensor.dtype() == DType::kFloat64 ? DType::kFloat64 : DType::kFloat32;
          adamw_huggingface_update(h, scalar_type, lr, step, param.dtype(), param.raw_data(), grad.raw_data(),
                                   m_in.raw_data(), v_in.raw_data(), p_out.raw_data(), m_out.raw_data(),
                                   v_out.raw_data(), param.numel());
          return;
        }
        const auto t = static_cast<double>(step);
        const double bc1 = h.bias_correction ? 1 - std::pow(h.beta1, t) : 1;
        const double bc2 = h.bias_correction ? 1 - std::pow(h.beta2, t) : 1;
        const AdamWCoefficients k{1 - lr * h.weight_decay, 1 - h.beta1, 1 - h.beta2, h.beta2, h.epsilon, lr / bc1,
                                  std::sqrt(bc2)};
        dispatch<OPTIMIZER_FLOAT_TYPES>(param.dtype(), "AdamWStep", [&]<typename T>() {
          const T *p = param.data<T>(), *g = grad.data<T>(), *m = m_in.data<T>(), *v = v_in.data<T>();
          T *p1 = p_out.data<T>(), *m1 = m_out.data<T>(), *v1 = v_out.data<T>();
          parallel_for(param.numel(), kGrain,
                       [&](int64_t begin, int64_t end) { adamw_step_range(k, p, g, m, v, p1, m1, v1, begin, end); });
        });
      });
    }};

// ---- SGDStep (lr, p, g) => (p_out) ----

// SGDStep's update of elements [begin, end); p1 may be p (in place).
template <typename T, typename C>
ONNXTRAIN_MULTIVERSIONED void sgd_step_range(C wd, C rate, const T* p, const T* g, T* p1, int64_t begin, int64_t end) {
#pragma omp simd
  for (int64_t i = begin; i < end; ++i) {
    const C direction = C(g[i]) + C(T(C(p[i]) * wd));
    p1[i] = static_cast<T>(C(p[i]) - C(T(C(T(direction)) * rate)));
  }
}

const KernelRegistration kSGDStep{kDomain, "SGDStep", 1, kLatestOpset, [](const KernelInfo& info) {
                                    const double weight_decay = scalar_attribute(info, "weight_decay");
                                    return make_kernel([=](KernelContext& ctx) {
                                      const double lr = scalar_input(ctx, 0, "the learning rate");
                                      const Tensor& param = ctx.input(1);
                                      check_like(ctx, param, 2, "the gradient");
                                      const Tensor& grad = ctx.input(2);
                                      Tensor& p_out = ctx.allocate_output_in_place(0, 1, param.dtype(), param.shape());
                                      dispatch<OPTIMIZER_FLOAT_TYPES>(param.dtype(), "SGDStep", [&]<typename T>() {
                                        using C = compute_type_t<T>;
                                        const C wd = static_cast<C>(weight_decay);
                                        const C rate = static_cast<C>(static_cast<T>(lr));
                                        const T* p = param.data<T>();
                                        const T* g = grad.data<T>();
                                        T* p1 = p_out.data<T>();
                                        parallel_for(param.numel(), kGrain, [&](int64_t begin, int64_t end) {
                                          sgd_step_range(wd, rate, p, g, p1, begin, end);
                                        });
                                      });
                                    });
                                  }};

// ---- SGDMomentumStep (lr, step, p, g, buf) => (p_out, buf_out) ----

template <typename C>
struct SGDMomentumCoefficients {
  C mu, keep, wd, rate;
  bool first, nesterov;
};

// SGDMomentumStep's update of elements [begin, end); the outputs may be the inputs.
template <typename T, typename C>
ONNXTRAIN_MULTIVERSIONED void sgd_momentum_step_range(const SGDMomentumCoefficients<C>& k, const T* p, const T* g,
                                                      const T* buf, T* p1, T* buf1, int64_t begin, int64_t end) {
#pragma omp simd
  for (int64_t i = begin; i < end; ++i) {
    const C pi = C(p[i]);
    const C d = C(T(C(g[i]) + C(T(pi * k.wd))));
    const C b = k.first ? d : C(T(C(T(C(buf[i]) * k.mu)) + C(T(d * k.keep))));
    const C direction = k.nesterov ? C(T(d + C(T(b * k.mu)))) : b;
    p1[i] = static_cast<T>(pi - C(T(direction * k.rate)));
    buf1[i] = static_cast<T>(b);
  }
}

const KernelRegistration kSGDMomentumStep{
    kDomain, "SGDMomentumStep", 1, kLatestOpset, [](const KernelInfo& info) {
      const double momentum = scalar_attribute(info, "momentum");
      const double dampening = scalar_attribute(info, "dampening");
      const double weight_decay = scalar_attribute(info, "weight_decay");
      const bool nesterov = info.bool_attribute("nesterov", false);
      return make_kernel([=](KernelContext& ctx) {
        const double lr = scalar_input(ctx, 0, "the learning rate");
        const bool first = step_input(ctx, 1) == 1;
        const Tensor& param = ctx.input(2);
        check_like(ctx, param, 3, "the gradient");
        check_like(ctx, param, 4, "the momentum buffer");
        const Tensor& grad = ctx.input(3);
        const Tensor& buf_in = ctx.input(4);
        Tensor& p_out = ctx.allocate_output_in_place(0, 2, param.dtype(), param.shape());
        Tensor& buf_out = ctx.allocate_output_in_place(1, 4, param.dtype(), param.shape());
        dispatch<OPTIMIZER_FLOAT_TYPES>(param.dtype(), "SGDMomentumStep", [&]<typename T>() {
          using C = compute_type_t<T>;
          const C mu = static_cast<C>(momentum);
          const C keep = static_cast<C>(1 - dampening);
          const C wd = static_cast<C>(weight_decay);
          const C rate = static_cast<C>(static_cast<T>(lr));
          const SGDMomentumCoefficients<C> k{mu, keep, wd, rate, first, nesterov};
          const T* p = param.data<T>();
          const T* g = grad.data<T>();
          const T* buf = buf_in.data<T>();
          T* p1 = p_out.data<T>();
          T* buf1 = buf_out.data<T>();
          parallel_for(param.numel(), kGrain, [&](int64_t begin, int64_t end) {
            sgd_momentum_step_range(k, p, g, buf, p1, buf1, begin, end);
          });
        });
      });
    }};

// com.microsoft's ZeroGradient (gradient, reset_signal) => zeros like the gradient.
const KernelRegistration kMicrosoftZeroGradient{"com.microsoft", "ZeroGradient", 1, kLatestOpset,
                                                [](const KernelInfo&) {
                                                  return make_kernel([](KernelContext& ctx) {
                                                    const Tensor& g = ctx.input(0);
                                                    Tensor& out = ctx.allocate_output(0, g.dtype(), g.shape());
                                                    std::memset(out.raw_data(), 0, out.nbytes());
                                                  });
                                                }};

// ---- com.microsoft's AdamWOptimizer and SGDOptimizerV2: ORT's optimizer models ----
// AdamWOptimizer (lr, step, params, gradients, m1, m2, update_signal?)
//   => (updated_flag, params?, m1?, m2?)
// SGDOptimizerV2 (lr, params, gradients, momentums?, update_signal?)
//   => (update_completed, params?, momentums?)
// Over sequences of tensors. As ORT's kernels do, they update the tensors of the input
// sequences in place (ORT's training API, and a caller feeding arrays, see them change);
// the optional sequence outputs are those sequences. An update_signal of false skips the
// update (flag false).

// The tensors of sequence input `i`, checked against the parameters' count, types and shapes.
const std::vector<Tensor>& sequence_like(KernelContext& ctx, size_t i, const char* what,
                                         const std::vector<Tensor>* params) {
  const Tensor& value = ctx.input(i);
  if (!value.is_sequence()) ctx.fail(std::string(what) + " must be a sequence of tensors");
  const std::vector<Tensor>& tensors = value.sequence().tensors;
  if (params == nullptr) return tensors;
  if (tensors.size() != params->size()) {
    ctx.fail(std::string(what) + " holds " + std::to_string(tensors.size()) + " tensors for " +
             std::to_string(params->size()) + " parameters");
  }
  for (size_t k = 0; k < tensors.size(); ++k) {
    const Tensor& t = tensors[k];
    const Tensor& p = (*params)[k];
    if (t.dtype() != p.dtype() || t.shape() != p.shape()) {
      ctx.fail(std::string(what) + " " + std::to_string(k) + " is " + std::string(dtype_name(t.dtype())) +
               shape_string(t.shape()) + ", parameter " + std::to_string(k) + " " + std::string(dtype_name(p.dtype())) +
               shape_string(p.shape()));
    }
  }
  return tensors;
}

// The bytes of a tensor the kernel updates in place (ORT's contract for these ops).
void* in_place(const Tensor& t) {
  return const_cast<void*>(t.raw_data());
}

// False when the optional update_signal input says to skip this update.
bool update_requested(KernelContext& ctx, size_t i) {
  if (!ctx.has_input(i)) return true;
  const Tensor& t = ctx.input(i);
  if (t.dtype() != DType::kBool || t.numel() != 1) ctx.fail("update_signal must be one bool");
  return *static_cast<const bool*>(t.raw_data());
}

// Output 0 (bool [1]) says whether the update ran; outputs 1... pass the updated sequences on.
void finish_update(KernelContext& ctx, bool updated, std::initializer_list<size_t> sequence_inputs) {
  Tensor& flag = ctx.allocate_output(0, DType::kBool, {1});
  *static_cast<bool*>(flag.raw_data()) = updated;
  size_t output = 1;
  for (size_t input : sequence_inputs) {
    if (ctx.has_output(output)) ctx.set_output(output, ctx.input(input));
    ++output;
  }
}

const KernelRegistration kMicrosoftAdamWOptimizer{
    "com.microsoft", "AdamWOptimizer", 1, kLatestOpset, {.containers = true}, [](const KernelInfo& info) {
      AdamWHyperparameters h;
      h.beta1 = info.float_attribute("alpha", 0.9f);
      h.beta2 = info.float_attribute("beta", 0.999f);
      h.epsilon = info.float_attribute("epsilon", 1e-8f);
      h.weight_decay = info.float_attribute("weight_decay", 1e-2f);  // ORT's schema default
      h.bias_correction = info.int_attribute("correct_bias", 1) == 1;
      const int64_t mode = info.int_attribute("adam_mode", 0);
      if (mode != 0 && mode != 1) info.fail("adam_mode is " + std::to_string(mode) + "; ORT defines 0 and 1");
      return make_kernel([h, mode](KernelContext& ctx) {
        const auto lr = static_cast<float>(scalar_input(ctx, 0, "learning_rate"));
        const int64_t step = step_input(ctx, 1);
        const std::vector<Tensor>& params = sequence_like(ctx, 2, "params", nullptr);
        const std::vector<Tensor>& grads = sequence_like(ctx, 3, "gradients", &params);
        const std::vector<Tensor>& m = sequence_like(ctx, 4, "first_order_moments", &params);
        const std::vector<Tensor>& v = sequence_like(ctx, 5, "second_order_moments", &params);
        const bool update = update_requested(ctx, 6);
        for (size_t k = 0; update && k < params.size(); ++k) {
          const Tensor& p = params[k];
          if (mode == 0) {
            adamw_ort_torch_update(h, lr, step, p.dtype(), in_place(p), grads[k].raw_data(), in_place(m[k]),
                                   in_place(v[k]), p.numel());
          } else {
            adamw_huggingface_update(h, DType::kFloat32, lr, step, p.dtype(), p.raw_data(), grads[k].raw_data(),
                                     m[k].raw_data(), v[k].raw_data(), in_place(p), in_place(m[k]), in_place(v[k]),
                                     p.numel());
          }
        }
        finish_update(ctx, update, {2, 4, 5});
      });
    }};

const KernelRegistration kMicrosoftSGDOptimizerV2{
    "com.microsoft", "SGDOptimizerV2", 1, kLatestOpset, {.containers = true}, [](const KernelInfo&) {
      return make_kernel([](KernelContext& ctx) {
        const float lr = static_cast<float>(scalar_input(ctx, 0, "learning_rate"));
        const std::vector<Tensor>& params = sequence_like(ctx, 1, "params", nullptr);
        const std::vector<Tensor>& grads = sequence_like(ctx, 2, "gradients", &params);
        const bool update = update_requested(ctx, 4);
        for (size_t k = 0; update && k < params.size(); ++k) {
          dispatch<float, double>(params[k].dtype(), "SGDOptimizerV2", [&]<typename T>() {
            T* p = static_cast<T*>(in_place(params[k]));
            const T* g = grads[k].data<T>();
            parallel_for(params[k].numel(), kGrain, [&](int64_t begin, int64_t end) {
              sgd_step_range(T(0), static_cast<T>(lr), p, g, p, begin, end);  // no weight decay
            });
          });
        }
        finish_update(ctx, update, {1, 3});
      });
    }};

}  // namespace

void adamw_ort_torch_update(const AdamWHyperparameters& h, float lr, int64_t step, DType dtype, void* p, const void* g,
                            void* m, void* v, int64_t n) {
  float alpha_correction = 1.f, beta_correction = 1.f;
  if (h.bias_correction) {
    alpha_correction = 1.f - static_cast<float>(std::pow(static_cast<float>(h.beta1), step));
    beta_correction = 1.f - static_cast<float>(std::pow(static_cast<float>(h.beta2), step));
  }
  dispatch<float, double>(dtype, "AdamW (adam_mode 0)", [&]<typename T>() {
    auto* w = static_cast<T*>(p);
    const auto* d = static_cast<const T*>(g);
    auto *mp = static_cast<T*>(m), *vp = static_cast<T*>(v);
    const auto alpha = static_cast<T>(static_cast<float>(h.beta1)), beta = static_cast<T>(static_cast<float>(h.beta2));
    const auto eps = static_cast<T>(static_cast<float>(h.epsilon));
    const auto wd = static_cast<T>(static_cast<float>(h.weight_decay));
    for (int64_t i = 0; i < n; ++i) {
      w[i] = w[i] - w[i] * T(lr) * wd;
      mp[i] = alpha * mp[i] + (T(1) - alpha) * d[i];
      vp[i] = beta * vp[i] + (T(1) - beta) * d[i] * d[i];
      const T denom = std::sqrt(vp[i] / T(beta_correction)) + eps;
      w[i] = w[i] - (T(lr) * mp[i]) / (T(alpha_correction) * denom);
    }
  });
}

void adamw_huggingface_update(const AdamWHyperparameters& h, DType scalar_type, double lr, int64_t step, DType dtype,
                              const void* p, const void* g, const void* m, const void* v, void* p1, void* m1, void* v1,
                              int64_t n) {
  const HuggingFaceCoefficients k = scalar_type == DType::kFloat64
                                        ? huggingface_coefficients<double>(h, lr, step)
                                        : huggingface_coefficients<float>(h, static_cast<float>(lr), step);
  dispatch<OPTIMIZER_FLOAT_TYPES>(dtype, "AdamW (adam_mode 1)", [&]<typename T>() {
    const auto *pp = static_cast<const T*>(p), *gp = static_cast<const T*>(g), *mp = static_cast<const T*>(m),
               *vp = static_cast<const T*>(v);
    auto *p1p = static_cast<T*>(p1), *m1p = static_cast<T*>(m1), *v1p = static_cast<T*>(v1);
    parallel_for(n, kGrain, [&](int64_t begin, int64_t end) {
      adamw_huggingface_range(k, pp, gp, mp, vp, p1p, m1p, v1p, begin, end);
    });
  });
}

}  // namespace onnxtrain
