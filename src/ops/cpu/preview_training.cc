// The optimizers of the ONNX domain ai.onnx.preview.training: Adagrad, Adam and Momentum.
// Each takes (R, T, X_1..X_n, G_1..G_n, state...) — the learning rate R (float or double
// scalar), the update count T (int64 scalar), the tensors to optimize, their gradients and
// their optimizer state — and returns the updated tensors, then the updated state, in the
// order of the inputs. The formulas are the spec's, computed in double per element.
// (onnxtrain's own fused optimizer steps, for its training artifacts, are in
// optimizer_kernels.cc.)
#include <cmath>
#include <string>

#include "core/dispatch.h"
#include "core/parallel.h"
#include "ops/kernel_registry.h"

namespace onnxtrain {
namespace {

constexpr const char* kDomain = "ai.onnx.preview.training";
constexpr int64_t kGrain = 16384;

// R and T, read once per run.
struct Step {
  double r = 0;
  int64_t t = 0;
};

Step read_step(const KernelContext& ctx) {
  const Tensor& r = ctx.input(0);
  const Tensor& t = ctx.input(1);
  if (r.numel() != 1 || !is_floating(r.dtype())) {
    ctx.fail("input 'R' must be a floating-point scalar, got " + std::string(dtype_name(r.dtype())) +
             shape_string(r.shape()));
  }
  if (t.numel() != 1 || t.dtype() != DType::kInt64) {
    ctx.fail("input 'T' must be an int64 scalar, got " + std::string(dtype_name(t.dtype())) + shape_string(t.shape()));
  }
  return {r.item_as_double(), t.data<int64_t>()[0]};
}

// The count n of optimized tensors when the node has 2 + groups * n inputs, with every
// group's i-th tensor of X_i's type and shape.
int64_t tensor_count(const KernelContext& ctx, int64_t groups) {
  const int64_t inputs = static_cast<int64_t>(ctx.input_count());
  if (inputs < 2 + groups || (inputs - 2) % groups != 0) {
    ctx.fail("expected 2 + " + std::to_string(groups) + " n inputs (R, T, then " + std::to_string(groups) +
             " groups of n tensors), got " + std::to_string(inputs));
  }
  const int64_t n = (inputs - 2) / groups;
  for (int64_t i = 0; i < n; ++i) {
    const Tensor& x = ctx.input(static_cast<size_t>(2 + i));
    for (int64_t g = 1; g < groups; ++g) {
      const Tensor& other = ctx.input(static_cast<size_t>(2 + g * n + i));
      if (other.dtype() != x.dtype() || other.shape() != x.shape()) {
        ctx.fail("input " + std::to_string(2 + g * n + i) + " is " + std::string(dtype_name(other.dtype())) +
                 shape_string(other.shape()) + ", expected " + std::string(dtype_name(x.dtype())) +
                 shape_string(x.shape()) + " like input " + std::to_string(2 + i));
      }
    }
  }
  return n;
}

// For each optimized tensor i, calls update(in, out, count) with the i-th tensor of each
// input group and of each output group, as double-computing element pointers.
template <typename Update>
void for_each_tensor(KernelContext& ctx, int64_t groups, int64_t out_groups, Update update) {
  const int64_t n = tensor_count(ctx, groups);
  for (int64_t i = 0; i < n; ++i) {
    const Tensor& x = ctx.input(static_cast<size_t>(2 + i));
    dispatch<float, double>(x.dtype(), ctx.node().op_type, [&]<typename T>() {
      std::vector<const T*> in;
      for (int64_t g = 0; g < groups; ++g) in.push_back(ctx.input(static_cast<size_t>(2 + g * n + i)).data<T>());
      std::vector<T*> out;
      for (int64_t g = 0; g < out_groups; ++g) {
        out.push_back(ctx.allocate_output(static_cast<size_t>(g * n + i), x.dtype(), x.shape()).data<T>());
      }
      parallel_for(x.numel(), kGrain, [&](int64_t begin, int64_t end) {
        for (int64_t k = begin; k < end; ++k) update(in, out, k);
      });
    });
  }
}

// Adagrad (R, T, X..., G..., H...) => (X_new..., H_new...):
//   r' = R / (1 + T decay_factor); g' = norm_coefficient X + G; H' = H + g'^2;
//   X' = X - r' g' / (sqrt(H') + epsilon).
const KernelRegistration kAdagrad{kDomain, "Adagrad", 1, kLatestOpset, [](const KernelInfo& info) {
                                    const double decay = info.float_attribute("decay_factor", 0.0f);
                                    const double epsilon = info.float_attribute("epsilon", 1e-6f);
                                    const double lambda = info.float_attribute("norm_coefficient", 0.0f);
                                    return make_kernel([=](KernelContext& ctx) {
                                      const Step s = read_step(ctx);
                                      const double r = s.r / (1.0 + static_cast<double>(s.t) * decay);
                                      for_each_tensor(ctx, 3, 2, [&](const auto& in, const auto& out, int64_t k) {
                                        using T =
                                            std::remove_pointer_t<typename std::decay_t<decltype(out)>::value_type>;
                                        const double x = in[0][k], g = lambda * x + in[1][k];
                                        const double h = in[2][k] + g * g;
                                        out[0][k] = static_cast<T>(x - r * g / (std::sqrt(h) + epsilon));
                                        out[1][k] = static_cast<T>(h);
                                      });
                                    });
                                  }};

// Adam (R, T, X..., G..., V..., H...) => (X_new..., V_new..., H_new...):
//   g' = norm_coefficient X + G; V' = alpha V + (1 - alpha) g'; H' = beta H + (1 - beta) g'^2;
//   r' = R sqrt(1 - beta^T) / (1 - alpha^T) when T > 0, else R;
//   X' = (1 - norm_coefficient_post) (X - r' V' / (sqrt(H') + epsilon)).
const KernelRegistration kAdam{
    kDomain, "Adam", 1, kLatestOpset, [](const KernelInfo& info) {
      const double alpha = info.float_attribute("alpha", 0.9f);
      const double beta = info.float_attribute("beta", 0.999f);
      const double epsilon = info.float_attribute("epsilon", 1e-6f);
      const double lambda = info.float_attribute("norm_coefficient", 0.0f);
      const double lambda_post = info.float_attribute("norm_coefficient_post", 0.0f);
      return make_kernel([=](KernelContext& ctx) {
        const Step s = read_step(ctx);
        const double t = static_cast<double>(s.t);
        const double r = s.t > 0 ? s.r * std::sqrt(1.0 - std::pow(beta, t)) / (1.0 - std::pow(alpha, t)) : s.r;
        for_each_tensor(ctx, 4, 3, [&](const auto& in, const auto& out, int64_t k) {
          using T = std::remove_pointer_t<typename std::decay_t<decltype(out)>::value_type>;
          const double x = in[0][k], g = lambda * x + in[1][k];
          const double v = alpha * in[2][k] + (1.0 - alpha) * g;
          const double h = beta * in[3][k] + (1.0 - beta) * g * g;
          out[0][k] = static_cast<T>((1.0 - lambda_post) * (x - r * v / (std::sqrt(h) + epsilon)));
          out[1][k] = static_cast<T>(v);
          out[2][k] = static_cast<T>(h);
        });
      });
    }};

// Momentum (R, T, X..., G..., V...) => (X_new..., V_new...):
//   g' = norm_coefficient X + G; V' = alpha V + beta' g' with beta' = beta when T > 0, else 1;
//   X' = X - R V' (mode "standard") or X - R (g' + alpha V') (mode "nesterov").
const KernelRegistration kMomentum{kDomain, "Momentum", 1, kLatestOpset, [](const KernelInfo& info) {
                                     const double alpha = info.float_attribute("alpha");
                                     const double beta = info.float_attribute("beta");
                                     const double lambda = info.float_attribute("norm_coefficient");
                                     const std::string mode = info.string_attribute("mode");
                                     if (mode != "standard" && mode != "nesterov") {
                                       info.fail("mode is '" + mode + "', expected 'standard' or 'nesterov'");
                                     }
                                     const bool nesterov = mode == "nesterov";
                                     return make_kernel([=](KernelContext& ctx) {
                                       const Step s = read_step(ctx);
                                       const double b = s.t > 0 ? beta : 1.0;
                                       for_each_tensor(ctx, 3, 2, [&](const auto& in, const auto& out, int64_t k) {
                                         using T =
                                             std::remove_pointer_t<typename std::decay_t<decltype(out)>::value_type>;
                                         const double x = in[0][k], g = lambda * x + in[1][k];
                                         const double v = alpha * in[2][k] + b * g;
                                         out[0][k] = static_cast<T>(nesterov ? x - s.r * (g + alpha * v) : x - s.r * v);
                                         out[1][k] = static_cast<T>(v);
                                       });
                                     });
                                   }};

}  // namespace
}  // namespace onnxtrain
