// Normalizations: BatchNormalization (inference and training mode), LayerNormalization,
// InstanceNormalization, GroupNormalization, LpNormalization, RMSNormalization and
// MeanVarianceNormalization, and onnxruntime-training's SimplifiedLayerNormalization (its
// RMSNorm); their gradient kernels are in normalization_grad.cc.
//
// All run plain loops: statistics in two passes (the mean, then the mean squared
// deviation, which stays accurate when the mean is large), then one affine pass
// y = x * a + b per channel or row. Those loops vectorize, and they beat oneDNN 2.6 where
// it has the op: its batch normalization on NCHW data is a generic C++ kernel
// ("ncsp_bnorm"), measured 10x slower than the loop for BatchNormalization and
// InstanceNormalization; its layer normalization ("simple_layer_normalization") took
// ~4 us for a 16 x 64 input, the loop well under 1 us; it has no group normalization.
#include "ops/cpu/normalization.h"

#include <cmath>

#include "core/dispatch.h"
#include "ops/cpu/axis.h"
#include "ops/cpu/broadcast.h"
#include "ops/cpu/multiversion.h"
#include "ops/cpu/onednn.h"
#include "ops/kernel_registry.h"

namespace onnxtrain {
namespace {

using normalization::check_float;
using normalization::simplified_rows;
using normalization::SimplifiedRows;
using normalization::store;
using normalization::values_as;

// Statistics accumulate in double for float64 and in float otherwise (ONNX's stash type).
template <typename T>
using acc_t = std::conditional_t<std::is_same_v<T, double>, double, float>;

// Mean and biased variance of `segments` runs of `length` elements, `stride` apart. The mean
// is summed relative to the first element: rows far from 0 keep their spread (a constant
// row's deviations are exactly 0, so its normalized values are exactly 0, where a plain sum's
// rounding, divided by sqrt(epsilon), would leave up to ~1e-4).
template <typename T>
ONNXTRAIN_MULTIVERSIONED [[gnu::flatten]] std::pair<acc_t<T>, acc_t<T>> moments(const T* x, int64_t segments,
                                                                                int64_t stride, int64_t length) {
  using A = acc_t<T>;
  const int64_t count = segments * length;
  if (count == 0) return {A(0), A(0)};
  const A shift = static_cast<A>(x[0]);
  A sum = 0;
  for (int64_t s = 0; s < segments; ++s) {
    const T* p = x + s * stride;
    sum += onednn::lane_sum<A>(length, [&](int64_t i) { return static_cast<A>(p[i]) - shift; });
  }
  const A mean = shift + sum / static_cast<A>(count);
  A squares = 0;
  for (int64_t s = 0; s < segments; ++s) {
    const T* p = x + s * stride;
    squares += onednn::lane_sum<A>(length, [&](int64_t i) {
      const A d = static_cast<A>(p[i]) - mean;
      return d * d;
    });
  }
  return {mean, squares / static_cast<A>(count)};
}

// y[i] = x[i] * a + b over `length` contiguous elements.
template <typename T, typename A>
ONNXTRAIN_MULTIVERSIONED [[gnu::flatten]] void affine(const T* x, T* y, int64_t length, A a, A b) {
  for (int64_t i = 0; i < length; ++i) y[i] = static_cast<T>(static_cast<A>(x[i]) * a + b);
}

void check_vector(KernelContext& ctx, const Tensor& t, const char* name, int64_t size, const std::string& why) {
  check_float(ctx, t, name);
  if (t.numel() != size) {
    ctx.fail(std::string(name) + " " + shape_string(t.shape()) + " must hold " + std::to_string(size) + " values (" +
             why + ")");
  }
}

// ---- BatchNormalization ----

// X viewed as [N, C, S]: statistics are per channel, over N and S.
struct ChannelView {
  int64_t n = 0, c = 0, s = 0;
};

class BatchNormKernel final : public OpKernel {
 public:
  // `saves_inv_std`: output 4 is 1 / sqrt(var + epsilon), not var (ORT's BatchNormInternal).
  explicit BatchNormKernel(const KernelInfo& info, bool saves_inv_std = false)
      : saves_inv_std_(saves_inv_std),
        epsilon_(info.float_attribute("epsilon", 1e-5f)),
        momentum_(info.float_attribute("momentum", 0.9f)),
        // Before opset 14 a node trains when it asks for the statistics outputs.
        training_(info.opset() >= 14 ? info.bool_attribute("training_mode", false) : info.output_count() > 1),
        per_activation_(info.opset() < 9 && !info.bool_attribute("spatial", true)) {}

