// Gradient rules of QuantizeLinear and DequantizeLinear for quantization-aware training:
// the straight-through estimator, onnxruntime's FakeQuant and torch's fake_quantize_*.
//
// QuantizeLinear's rounding is differentiated as the identity, so its quantized (integer)
// output carries a gradient (RuleEntry::straight_through): with v = x / scale + zero_point,
//   dq/dx = 1 / scale where round(v) lies in the target's range, 0 where it was clipped,
//   dq/dscale = -x / scale^2 there, 0 where clipped;
// DequantizeLinear y = (q - zero_point) * scale is linear:
//   dy/dq = scale,  dy/dscale = q - zero_point.
// A QuantizeLinear -> DequantizeLinear pair (fake quantization) then gets dx = dy inside the
// range and 0 outside, as torch.fake_quantize_per_tensor_affine / per_channel_affine; and a
// learnable scale gets the sum of both terms, (round(v) - x / scale) inside and
// (qmin - zero_point) or (qmax - zero_point) outside: LSQ, as
// torch._fake_quantize_learnable_per_tensor_affine (its grad_factor 1). Zero points are
// integers and get no gradient. Float8 and float4 targets clip at their largest finite value.
// Scales per tensor, per axis and (for x only) blocked.
#include <cmath>
#include <limits>
#include <string>

#include "autodiff/gradient_context.h"

