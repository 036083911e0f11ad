// Gradient rules of the normalizations: LayerNormalization, BatchNormalization (training
// and inference mode), InstanceNormalization, GroupNormalization, RMSNormalization.
//
// All share one formula. With xhat = (x - mean) * inv_std over a set of axes (n elements)
// and dxhat = dY * scale:
//   dX = inv_std * (dxhat - (sum(dxhat) + xhat * sum(dxhat * xhat)) / n)
#include <cstdint>

#include "autodiff/gradient_context.h"
#include "ir/functions.h"

namespace onnxtrain::autodiff {
namespace {

// LayerNormalization over the axes [axis, rank), from the forward pass's Mean and
// InvStdDev (kept dims). dScale and dB sum over the leading axes.
const FunctionRegistration kLayerNormalizationGrad{R"(
LayerNormalizationGrad <axis> (dY, X, scale, mean, inv_std_dev) => (dX, dScale, dB) {
  zero = Constant <value_int = 0> ()
  one = Constant <value_int = 1> ()
  one_1d = Constant <value = int64[1] {1}> ()
  end = Constant <value = int64[1] {9223372036854775807}> ()
  axis = Constant <value_int: int = @axis> ()
  x_shape = Shape (X)
  rank = Size (x_shape)
  shifted = Add (axis, rank)
  axis_n = Mod (shifted, rank)
  axis_1d = Reshape (axis_n, one_1d)
  normalized_axes = Range (axis_n, rank, one)
  leading_axes = Range (zero, axis_n, one)
  normalized_shape = Slice (x_shape, axis_1d, end)
  count_i = ReduceProd <keepdims = 0> (normalized_shape)
  count = CastLike (count_i, X)
  mean_x = CastLike (mean, X)
  inv = CastLike (inv_std_dev, X)
  centered = Sub (X, mean_x)
  xhat = Mul (centered, inv)
  dxhat = Mul (dY, scale)
  sum_dxhat = ReduceSum <keepdims = 1> (dxhat, normalized_axes)
  dxhat_xhat = Mul (dxhat, xhat)
  sum_dxhat_xhat = ReduceSum <keepdims = 1> (dxhat_xhat, normalized_axes)
  xhat_term = Mul (xhat, sum_dxhat_xhat)
  both = Add (sum_dxhat, xhat_term)
  mean_terms = Div (both, count)
  inner = Sub (dxhat, mean_terms)
  dX = Mul (inner, inv)
  scale_shape = Shape (scale)
  dy_xhat = Mul (dY, xhat)
  dScale_full = ReduceSum <keepdims = 0, noop_with_empty_axes = 1> (dy_xhat, leading_axes)
  dScale = Reshape (dScale_full, scale_shape)
  dB_full = ReduceSum <keepdims = 0, noop_with_empty_axes = 1> (dY, leading_axes)
  dB = Reshape (dB_full, scale_shape)
}
)"};

// BatchNormalization in training mode over the batch statistics (axes 0 and 2...), which
// are recomputed from X (opset 14 and later no longer output them).
const FunctionRegistration kBatchNormalizationGrad{R"(
BatchNormalizationGrad <epsilon> (dY, X, scale) => (dX, dScale, dB) {
  zero_1d = Constant <value = int64[1] {0}> ()
  one_1d = Constant <value = int64[1] {1}> ()
  two = Constant <value_int = 2> ()
  one = Constant <value_int = 1> ()
  minus_one_1d = Constant <value = int64[1] {-1}> ()
  epsilon_f = Constant <value_float: float = @epsilon> ()
  epsilon = CastLike (epsilon_f, X)
  x_shape = Shape (X)
  rank = Size (x_shape)
  spatial_axes = Range (two, rank, one)
  axes = Concat <axis = 0> (zero_1d, spatial_axes)
  spatial = Sub (rank, two)
  spatial_1d = Reshape (spatial, one_1d)
  ones = ConstantOfShape <value = int64[1] {1}> (spatial_1d)
  channel_shape = Concat <axis = 0> (minus_one_1d, ones)
  two_1d = Constant <value = int64[1] {2}> ()
  total_i = ReduceProd <keepdims = 0> (x_shape)
  channels_i = Slice (x_shape, one_1d, two_1d)
  count_i = Div (total_i, channels_i)
  count = CastLike (count_i, X)
  sum_x = ReduceSum <keepdims = 1> (X, axes)
  mean = Div (sum_x, count)
  centered = Sub (X, mean)
  squared = Mul (centered, centered)
  sum_squared = ReduceSum <keepdims = 1> (squared, axes)
  variance = Div (sum_squared, count)
  variance_eps = Add (variance, epsilon)
  std = Sqrt (variance_eps)
  inv = Reciprocal (std)
  xhat = Mul (centered, inv)
  scale_c = Reshape (scale, channel_shape)
  sum_dy = ReduceSum <keepdims = 1> (dY, axes)
  dy_xhat = Mul (dY, xhat)
  sum_dy_xhat = ReduceSum <keepdims = 1> (dy_xhat, axes)
  xhat_term = Mul (xhat, sum_dy_xhat)
  both = Add (sum_dy, xhat_term)
  mean_terms = Div (both, count)
  inner = Sub (dY, mean_terms)
  scaled_inv = Mul (scale_c, inv)
  dX = Mul (inner, scaled_inv)
  dScale = Reshape (sum_dy_xhat, minus_one_1d)
  dB = Reshape (sum_dy, minus_one_1d)
}
)"};

void layer_normalization(GradientContext& g) {
  const std::string dy = g.grad_of_output(0);
  if (dy.empty()) return;  // Mean and InvStdDev are not differentiated
  const std::string mean = g.require_output(1, "mean");
  const std::string inv_std_dev = g.require_output(2, "inv_std_dev");
  const std::string scale = g.input(1);
  const std::vector<bool> wanted = {g.needs_grad(0), g.needs_grad(1), g.needs_grad(2)};
  const auto grads = g.call_n("LayerNormalizationGrad", {dy, g.input(0), scale, mean, inv_std_dev},
                              {attr("axis", g.attr_int("axis", -1))}, 3, wanted);
  for (size_t i = 0; i < 3; ++i) g.set_input_grad(i, grads[i]);
}

// Reshapes a per-channel vector [C] to [C, 1, ..., 1] against `x` (rank known at run time).
std::string per_channel(GradientContext& g, const std::string& vector, const std::string& x) {
  const std::string spatial = g.emit("Sub", {g.rank_of(x), g.int_scalar(2)});
  const std::string ones = g.emit("ConstantOfShape", {g.emit("Reshape", {spatial, g.ints({1})})},
                                  {attr("value", Tensor::from_vector<int64_t>({1}, {1}))});
  return g.emit("Reshape", {vector, g.emit("Concat", {g.ints({-1}), ones}, {attr("axis", 0)})});
}

// Axes 0, 2, 3, ... of `x`: all but the channel axis.
std::string batch_and_spatial_axes(GradientContext& g, const std::string& x) {
  const std::string spatial = g.emit("Range", {g.int_scalar(2), g.rank_of(x), g.int_scalar(1)});
  return g.emit("Concat", {g.ints({0}), spatial}, {attr("axis", 0)});
}

// Inference mode: mean and var are inputs (which may themselves be differentiated, as in
// graphs that compute the batch statistics with ReduceMean and feed them in).
void batch_normalization_inference(GradientContext& g) {
  const std::string dy = g.grad_of_output(0);
  const std::string x = g.input(0);
  const std::string scale = g.input(1);
  const std::string mean = g.input(3);
  const std::string var = g.input(4);
  const std::string epsilon = g.scalar(g.attr_float("epsilon", 1e-5f), x);
  const std::string inv = g.emit("Reciprocal", {g.emit("Sqrt", {g.emit("Add", {var, epsilon})})});
  const std::string inv_c = per_channel(g, inv, x);
  const std::string axes = batch_and_spatial_axes(g, x);
  if (g.needs_grad(0)) g.set_input_grad(0, g.emit("Mul", {dy, g.emit("Mul", {per_channel(g, scale, x), inv_c})}));
  const std::string centered = g.emit("Sub", {x, per_channel(g, mean, x)});
  const std::vector<ir::Attribute> sum = {attr("keepdims", 0)};
  const std::string sum_dy = g.emit("ReduceSum", {dy, axes}, sum);
  if (g.needs_grad(1)) {
    const std::string xhat = g.emit("Mul", {centered, inv_c});
    g.set_input_grad(1, g.emit("ReduceSum", {g.emit("Mul", {dy, xhat}), axes}, sum));
  }
  g.set_input_grad(2, sum_dy);
  if (g.needs_grad(3)) {
    g.set_input_grad(3, g.emit("Neg", {g.emit("Mul", {sum_dy, g.emit("Mul", {scale, inv})})}));
  }
  if (g.needs_grad(4)) {
    // d/dvar of (x - mean) * (var + eps)^-1/2 = -1/2 (x - mean) inv^3
    const std::string sum_dy_centered = g.emit("ReduceSum", {g.emit("Mul", {dy, centered}), axes}, sum);
    const std::string inv3 = g.emit("Mul", {inv, g.emit("Mul", {inv, inv})});
    const std::string factor = g.emit("Mul", {g.emit("Mul", {scale, inv3}), g.scalar(-0.5, x)});
    g.set_input_grad(4, g.emit("Mul", {sum_dy_centered, factor}));
  }
}

void batch_normalization(GradientContext& g) {
  const bool training = g.opset() >= 14 ? g.attr_int("training_mode", 0) != 0 : g.output_count() > 1;
  const std::string dy = g.grad_of_output(0);
  if (dy.empty()) return;  // running statistics are not differentiated
  if (!training) {
    batch_normalization_inference(g);
    return;
  }
  const std::vector<bool> wanted = {g.needs_grad(0), g.needs_grad(1), g.needs_grad(2)};
  const auto grads = g.call_n("BatchNormalizationGrad", {dy, g.input(0), g.input(1)},
                              {attr("epsilon", g.attr_float("epsilon", 1e-5f))}, 3, wanted);
  for (size_t i = 0; i < 3; ++i) g.set_input_grad(i, grads[i]);
}

// Normalizes `x` over `axes` (int64 1-D) and returns {xhat, inv_std, count}.
struct Normalized {
  std::string xhat, inv, count;
};

Normalized normalize(GradientContext& g, const std::string& x, const std::string& axes, const std::string& count,
                     float epsilon) {
  const std::vector<ir::Attribute> keep = {attr("keepdims", 1)};
  const std::string mean = g.emit("Div", {g.emit("ReduceSum", {x, axes}, keep), count});
  const std::string centered = g.emit("Sub", {x, mean});
  const std::string variance =
      g.emit("Div", {g.emit("ReduceSum", {g.emit("Mul", {centered, centered}), axes}, keep), count});
  const std::string inv = g.emit("Reciprocal", {g.emit("Sqrt", {g.emit("Add", {variance, g.scalar(epsilon, x)})})});
  return {g.emit("Mul", {centered, inv}), inv, count};
}

// inv * (dxhat - (sum(dxhat) + xhat * sum(dxhat * xhat)) / n) over `axes`.
std::string normalized_input_grad(GradientContext& g, const Normalized& n, const std::string& dxhat,
                                  const std::string& axes) {
  const std::vector<ir::Attribute> keep = {attr("keepdims", 1)};
  const std::string sum_dxhat = g.emit("ReduceSum", {dxhat, axes}, keep);
  const std::string sum_dxhat_xhat = g.emit("ReduceSum", {g.emit("Mul", {dxhat, n.xhat}), axes}, keep);
  const std::string both = g.emit("Add", {sum_dxhat, g.emit("Mul", {n.xhat, sum_dxhat_xhat})});
  const std::string inner = g.emit("Sub", {dxhat, g.emit("Div", {both, n.count})});
  return g.emit("Mul", {inner, n.inv});
}

// InstanceNormalization: per (sample, channel) over the spatial axes.
void instance_normalization(GradientContext& g) {
  const std::string dy = g.grad_of_output(0);
  const std::string x = g.input(0);
  const std::string spatial_axes = g.emit("Range", {g.int_scalar(2), g.rank_of(x), g.int_scalar(1)});
  const std::string count = g.cast_like(
      g.emit("ReduceProd", {g.emit("Slice", {g.shape_of(x), g.ints({2}), g.ints({INT64_MAX})})}, {attr("keepdims", 0)}),
      x);
  const Normalized n = normalize(g, x, spatial_axes, count, g.attr_float("epsilon", 1e-5f));
  if (g.needs_grad(0)) {
    const std::string dxhat = g.emit("Mul", {dy, per_channel(g, g.input(1), x)});
    g.set_input_grad(0, normalized_input_grad(g, n, dxhat, spatial_axes));
  }
  const std::string axes = batch_and_spatial_axes(g, x);
  if (g.needs_grad(1)) {
    g.set_input_grad(1, g.emit("ReduceSum", {g.emit("Mul", {dy, n.xhat}), axes}, {attr("keepdims", 0)}));
  }
  if (g.needs_grad(2)) g.set_input_grad(2, g.emit("ReduceSum", {dy, axes}, {attr("keepdims", 0)}));
}

// GroupNormalization: x viewed as [N, G, -1], normalized over the last axis. Opset 18
// scales per group ([G]); opset 21 per channel ([C]).
void group_normalization(GradientContext& g) {
  const std::string dy = g.grad_of_output(0);
  const std::string x = g.input(0);
  const int64_t groups = g.attr_int("num_groups", 0);
  const bool per_group = g.opset() < 21;
  const std::string x_shape = g.shape_of(x);
  const std::string grouped_shape = g.ints({0, groups, -1});
  const std::string xg = g.emit("Reshape", {x, grouped_shape});
  const std::string dyg = g.emit("Reshape", {dy, grouped_shape});
  const std::string last = g.ints({2});
  const std::string count = g.cast_like(g.emit("Gather", {g.emit("Shape", {xg}), g.int_scalar(2)}), x);
  const Normalized n = normalize(g, xg, last, count, g.attr_float("epsilon", 1e-5f));
  const std::string scale = g.input(1);
  const std::vector<ir::Attribute> sum = {attr("keepdims", 0)};
  if (per_group) {
    const std::string scale_g = g.emit("Reshape", {scale, g.ints({-1, 1})});
    const std::string axes = g.ints({0, 2});
    if (g.needs_grad(0)) {
      const std::string dxg = normalized_input_grad(g, n, g.emit("Mul", {dyg, scale_g}), last);
      g.set_input_grad(0, g.emit("Reshape", {dxg, x_shape}));
    }
    if (g.needs_grad(1)) g.set_input_grad(1, g.emit("ReduceSum", {g.emit("Mul", {dyg, n.xhat}), axes}, sum));
    if (g.needs_grad(2)) g.set_input_grad(2, g.emit("ReduceSum", {dyg, axes}, sum));
    return;
  }
  if (g.needs_grad(0)) {
    const std::string dxhat = g.emit("Reshape", {g.emit("Mul", {dy, per_channel(g, scale, x)}), grouped_shape});
    g.set_input_grad(0, g.emit("Reshape", {normalized_input_grad(g, n, dxhat, last), x_shape}));
  }
  const std::string axes = batch_and_spatial_axes(g, x);
  if (g.needs_grad(1)) {
    const std::string xhat = g.emit("Reshape", {n.xhat, x_shape});
    g.set_input_grad(1, g.emit("ReduceSum", {g.emit("Mul", {dy, xhat}), axes}, sum));
  }
  if (g.needs_grad(2)) g.set_input_grad(2, g.emit("ReduceSum", {dy, axes}, sum));
}

// RMSNormalization over the axes [axis, rank): with r = (mean(x^2) + epsilon)^-1/2 and
// dn = dY * scale, dX = r * (dn - x * r^2 * mean(dn * x)). dScaleFull = dY * x * r has X's
// shape; the rule sums it down to scale's. The statistics are recomputed from X: the op
// has no statistics outputs to keep.
const FunctionRegistration kRMSNormalizationGrad{R"(
RMSNormalizationGrad <axis, epsilon> (dY, X, scale) => (dX, dScaleFull) {
  one = Constant <value_int = 1> ()
  one_1d = Constant <value = int64[1] {1}> ()
  end = Constant <value = int64[1] {9223372036854775807}> ()
  axis = Constant <value_int: int = @axis> ()
  epsilon_f = Constant <value_float: float = @epsilon> ()
  epsilon = CastLike (epsilon_f, X)
  x_shape = Shape (X)
  rank = Size (x_shape)
  shifted = Add (axis, rank)
  axis_n = Mod (shifted, rank)
  axis_1d = Reshape (axis_n, one_1d)
  axes = Range (axis_n, rank, one)
  normalized_shape = Slice (x_shape, axis_1d, end)
  count_i = ReduceProd <keepdims = 0> (normalized_shape)
  count = CastLike (count_i, X)
  squared = Mul (X, X)
  sum_squared = ReduceSum <keepdims = 1> (squared, axes)
  mean_squared = Div (sum_squared, count)
  mean_squared_eps = Add (mean_squared, epsilon)
  rms = Sqrt (mean_squared_eps)
  inv = Reciprocal (rms)
  dn = Mul (dY, scale)
  dn_x = Mul (dn, X)
  sum_dn_x = ReduceSum <keepdims = 1> (dn_x, axes)
  mean_dn_x = Div (sum_dn_x, count)
  inv_squared = Mul (inv, inv)
  x_inv_squared = Mul (X, inv_squared)
  correction = Mul (x_inv_squared, mean_dn_x)
  inner = Sub (dn, correction)
  dX = Mul (inner, inv)
  normalized = Mul (X, inv)
  dScaleFull = Mul (dY, normalized)
}
)"};

void rms_normalization(GradientContext& g) {
  const std::string dy = g.grad_of_output(0);
  if (dy.empty()) return;
  const std::vector<bool> wanted = {g.needs_grad(0), g.needs_grad(1)};
  const auto grads =
      g.call_n("RMSNormalizationGrad", {dy, g.input(0), g.input(1)},
               {attr("axis", g.attr_int("axis", -1)), attr("epsilon", g.attr_float("epsilon", 1e-5f))}, 2, wanted);
  if (g.needs_grad(0)) g.set_input_grad(0, grads[0]);
  if (g.needs_grad(1)) g.set_input_grad(1, g.reduce_to_shape(grads[1], g.input(1)));
}

// MeanVarianceNormalization: y = d / s, d = x - mean(x), s = sigma + 1e-9, sigma the
// root of mean(d^2), all over `axes`. With g = dY:
//   dL/dd = g / s - d mean(g d) / (s^2 sigma),   dX = dL/dd - mean(dL/dd).
void mean_variance_normalization(GradientContext& g) {
  const std::string dy = g.grad_of_output(0);
  if (dy.empty() || !g.needs_grad(0)) return;
  const std::string x = g.input(0);
  const std::vector<int64_t> axes = g.attr_ints("axes", {0, 2, 3});
  auto sum = [&](const std::string& v) {  // gradient graphs have opset 13 or later: axes as an input
    return g.emit("ReduceSum", {v, g.ints(axes)}, {attr("keepdims", int64_t{1})});
  };
  const std::string sum_x = sum(x);
  const std::string count = g.cast_like(g.emit("Div", {g.emit("Size", {x}), g.emit("Size", {sum_x})}), x);
  auto mean = [&](const std::string& v) { return g.emit("Div", {sum(v), count}); };
  const std::string d = g.emit("Sub", {x, g.emit("Div", {sum_x, count})});
  const std::string sigma = g.emit("Sqrt", {mean(g.emit("Mul", {d, d}))});
  const std::string s = g.emit("Add", {sigma, g.scalar(1e-9, x)});
  const std::string correction =
      g.emit("Div", {g.emit("Mul", {d, mean(g.emit("Mul", {dy, d}))}), g.emit("Mul", {g.emit("Mul", {s, s}), sigma})});
  const std::string dd = g.emit("Sub", {g.emit("Div", {dy, s}), correction});
  g.set_input_grad(0, g.emit("Sub", {dd, mean(dd)}));
}

const RuleRegistration kNormalizationRules{
    {"LayerNormalization", layer_normalization},
    {"BatchNormalization", batch_normalization},
    {"InstanceNormalization", instance_normalization},
    {"GroupNormalization", group_normalization},
    {"MeanVarianceNormalization", mean_variance_normalization},
};

const RuleRegistration kRMSNormalizationRules{{"RMSNormalization", rms_normalization}};

}  // namespace
}  // namespace onnxtrain::autodiff