  void compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    check_float(ctx, x, "X");
    if (x.rank() < 2) ctx.fail("X must be [N, C, ...], got " + shape_string(x.shape()));
    ChannelView v{x.dim(0), x.dim(1), x.numel() / std::max<int64_t>(1, x.dim(0) * x.dim(1))};
    if (per_activation_) {  // spatial=0: statistics per (channel, position)
      v.c *= v.s;
      v.s = 1;
    }
    if (x.numel() == 0) v.s = 0;
    const std::string stats = per_activation_ ? "one per channel and position (spatial=0)" : "one per channel of X";
    for (size_t i = 1; i < 5; ++i) {
      static const char* names[] = {"", "scale", "B", "input_mean", "input_var"};
      check_vector(ctx, ctx.input(i), names[i], v.c, stats);
    }
    Tensor& y = ctx.allocate_output(0, x.dtype(), x.shape());
    if (training_) {
      train(ctx, x, y, v);
      return;
    }
    if (x.numel() == 0) return;
    const std::vector<double> mean = values_as<double>(ctx.input(3), "BatchNormalization");
    const std::vector<double> var = values_as<double>(ctx.input(4), "BatchNormalization");
    apply(ctx, x, y, v, mean, var);
  }

 private:
  // y = (x - mean) / sqrt(var + epsilon) * scale + B, as y = x * a + b per channel.
  void apply(KernelContext& ctx, const Tensor& x, Tensor& y, const ChannelView& v, const std::vector<double>& mean,
             const std::vector<double>& var) const {
    const std::vector<double> scale = values_as<double>(ctx.input(1), "BatchNormalization");
    const std::vector<double> bias = values_as<double>(ctx.input(2), "BatchNormalization");
    dispatch<float, double, Float16, BFloat16>(x.dtype(), "BatchNormalization", [&]<typename T>() {
      using A = acc_t<T>;
      const T* px = x.data<T>();
      T* py = y.data<T>();
      parallel_for(v.n * v.c, std::max<int64_t>(1, 16384 / std::max<int64_t>(v.s, 1)), [&](int64_t b, int64_t e) {
        for (int64_t plane = b; plane < e; ++plane) {
          const size_t c = static_cast<size_t>(plane % v.c);
          const double a = scale[c] / std::sqrt(var[c] + epsilon_);
          affine(px + plane * v.s, py + plane * v.s, v.s, static_cast<A>(a), static_cast<A>(bias[c] - mean[c] * a));
        }
      });
    });
  }

  // Normalizes with the batch statistics and updates the running ones:
  // running = input * momentum + batch * (1 - momentum), with the biased batch variance.
  void train(KernelContext& ctx, const Tensor& x, Tensor& y, const ChannelView& v) {
    std::vector<double> mean(static_cast<size_t>(v.c)), var(static_cast<size_t>(v.c));
    if (x.numel() > 0) {
      dispatch<float, double, Float16, BFloat16>(x.dtype(), "BatchNormalization", [&]<typename T>() {
        const T* px = x.data<T>();
        parallel_for(v.c, 1, [&](int64_t b, int64_t e) {
          for (int64_t c = b; c < e; ++c) {
            auto [mu, sigma2] = moments(px + c * v.s, v.n, v.c * v.s, v.s);
            mean[static_cast<size_t>(c)] = mu;
            var[static_cast<size_t>(c)] = sigma2;
          }
        });
      });
      apply(ctx, x, y, v, mean, var);
    }
    const Tensor& input_mean = ctx.input(3);
    const Tensor& input_var = ctx.input(4);
    const std::vector<double> running_mean = values_as<double>(input_mean, "BatchNormalization");
    const std::vector<double> running_var = values_as<double>(input_var, "BatchNormalization");
    std::vector<double> new_mean(mean.size()), new_var(var.size());
    for (size_t c = 0; c < mean.size(); ++c) {
      new_mean[c] = running_mean[c] * momentum_ + mean[c] * (1.0 - momentum_);
      new_var[c] = running_var[c] * momentum_ + var[c] * (1.0 - momentum_);
    }
    if (saves_inv_std_) {
      for (double& value : var) value = 1.0 / std::sqrt(value + epsilon_);
    }
    const std::vector<double>* outputs[] = {&new_mean, &new_var, &mean, &var};
    const Tensor* like[] = {&input_mean, &input_var, &input_mean, &input_var};
    for (size_t i = 1; i < ctx.output_count() && i <= 4; ++i) {
      if (!ctx.has_output(i)) continue;
      Tensor& out = ctx.allocate_output(i, like[i - 1]->dtype(), like[i - 1]->shape());
      store(*outputs[i - 1], out);
    }
  }