namespace onnxtrain::autodiff {
namespace {

// How a Q/DQ node's scale applies to x (see ops/cpu/quantize.cc).
enum class Granularity { kTensor, kAxis, kBlocked };

struct QuantLayout {
  Granularity granularity = Granularity::kTensor;
  int64_t axis = 1;  // normalized for kAxis and kBlocked
  int64_t block_size = 0;
};

// The layout of node g with data input `x` (its input 0), from the scale's rank.
QuantLayout quant_layout(GradientContext& g) {
  QuantLayout layout;
  const std::string& scale = g.input(1);
  const std::optional<size_t> scale_rank = g.rank(scale);
  layout.block_size = g.opset() >= 21 ? g.attr_int("block_size", 0) : 0;
  if (layout.block_size == 0 && scale_rank && *scale_rank == 0) return layout;
  if (!scale_rank) g.fail("the rank of the scale '" + scale + "' is unknown; declare it in value_info");
  if (layout.block_size == 0 && g.opset() < 13) return layout;  // a [1] scale: per tensor
  const std::optional<size_t> x_rank = g.rank(g.input(0));
  if (!x_rank) g.fail("the rank of input '" + g.input(0) + "' is unknown; declare it in value_info");
  const auto rank = static_cast<int64_t>(*x_rank);
  int64_t axis = g.attr_int("axis", 1);
  if (axis < -rank || axis >= rank)
    g.fail("axis " + std::to_string(axis) + " is out of range for rank " + std::to_string(rank));
  layout.axis = axis < 0 ? axis + rank : axis;
  layout.granularity = layout.block_size > 0 ? Granularity::kBlocked : Granularity::kAxis;
  return layout;
}

// `v` (the scale or the zero point) shaped to broadcast against x [..., D (on axis), ...]:
// as it is per tensor, [D, 1, ..., 1] per axis, each entry repeated over its block (and cut
// to D) when blocked.
std::string broadcastable(GradientContext& g, const std::string& v, const QuantLayout& layout) {
  if (layout.granularity == Granularity::kTensor) return v;
  const auto rank = static_cast<int64_t>(*g.rank(g.input(0)));  // known: quant_layout checked
  const int64_t a = layout.axis;
  if (layout.granularity == Granularity::kAxis) {
    if (a == rank - 1) return v;
    std::vector<int64_t> axes;
    for (int64_t i = 1; i < rank - a; ++i) axes.push_back(i);
    return g.emit("Unsqueeze", {v, g.ints(axes)});
  }
  // [..., S, ...] -> [..., S, B, ...] -> [..., S * B, ...] -> [..., D, ...]
  const std::string shape = g.shape_of(v);
  const std::string before = g.emit("Slice", {shape, g.ints({0}), g.ints({a})});
  const std::string blocks = g.emit("Slice", {shape, g.ints({a}), g.ints({a + 1})});
  const std::string after = g.emit("Slice", {shape, g.ints({a + 1}), g.ints({rank})});
  const std::string block = g.ints({layout.block_size});
  const std::string expanded = g.emit("Expand", {g.emit("Unsqueeze", {v, g.ints({a + 1})}),
                                                 g.emit("Concat", {before, blocks, block, after}, {attr("axis", 0)})});
  const std::string repeated = g.emit(
      "Reshape", {expanded, g.emit("Concat", {before, g.emit("Mul", {blocks, block}), after}, {attr("axis", 0)})});
  const std::string d = g.emit("Slice", {g.shape_of(g.input(0)), g.ints({a}), g.ints({a + 1})});
  return g.emit("Slice", {repeated, g.ints({0}), d, g.ints({a})});
}

// A gradient of the broadcast scale (x's shape) summed into the scale's own shape.
std::string scale_gradient(GradientContext& g, const std::string& grad, const std::string& scale_b,
                           const QuantLayout& layout) {
  if (layout.granularity == Granularity::kBlocked) {
    g.fail("the scale '" + g.input(1) + "' is blocked (block_size " + std::to_string(layout.block_size) +
           "); onnxtrain differentiates blocked quantization with respect to x only");
  }
  const std::string scale = g.input(1);
  std::string reduced = g.reduce_to_shape(grad, scale_b);
  if (scale_b != scale) reduced = g.emit("Reshape", {reduced, g.shape_of(scale)});
  return g.cast_like(reduced, scale);
}

// The range of QuantizeLinear's output type: [lo, hi] of round(x / scale) + zero_point
// that is kept (beyond it the output saturates).
std::pair<double, double> quantized_range(GradientContext& g) {
  DType to = DType::kUInt8;
  if (g.has_input(2)) {
    to = g.dtype(g.input(2));
  } else if (const int64_t code = g.opset() >= 21 ? g.attr_int("output_dtype", 0) : 0) {
    to = static_cast<DType>(code);
  }
  switch (to) {
    case DType::kUInt8:
      return {0, 255};
    case DType::kInt8:
      return {-128, 127};
    case DType::kUInt16:
      return {0, 65535};
    case DType::kInt16:
      return {-32768, 32767};
    case DType::kUInt4:
      return {0, 15};
    case DType::kInt4:
      return {-8, 7};
    case DType::kFloat8E4M3FN:
      return {-448, 448};
    case DType::kFloat8E4M3FNUZ:
      return {-240, 240};
    case DType::kFloat8E5M2:
    case DType::kFloat8E5M2FNUZ:
      return {-57344, 57344};
    case DType::kFloat4E2M1:
      return {-6, 6};
    default:
      g.fail("the output type " + std::string(dtype_name(to)) +
             " is unknown or not a quantized type; declare the zero point's type");
  }
}

void quantize_linear(GradientContext& g) {
  const std::string dq = g.grad_of_output(0);
  if (dq.empty() || (!g.needs_grad(0) && !g.needs_grad(1))) return;
  const std::string x = g.input(0);
  const QuantLayout layout = quant_layout(g);
  const std::string scale = g.cast_like(broadcastable(g, g.input(1), layout), x);
  const std::string scaled = g.emit("Div", {x, scale});  // x / scale
  std::string v = g.emit("Round", {scaled});
  if (g.has_input(2)) v = g.emit("Add", {v, broadcastable(g, g.cast_like(g.input(2), x), layout)});
  const auto [lo, hi] = quantized_range(g);
  const std::string inside =
      g.emit("And", {g.emit("GreaterOrEqual", {v, g.scalar(lo, x)}), g.emit("LessOrEqual", {v, g.scalar(hi, x)})});
  const std::string zero = g.scalar(0.0, x);
  const std::string dq_x = g.cast_like(dq, x);
  const std::string through = g.emit("Where", {inside, g.emit("Div", {dq_x, scale}), zero});  // dq / scale inside
  if (g.needs_grad(0)) g.set_input_grad(0, through);
  if (g.needs_grad(1)) {
    // dq * -x / scale^2 inside = -(dq / scale) * (x / scale)
    const std::string d_scale = g.emit("Neg", {g.emit("Mul", {through, scaled})});
    g.set_input_grad(1, scale_gradient(g, d_scale, scale, layout));
  }
  if (g.needs_grad(2)) g.fail("the zero point '" + g.input(2) + "' is an integer; it has no gradient");
}

void dequantize_linear(GradientContext& g) {
  const std::string dy = g.grad_of_output(0);
  if (dy.empty() || (!g.needs_grad(0) && !g.needs_grad(1))) return;
  const QuantLayout layout = quant_layout(g);
  const std::string scale = g.cast_like(broadcastable(g, g.input(1), layout), dy);
  if (g.needs_grad(0)) g.set_input_grad(0, g.emit("Mul", {dy, scale}));
  if (g.needs_grad(1)) {
    std::string q = g.cast_like(g.input(0), dy);
    if (g.has_input(2)) q = g.emit("Sub", {q, broadcastable(g, g.cast_like(g.input(2), dy), layout)});
    g.set_input_grad(1, scale_gradient(g, g.emit("Mul", {dy, q}), scale, layout));
  }
  if (g.needs_grad(2)) g.fail("the zero point '" + g.input(2) + "' is an integer; it has no gradient");
}

const RuleRegistration kQuantizeRules{{"QuantizeLinear", quantize_linear, /*straight_through=*/true},
                                      {"DequantizeLinear", dequantize_linear}};

}  // namespace
}  // namespace onnxtrain::autodiff
