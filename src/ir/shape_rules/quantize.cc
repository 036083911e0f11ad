// Shapes of the quantization ops (src/ops/cpu/quantize.cc, qlinear.cc).
#include "ir/shape_rules.h"

namespace onnxtrain::ir {
namespace {

std::optional<SymbolicShape> shape_of(const ShapeContext& c, size_t input) {
  return c.shape(input) ? std::optional(*c.shape(input)) : std::nullopt;
}

// The output_dtype attribute (opset 21), or kUndefined.
DType output_dtype(const ShapeContext& c) {
  return dtype_from_onnx(static_cast<int32_t>(c.int_attribute("output_dtype").value_or(0)));
}

// QuantizeLinear (x, scale, zero_point): output_dtype, else the zero point's type, else uint8.
void quantize_linear(ShapeContext& c) {
  const DType to = output_dtype(c);
  c.set(0, to != DType::kUndefined ? to : c.has_input(2) ? c.dtype(2) : DType::kUInt8, shape_of(c, 0));
}

// DequantizeLinear (x, scale, zero_point): output_dtype, else the scale's type.
void dequantize_linear(ShapeContext& c) {
  const DType to = output_dtype(c);
  c.set(0, to != DType::kUndefined ? to : c.dtype(1), shape_of(c, 0));
}

// DynamicQuantizeLinear (x) => (y uint8 like x, y_scale float scalar, y_zero_point uint8 scalar).
void dynamic_quantize_linear(ShapeContext& c) {
  c.set(0, DType::kUInt8, shape_of(c, 0));
  c.set(1, DType::kFloat32, SymbolicShape{});
  c.set(2, DType::kUInt8, SymbolicShape{});
}

void matmul_integer(ShapeContext& c) {
  c.set(0, DType::kInt32, matmul_shape(c.shape(0), c.shape(1)));
}

// QLinearMatMul (a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale, y_zero_point).
void qlinear_matmul(ShapeContext& c) {
  c.set(0, c.dtype(7), matmul_shape(c.shape(0), c.shape(3)));
}

// ConvInteger (x, w, x_zero_point, w_zero_point) => int32.
void conv_integer(ShapeContext& c) {
  c.set(0, DType::kInt32, convolution_shape(c, 1, false));
}

// QLinearConv (x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale, y_zero_point, B).
void qlinear_conv(ShapeContext& c) {
  c.set(0, c.dtype(7), convolution_shape(c, 3, false));
}

const ShapeRuleRegistration kQuantizeShapes{{
    {"QuantizeLinear", quantize_linear},
    {"DequantizeLinear", dequantize_linear},
    {"DynamicQuantizeLinear", dynamic_quantize_linear},
    {"MatMulInteger", matmul_integer},
    {"QLinearMatMul", qlinear_matmul},
    {"ConvInteger", conv_integer},
    {"QLinearConv", qlinear_conv},
}};

}  // namespace
}  // namespace onnxtrain::ir