  bool saves_inv_std_;
  float epsilon_, momentum_;
  bool training_, per_activation_;
};

const KernelRegistration kBatchNormalization{"", "BatchNormalization", 6, kLatestOpset, [](const KernelInfo& info) {
                                               return std::make_unique<BatchNormKernel>(info);
                                             }};
// onnxruntime-training's training-mode BatchNormalization: (X, scale, B, mean, var) =>
// (Y, running_mean, running_var, saved_mean, saved_inv_std).
const KernelRegistration kMicrosoftBatchNormInternal{
    "com.microsoft", "BatchNormInternal", 1, kLatestOpset, [](const KernelInfo& info) {
      if (!info.bool_attribute("training_mode", true)) info.fail("BatchNormInternal runs in training mode only");
      return std::make_unique<BatchNormKernel>(info, /*saves_inv_std=*/true);
    }};

// ---- LayerNormalization ----

// float32 rows [begin, end) of `cols` elements: the same two passes as the other types,
// on float parameters so that every loop vectorizes. `bias`, `means` and `inv_stds` may
// be null.
ONNXTRAIN_MULTIVERSIONED [[gnu::flatten]] void layer_norm_float_rows(const float* x, float* y, int64_t begin,
                                                                     int64_t end, int64_t cols, const float* scale,
                                                                     const float* bias, float epsilon, float* means,
                                                                     float* inv_stds) {
  for (int64_t r = begin; r < end; ++r) {
    const float* xr = x + r * cols;
    float* yr = y + r * cols;
    const auto [mu, sigma2] = moments(xr, 1, 0, cols);
    const float inv = 1.0f / std::sqrt(sigma2 + epsilon);
    if (bias) {
      for (int64_t j = 0; j < cols; ++j) yr[j] = (xr[j] - mu) * inv * scale[j] + bias[j];
    } else {
      for (int64_t j = 0; j < cols; ++j) yr[j] = (xr[j] - mu) * inv * scale[j];
    }
    if (means) means[r] = mu;
    if (inv_stds) inv_stds[r] = inv;
  }
}

// Checks that Scale or B broadcasts to the normalized shape as ONNX's Mul and Add would
// (unidirectionally).
void check_broadcast(KernelContext& ctx, const Tensor& t, const Shape& normalized, const char* name) {
  check_float(ctx, t, name);
  bool ok = t.rank() <= normalized.size();
  for (size_t i = 0; ok && i < t.rank(); ++i) {
    const int64_t d = t.shape()[i], want = normalized[normalized.size() - t.rank() + i];
    ok = d == want || d == 1;
  }
  if (!ok) {
    ctx.fail(std::string(name) + " " + shape_string(t.shape()) + " does not broadcast to the normalized shape " +
             shape_string(normalized));
  }
}

// Scale or B as C values over the whole normalized shape.
template <typename C>
std::vector<C> expand_to(const Tensor& t, const Shape& normalized, const char* name) {
  const std::vector<C> values = values_as<C>(t, name);
  if (t.numel() == shape_size(normalized)) return values;
  std::vector<C> out(static_cast<size_t>(shape_size(normalized)));
  const std::vector<int64_t> strides = broadcast_strides(t.shape(), normalized);
  for (size_t i = 0; i < out.size(); ++i) {
    int64_t rest = static_cast<int64_t>(i), offset = 0;
    for (size_t d = normalized.size(); d-- > 0;) {
      offset += rest % normalized[d] * strides[d];
      rest /= normalized[d];
    }
    out[i] = values[static_cast<size_t>(offset)];
  }
  return out;
}

class LayerNormKernel final : public OpKernel {
 public:
  explicit LayerNormKernel(const KernelInfo& info)
      : axis_(info.int_attribute("axis", -1)), epsilon_(info.float_attribute("epsilon", 1e-5f)) {
    const int64_t stash = info.int_attribute("stash_type", 1);
    if (stash != 1)
      info.fail("stash_type is " + std::to_string(stash) + "; onnxtrain computes statistics in float (1)");
  }

  void compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    check_float(ctx, x, "X");
    const auto axis = static_cast<size_t>(normalize_axis(ctx, axis_, static_cast<int64_t>(x.rank())));
    const Shape normalized(x.shape().begin() + static_cast<int64_t>(axis), x.shape().end());
    const int64_t rows = shape_size(std::span(x.shape()).first(axis)), cols = shape_size(normalized);
    const bool has_bias = ctx.has_input(2);
    check_broadcast(ctx, ctx.input(1), normalized, "Scale");
    if (has_bias) check_broadcast(ctx, ctx.input(2), normalized, "B");
    // float32 parameters over the whole normalized shape are used in place.
    const bool plain_params = ctx.input(1).dtype() == DType::kFloat32 && ctx.input(1).numel() == cols &&
                              (!has_bias || (ctx.input(2).dtype() == DType::kFloat32 && ctx.input(2).numel() == cols));
    // Parameters for the loop (double, so float64 keeps its precision), or float32 ones
    // for the float32 loop when the given ones do not fit it as they are.
    std::vector<double> scale, bias;
    std::vector<float> scale32, bias32;
    if (x.dtype() != DType::kFloat32) {
      scale = expand_to<double>(ctx.input(1), normalized, "Scale");
      if (has_bias) bias = expand_to<double>(ctx.input(2), normalized, "B");
    } else if (!plain_params) {
      scale32 = expand_to<float>(ctx.input(1), normalized, "Scale");
      if (has_bias) bias32 = expand_to<float>(ctx.input(2), normalized, "B");
    }
    Tensor& y = ctx.allocate_output(0, x.dtype(), x.shape());
    // Mean and InvStdDev keep X's leading axes and 1 for the normalized ones; their type is
    // the stash type, float (for float64 X too, as the spec and onnxruntime have it).
    Shape stat_shape(x.shape().begin(), x.shape().begin() + static_cast<int64_t>(axis));
    stat_shape.resize(x.rank(), 1);
    const DType stat_type = DType::kFloat32;
    Tensor* mean = ctx.has_output(1) ? &ctx.allocate_output(1, stat_type, stat_shape) : nullptr;
    Tensor* inv_std = ctx.has_output(2) ? &ctx.allocate_output(2, stat_type, stat_shape) : nullptr;
    if (rows == 0) return;
    if (cols == 0)
      ctx.fail("X " + shape_string(x.shape()) + " has nothing to normalize from axis " + std::to_string(axis));

    if (x.dtype() == DType::kFloat32) {
      const float* s = plain_params ? ctx.input(1).data<float>() : scale32.data();
      const float* b = !has_bias ? nullptr : plain_params ? ctx.input(2).data<float>() : bias32.data();
      run_float(x, y, rows, cols, s, b, mean, inv_std);
      return;
    }
    dispatch<double, Float16, BFloat16>(x.dtype(), "LayerNormalization", [&]<typename T>() {
      run_loop<T>(x, y, rows, cols, scale, bias, mean, inv_std);
    });
  }

 private:
  template <typename T>
  void run_loop(const Tensor& x, Tensor& y, int64_t rows, int64_t cols, const std::vector<double>& scale,
                const std::vector<double>& bias, Tensor* mean, Tensor* inv_std) const {
    using A = acc_t<T>;
    const T* px = x.data<T>();
    T* py = y.data<T>();
    parallel_for(rows, std::max<int64_t>(1, 8192 / cols), [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        auto [mu, sigma2] = moments(px + r * cols, 1, 0, cols);
        const A inv = A(1) / std::sqrt(sigma2 + static_cast<A>(epsilon_));
        const T* xr = px + r * cols;
        T* yr = py + r * cols;
        for (int64_t j = 0; j < cols; ++j) {
          const A v = (static_cast<A>(xr[j]) - mu) * inv * static_cast<A>(scale[static_cast<size_t>(j)]);
          yr[j] = static_cast<T>(bias.empty() ? v : v + static_cast<A>(bias[static_cast<size_t>(j)]));
        }
        if (mean) mean->data<float>()[r] = static_cast<float>(mu);
        if (inv_std) inv_std->data<float>()[r] = static_cast<float>(inv);
      }
    });
  }

  // float32: the same two passes, on float parameters so that every loop vectorizes.
  void run_float(const Tensor& x, Tensor& y, int64_t rows, int64_t cols, const float* scale, const float* bias,
                 Tensor* mean, Tensor* inv_std) const {
    const float* px = x.data<float>();
    float* py = y.data<float>();
    float* means = mean ? mean->data<float>() : nullptr;
    float* inv_stds = inv_std ? inv_std->data<float>() : nullptr;
    parallel_for(rows, std::max<int64_t>(1, 16384 / cols), [&](int64_t begin, int64_t end) {
      layer_norm_float_rows(px, py, begin, end, cols, scale, bias, epsilon_, means, inv_stds);
    });
  }

  int64_t axis_;
  float epsilon_;
};

const KernelRegistration kLayerNormalization{"", "LayerNormalization", 17, kLatestOpset, [](const KernelInfo& info) {
                                               return std::make_unique<LayerNormKernel>(info);
                                             }};

// ---- InstanceNormalization and GroupNormalization ----

// Normalizes each of `groups` consecutive channel blocks of every sample with its own
// statistics, then applies per-channel scale and bias: InstanceNormalization is the case
// of one channel per group.
template <typename T>
void group_norm_loop(const T* x, T* y, int64_t n, int64_t channels, int64_t groups, int64_t spatial,
                     const std::vector<double>& scale, const std::vector<double>& bias, float epsilon) {
  using A = acc_t<T>;
  const int64_t per_group = channels / groups, block = per_group * spatial;
  parallel_for(n * groups, 1, [&](int64_t begin, int64_t end) {
    for (int64_t ng = begin; ng < end; ++ng) {
      const int64_t g = ng % groups;
      auto [mu, sigma2] = moments(x + ng * block, 1, 0, block);
      const double inv = 1.0 / std::sqrt(static_cast<double>(sigma2) + epsilon);
      for (int64_t k = 0; k < per_group; ++k) {
        const size_t c = static_cast<size_t>(g * per_group + k);
        const double a = scale[c] * inv;
        const int64_t at = ng * block + k * spatial;
        affine(x + at, y + at, spatial, static_cast<A>(a), static_cast<A>(bias[c] - mu * a));
      }
    }
  });
}

class InstanceNormKernel final : public OpKernel {
 public:
  explicit InstanceNormKernel(const KernelInfo& info) : epsilon_(info.float_attribute("epsilon", 1e-5f)) {}

  void compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    check_float(ctx, x, "input");
    if (x.rank() < 3) ctx.fail("input must be [N, C, spatial...], got " + shape_string(x.shape()));
    const int64_t n = x.dim(0), c = x.dim(1), s = x.numel() / std::max<int64_t>(1, n * c);
    check_vector(ctx, ctx.input(1), "scale", c, "one per channel");
    check_vector(ctx, ctx.input(2), "B", c, "one per channel");
    Tensor& y = ctx.allocate_output(0, x.dtype(), x.shape());
    if (y.numel() == 0) return;
    const std::vector<double> scale = values_as<double>(ctx.input(1), "InstanceNormalization");
    const std::vector<double> bias = values_as<double>(ctx.input(2), "InstanceNormalization");
    dispatch<float, double, Float16, BFloat16>(x.dtype(), "InstanceNormalization", [&]<typename T>() {
      group_norm_loop<T>(x.data<T>(), y.data<T>(), n, c, c, s, scale, bias, epsilon_);
    });
  }

 private:
  float epsilon_;
};

const KernelRegistration kInstanceNormalization{
    "", "InstanceNormalization", 1, kLatestOpset,
    [](const KernelInfo& info) { return std::make_unique<InstanceNormKernel>(info); }};

// GroupNormalization-18 scales and shifts per group; -21 per channel.
KernelFactory group_norm_factory(bool per_channel) {
  return [per_channel](const KernelInfo& info) {
    const float epsilon = info.float_attribute("epsilon", 1e-5f);
    const int64_t groups = info.int_attribute("num_groups");
    if (groups < 1) info.fail("num_groups is " + std::to_string(groups) + ", expected 1 or more");
    const int64_t stash = info.int_attribute("stash_type", 1);
    if (stash != 1)
      info.fail("stash_type is " + std::to_string(stash) + "; onnxtrain computes statistics in float (1)");
    return make_kernel([=](KernelContext& ctx) {
      const Tensor& x = ctx.input(0);
      check_float(ctx, x, "X");
      if (x.rank() < 2) ctx.fail("X must be [N, C, ...], got " + shape_string(x.shape()));
      const int64_t n = x.dim(0), c = x.dim(1), s = x.numel() / std::max<int64_t>(1, n * c);
      if (c % groups != 0) {
        ctx.fail("X has " + std::to_string(c) + " channels, not a multiple of num_groups " + std::to_string(groups));
      }
      const int64_t params = per_channel ? c : groups;
      const std::string why = per_channel ? "one per channel" : "one per group (GroupNormalization-18)";
      check_vector(ctx, ctx.input(1), "scale", params, why);
      check_vector(ctx, ctx.input(2), "bias", params, why);
      Tensor& y = ctx.allocate_output(0, x.dtype(), x.shape());
      if (y.numel() == 0) return;
      std::vector<double> scale = values_as<double>(ctx.input(1), "GroupNormalization");
      std::vector<double> bias = values_as<double>(ctx.input(2), "GroupNormalization");
      if (!per_channel) {  // repeat each group's value over its channels
        std::vector<double> s2, b2;
        for (int64_t ch = 0; ch < c; ++ch) {
          s2.push_back(scale[static_cast<size_t>(ch / (c / groups))]);
          b2.push_back(bias[static_cast<size_t>(ch / (c / groups))]);
        }
        scale.swap(s2);
        bias.swap(b2);
      }
      dispatch<float, double, Float16, BFloat16>(x.dtype(), "GroupNormalization", [&]<typename T>() {
        group_norm_loop<T>(x.data<T>(), y.data<T>(), n, c, groups, s, scale, bias, epsilon);
      });
    });
  };
}

const KernelRegistration kGroupNormalization18{"", "GroupNormalization", 18, 20, group_norm_factory(false)};
const KernelRegistration kGroupNormalization21{"", "GroupNormalization", 21, kLatestOpset, group_norm_factory(true)};

// ---- LpNormalization ----

// y = x / ||x||_p along one axis (p = 1 or 2).
const KernelRegistration kLpNormalization{
    "", "LpNormalization", 1, kLatestOpset, [](const KernelInfo& info) {
      const int64_t axis = info.int_attribute("axis", -1);
      const int64_t p = info.int_attribute("p", 2);
      if (p != 1 && p != 2) info.fail("p is " + std::to_string(p) + ", expected 1 or 2");
      return make_kernel([axis, p](KernelContext& ctx) {
        const Tensor& x = ctx.input(0);
        check_float(ctx, x, "input");
        const AxisView view = axis_view(ctx, x.shape(), axis);
        const int64_t len = view.length, inner = view.inner, outer = view.outer;
        Tensor& y = ctx.allocate_output(0, x.dtype(), x.shape());
        if (y.numel() == 0) return;
        dispatch<float, double, Float16, BFloat16>(x.dtype(), "LpNormalization", [&]<typename T>() {
          using A = acc_t<T>;
          const T* px = x.data<T>();
          T* py = y.data<T>();
          parallel_for(outer * inner, std::max<int64_t>(1, 4096 / len), [&](int64_t begin, int64_t end) {
            for (int64_t r = begin; r < end; ++r) {
              const int64_t base = (r / inner) * len * inner + r % inner;
              A norm = 0;
              for (int64_t i = 0; i < len; ++i) {
                const A v = static_cast<A>(px[base + i * inner]);
                norm += p == 1 ? std::abs(v) : v * v;
              }
              if (p == 2) norm = std::sqrt(norm);
              const A scale = A(1) / norm;  // a zero norm gives NaN (0 / 0), as ONNX's x / norm does
              for (int64_t i = 0; i < len; ++i)
                py[base + i * inner] = static_cast<T>(static_cast<A>(px[base + i * inner]) * scale);
            }
          });
        });
      });
    }};

// ---- RMSNormalization ----

// Y = Cast<T>(X / sqrt(mean(X^2 over [axis, rank)) + epsilon)) * scale, as the spec's
// function body: the statistics and the division in the stash type, the product with
// scale (unidirectionally broadcast to X) in Y's type. float64 X computes in double under
// stash_type 1 too, as onnxruntime and onnx.reference do (float statistics would throw
// away the precision a float64 model asks for).
class RMSNormKernel final : public OpKernel {
 public:
  explicit RMSNormKernel(const KernelInfo& info)
      : axis_(info.int_attribute("axis", -1)),
        epsilon_(info.float_attribute("epsilon", 1e-5f)),
        stash_(info.int_attribute("stash_type", 1)) {
    if (stash_ != 1 && stash_ != 11) {
      info.fail("stash_type is " + std::to_string(stash_) +
                "; onnxtrain computes statistics in float (1) or double (11)");
    }
  }

  void compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    const Tensor& scale = ctx.input(1);
    check_float(ctx, x, "X");
    check_float(ctx, scale, "scale");
    const int64_t rank = static_cast<int64_t>(x.rank());
    normalize_axis(ctx, axis_, rank);
    if (!broadcasts_to(scale.shape(), x.shape())) {
      ctx.fail("scale " + shape_string(scale.shape()) + " does not broadcast to X " + shape_string(x.shape()) +
               " (unidirectionally, as Mul)");
    }
    const size_t axis = static_cast<size_t>(axis_ < 0 ? axis_ + rank : axis_);
    const int64_t rows = shape_size(std::span(x.shape()).first(axis));
    const int64_t cols = shape_size(std::span(x.shape()).subspan(axis));
    Tensor& y = ctx.allocate_output(0, scale.dtype(), x.shape());
    if (x.numel() == 0) return;
    // scale per row (the common case: it spans only normalized axes) or over all of X.
    const bool per_row = scale_spans_normalized(scale.shape(), x.shape(), axis);
    const std::vector<double> s =
        per_row
            ? expand_to<double>(scale, Shape(x.shape().begin() + static_cast<int64_t>(axis), x.shape().end()), "scale")
            : expand_to<double>(scale, x.shape(), "scale");
    const int64_t scale_row_step = per_row ? 0 : cols;
    dispatch<float, double, Float16, BFloat16>(x.dtype(), "RMSNormalization", [&]<typename T>() {
      dispatch<float, double, Float16, BFloat16>(y.dtype(), "RMSNormalization", [&]<typename V>() {
        if (stash_ == 11 || std::is_same_v<T, double>) {
          run<T, V, double>(x.data<T>(), y.data<V>(), rows, cols, s.data(), scale_row_step);
        } else {
          run<T, V, float>(x.data<T>(), y.data<V>(), rows, cols, s.data(), scale_row_step);
        }
      });
    });
  }

 private:
  static bool broadcasts_to(const Shape& scale, const Shape& x) {
    if (scale.size() > x.size()) return false;
    for (size_t i = 0; i < scale.size(); ++i) {
      const int64_t d = scale[i], want = x[x.size() - scale.size() + i];
      if (d != want && d != 1) return false;
    }
    return true;
  }

  // True when `scale` broadcast to `x` repeats along every axis before `axis`.
  static bool scale_spans_normalized(const Shape& scale, const Shape& x, size_t axis) {
    const size_t lead = x.size() - scale.size();  // scale's axes align with X's last ones
    for (size_t i = 0; i < scale.size(); ++i) {
      if (lead + i < axis && scale[i] != 1) return false;
    }
    return true;
  }

  template <typename T, typename V, typename A>
  void run(const T* x, V* y, int64_t rows, int64_t cols, const double* scale, int64_t scale_row_step) const {
    using CT = compute_type_t<T>;
    using CV = compute_type_t<V>;
    parallel_for(rows, std::max<int64_t>(1, 8192 / cols), [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const T* xr = x + r * cols;
        V* yr = y + r * cols;
        const double* sr = scale + r * scale_row_step;
        const A squares = onednn::lane_sum<A>(cols, [&](int64_t i) {
          const A v = static_cast<A>(static_cast<CT>(xr[i]));
          return v * v;
        });
        const A inv = A(1) / std::sqrt(squares / static_cast<A>(cols) + static_cast<A>(epsilon_));
        for (int64_t j = 0; j < cols; ++j) {
          // Normalized is cast back to X's type before the product, as in the spec.
          const T n = static_cast<T>(static_cast<CT>(static_cast<A>(static_cast<CT>(xr[j])) * inv));
          yr[j] = static_cast<V>(static_cast<CV>(static_cast<double>(static_cast<CT>(n)) * sr[j]));
        }
      }
    });
  }

  int64_t axis_;
  float epsilon_;
  int64_t stash_;
};

const KernelRegistration kRMSNormalization{"", "RMSNormalization", 23, kLatestOpset, [](const KernelInfo& info) {
                                             return std::make_unique<RMSNormKernel>(info);
                                           }};

// ---- onnxruntime's SimplifiedLayerNormalization ----

// The shape of the per-row statistic: X's, with 1 for each normalized axis.
Shape statistic_shape(const Tensor& x, size_t axis) {
  Shape shape = x.shape();
  for (size_t i = axis; i < shape.size(); ++i) shape[i] = 1;
  return shape;
}

// SimplifiedLayerNormalization <axis = -1, epsilon = 1e-5, stash_type = 1> (X, scale) =>
// (Y, inv_std_var?): Y = X / sqrt(mean(X^2) + epsilon) * scale over axes [axis, rank), as
// ORT's CPU kernel computes it: each square in X's type, summed in double, the division and
// the product with scale in double; inv_std_var (float, double for double X) is
// 1 / sqrt(mean(X^2) + epsilon), shaped like X with the normalized axes 1.
const KernelRegistration kSimplifiedLayerNormalization{
    "", "SimplifiedLayerNormalization", 1, kLatestOpset, [](const KernelInfo& info) {
      const int64_t axis = info.int_attribute("axis", -1);
      const double epsilon = info.float_attribute("epsilon", 1e-5f);
      return make_kernel([axis, epsilon](KernelContext& ctx) {
        const Tensor& x = ctx.input(0);
        const Tensor& scale = ctx.input(1);
        const SimplifiedRows r = simplified_rows(ctx, axis, x, scale);
        Tensor& y = ctx.allocate_output(0, x.dtype(), x.shape());
        const DType stat_type = x.dtype() == DType::kFloat64 ? DType::kFloat64 : DType::kFloat32;
        Tensor inv = ctx.has_output(1) ? ctx.allocate_output(1, stat_type, statistic_shape(x, r.axis)) : Tensor();
        dispatch<float, double, Float16, BFloat16>(x.dtype(), "SimplifiedLayerNormalization", [&]<typename T>() {
          using C = compute_type_t<T>;
          using U = std::conditional_t<std::is_same_v<T, double>, double, float>;
          const T* xv = x.data<T>();
          const T* sv = scale.data<T>();
          T* yv = y.data<T>();
          U* iv = inv.defined() ? inv.data<U>() : nullptr;
          parallel_for(
              r.rows, std::max<int64_t>(1, 8192 / std::max<int64_t>(1, r.cols)), [&](int64_t begin, int64_t end) {
                for (int64_t row = begin; row < end; ++row) {
                  const T* xr = xv + row * r.cols;
                  T* yr = yv + row * r.cols;
                  double squares = 0;
                  for (int64_t j = 0; j < r.cols; ++j) {
                    const C v = C(xr[j]);
                    squares += static_cast<double>(static_cast<C>(v * v));
                  }
                  const double root = std::sqrt(squares / static_cast<double>(r.cols) + epsilon);
                  for (int64_t j = 0; j < r.cols; ++j) {
                    yr[j] = static_cast<T>(static_cast<C>(static_cast<double>(C(xr[j])) / root * double(C(sv[j]))));
                  }
                  if (iv) iv[row] = static_cast<U>(1 / root);
                }
              });
        });
      });
    }};

// MeanVarianceNormalization: (x - mean) / (sqrt(variance) + 1e-9) over `axes` (default
// N, H, W), as the spec's function body computes it (variance = E[x^2] - E[x]^2 there; two
// passes here, which agree up to rounding and stay accurate for large means).
const KernelRegistration kMeanVarianceNormalization{
    "", "MeanVarianceNormalization", 9, kLatestOpset, [](const KernelInfo& info) {
      const std::vector<int64_t> axes = info.ints_attribute("axes", std::vector<int64_t>{0, 2, 3});
      return make_kernel([axes](KernelContext& ctx) {
        const Tensor& x = ctx.input(0);
        const int64_t rank = static_cast<int64_t>(x.rank());
        std::vector<bool> reduced(x.rank(), false);
        for (int64_t a : normalize_axes(ctx, axes, rank)) reduced[static_cast<size_t>(a)] = true;
        Tensor& y = ctx.allocate_output(0, x.dtype(), x.shape());
        if (x.numel() == 0) return;
        // Each element's group: its coordinates along the axes that are not reduced.
        std::vector<int64_t> group_of(static_cast<size_t>(x.numel()));
        int64_t groups = 1;
        {
          std::vector<int64_t> kept_strides(x.rank(), 0);
          for (int64_t a = rank - 1; a >= 0; --a) {
            if (reduced[static_cast<size_t>(a)]) continue;
            kept_strides[static_cast<size_t>(a)] = groups;
            groups *= x.dim(a);
          }
          for (int64_t i = 0; i < x.numel(); ++i) {
            int64_t rest = i, group = 0;
            for (int64_t a = rank - 1; a >= 0; --a) {
              group += rest % x.dim(a) * kept_strides[static_cast<size_t>(a)];
              rest /= x.dim(a);
            }
            group_of[static_cast<size_t>(i)] = group;
          }
        }
        const double count = static_cast<double>(x.numel() / groups);
        dispatch<float, double, Float16, BFloat16>(x.dtype(), "MeanVarianceNormalization", [&]<typename T>() {
          using C = compute_type_t<T>;
          const T* px = x.data<T>();
          T* py = y.data<T>();
          std::vector<double> mean(static_cast<size_t>(groups), 0.0), deviation(static_cast<size_t>(groups), 0.0);
          for (int64_t i = 0; i < x.numel(); ++i)
            mean[static_cast<size_t>(group_of[static_cast<size_t>(i)])] += double(C(px[i]));
          for (double& m : mean) m /= count;
          for (int64_t i = 0; i < x.numel(); ++i) {
            const size_t g = static_cast<size_t>(group_of[static_cast<size_t>(i)]);
            const double d = double(C(px[i])) - mean[g];
            deviation[g] += d * d;
          }
          for (double& d : deviation) d = std::sqrt(d / count) + 1e-9;
          for (int64_t i = 0; i < x.numel(); ++i) {
            const size_t g = static_cast<size_t>(group_of[static_cast<size_t>(i)]);
            py[i] = static_cast<T>(static_cast<C>((double(C(px[i])) - mean[g]) / deviation[g]));
          }
        });
      });
    }};

}  // namespace
}  // namespace onnxtrain
