// Gradient rules of activations, Softmax/LogSoftmax and Dropout.
#include <cmath>
#include <numbers>

#include "autodiff/gradient_context.h"
#include "ir/functions.h"

namespace onnxtrain::autodiff {
namespace {

const FunctionRegistration kReluGrad{R"(
ReluGrad (dY, Y) => (dX) {
  zero_f = Constant <value_float = 0.0> ()
  zero = CastLike (zero_f, dY)
  positive = Greater (Y, zero)
  dX = Where (positive, dY, zero)
}
)"};

const FunctionRegistration kSigmoidGrad{R"(
SigmoidGrad (dY, Y) => (dX) {
  one_f = Constant <value_float = 1.0> ()
  one = CastLike (one_f, Y)
  complement = Sub (one, Y)
  slope = Mul (Y, complement)
  dX = Mul (dY, slope)
}
)"};

// d gelu(x)/dx = Phi(x) + x phi(x), Phi and phi the standard normal CDF and density.
const FunctionRegistration kGeluGrad{R"(
GeluGrad (dY, X) => (dX) {
  half_f = Constant <value_float = 0.5> ()
  one_f = Constant <value_float = 1.0> ()
  sqrt_half_f = Constant <value_float = 0.70710678118654752> ()
  inv_sqrt_2pi_f = Constant <value_float = 0.39894228040143268> ()
  half = CastLike (half_f, X)
  one = CastLike (one_f, X)
  sqrt_half = CastLike (sqrt_half_f, X)
  inv_sqrt_2pi = CastLike (inv_sqrt_2pi_f, X)
  scaled = Mul (X, sqrt_half)
  erf = Erf (scaled)
  erf_1 = Add (erf, one)
  cdf = Mul (erf_1, half)
  square = Mul (X, X)
  half_square = Mul (square, half)
  minus_half_square = Neg (half_square)
  gauss = Exp (minus_half_square)
  density = Mul (gauss, inv_sqrt_2pi)
  x_density = Mul (X, density)
  slope = Add (cdf, x_density)
  dX = Mul (dY, slope)
}
)"};

// The tanh approximation: y = x/2 (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3).
const FunctionRegistration kGeluTanhGrad{R"(
GeluTanhGrad (dY, X) => (dX) {
  half_f = Constant <value_float = 0.5> ()
  one_f = Constant <value_float = 1.0> ()
  k_f = Constant <value_float = 0.79788456080286536> ()
  c_f = Constant <value_float = 0.044715> ()
  c3_f = Constant <value_float = 0.134145> ()
  half = CastLike (half_f, X)
  one = CastLike (one_f, X)
  k = CastLike (k_f, X)
  c = CastLike (c_f, X)
  c3 = CastLike (c3_f, X)
  square = Mul (X, X)
  cube = Mul (square, X)
  c_cube = Mul (cube, c)
  inner = Add (X, c_cube)
  u = Mul (inner, k)
  t = Tanh (u)
  t_1 = Add (t, one)
  left = Mul (t_1, half)
  t_square = Mul (t, t)
  sech2 = Sub (one, t_square)
  c3_square = Mul (square, c3)
  du_inner = Add (one, c3_square)
  du = Mul (du_inner, k)
  half_x = Mul (X, half)
  right_1 = Mul (half_x, sech2)
  right = Mul (right_1, du)
  slope = Add (left, right)
  dX = Mul (dY, slope)
}
)"};

// dX = Y * (dY - sum(dY * Y)) along the axis.
const FunctionRegistration kSoftmaxGrad{R"(
SoftmaxGrad <axis> (dY, Y) => (dX) {
  axis = Constant <value_int: int = @axis> ()
  one = Constant <value = int64[1] {1}> ()
  axes = Reshape (axis, one)
  product = Mul (dY, Y)
  total = ReduceSum <keepdims = 1> (product, axes)
  centered = Sub (dY, total)
  dX = Mul (Y, centered)
}
)"};

// dX = dY - exp(Y) * sum(dY) along the axis.
const FunctionRegistration kLogSoftmaxGrad{R"(
LogSoftmaxGrad <axis> (dY, Y) => (dX) {
  axis = Constant <value_int: int = @axis> ()
  one = Constant <value = int64[1] {1}> ()
  axes = Reshape (axis, one)
  total = ReduceSum <keepdims = 1> (dY, axes)
  probability = Exp (Y)
  share = Mul (probability, total)
  dX = Sub (dY, share)
}
)"};

void relu(GradientContext& g) {
  g.set_input_grad(0, g.call("ReluGrad", {g.grad_of_output(0), g.output(0)}));
}

void sigmoid(GradientContext& g) {
  g.set_input_grad(0, g.call("SigmoidGrad", {g.grad_of_output(0), g.output(0)}));
}

void gelu(GradientContext& g) {
  const std::string approximate = g.attr_string("approximate", "none");
  if (approximate != "none" && approximate != "tanh") g.fail("unknown approximate '" + approximate + "'");
  const std::string name = approximate == "tanh" ? "GeluTanhGrad" : "GeluGrad";
  g.set_input_grad(0, g.call(name, {g.grad_of_output(0), g.input(0)}));
}

// org.onnxtrain::Gelu and GeluTanh: the fused forms of GELU before opset 20 (passes/fuse_gelu.h).
void fused_gelu(GradientContext& g) {
  g.set_input_grad(0, g.call("GeluGrad", {g.grad_of_output(0), g.input(0)}));
}

void fused_gelu_tanh(GradientContext& g) {
  g.set_input_grad(0, g.call("GeluTanhGrad", {g.grad_of_output(0), g.input(0)}));
}

void leaky_relu(GradientContext& g) {
  const std::string dy = g.grad_of_output(0);
  const std::string x = g.input(0);
  const std::string negative_side = g.emit("Mul", {dy, g.scalar(g.attr_float("alpha", 0.01f), dy)});
  g.set_input_grad(0, g.emit("Where", {g.emit("Greater", {x, g.scalar(0, x)}), dy, negative_side}));
}

// Elu and Selu: y = gamma * (alpha (e^x - 1)) for x <= 0, so dy/dx = y + gamma * alpha there.
void elu_like(GradientContext& g, float alpha, float gamma) {
  const std::string dy = g.grad_of_output(0);
  const std::string x = g.input(0);
  const std::string negative_slope = g.emit("Add", {g.output(0), g.scalar(static_cast<double>(alpha) * gamma, dy)});
  const std::string positive = gamma == 1.0f ? dy : g.emit("Mul", {dy, g.scalar(gamma, dy)});
  g.set_input_grad(
      0, g.emit("Where", {g.emit("Greater", {x, g.scalar(0, x)}), positive, g.emit("Mul", {dy, negative_slope})}));
}

void elu(GradientContext& g) {
  elu_like(g, g.attr_float("alpha", 1.0f), 1.0f);
}

void selu(GradientContext& g) {
  elu_like(g, g.attr_float("alpha", 1.67326319217681884765625f), g.attr_float("gamma", 1.05070102214813232421875f));
}

void hard_sigmoid(GradientContext& g) {
  const std::string dy = g.grad_of_output(0);
  const std::string x = g.input(0);
  const float alpha = g.attr_float("alpha", 0.2f);
  const float beta = g.attr_float("beta", 0.5f);
  const std::string t = g.emit("Add", {g.emit("Mul", {x, g.scalar(alpha, x)}), g.scalar(beta, x)});
  const std::string inside =
      g.emit("And", {g.emit("Greater", {t, g.scalar(0, x)}), g.emit("Less", {t, g.scalar(1, x)})});
  g.set_input_grad(0, g.emit("Where", {inside, g.emit("Mul", {dy, g.scalar(alpha, dy)}), g.scalar(0, dy)}));
}

// HardSwish: y = x * clip(x/6 + 1/2, 0, 1); as in PyTorch, dy/dx = 0 below -3, x/3 + 1/2
// up to 3 and 1 above.
void hard_swish(GradientContext& g) {
  const std::string dy = g.grad_of_output(0);
  const std::string x = g.input(0);
  const std::string middle = g.emit("Add", {g.emit("Div", {x, g.scalar(3, x)}), g.scalar(0.5, x)});
  const std::string upper =
      g.emit("Where", {g.emit("LessOrEqual", {x, g.scalar(3, x)}), g.emit("Mul", {dy, middle}), dy});
  g.set_input_grad(0, g.emit("Where", {g.emit("Less", {x, g.scalar(-3, x)}), g.scalar(0, dy), upper}));
}

void softplus(GradientContext& g) {
  g.set_input_grad(0, g.emit("Mul", {g.grad_of_output(0), g.emit("Sigmoid", {g.input(0)})}));
}

void softmax(GradientContext& g) {
  if (g.opset() < 13) g.fail("Softmax before opset 13 (2-D coercion) is not supported");
  g.set_input_grad(0,
                   g.call("SoftmaxGrad", {g.grad_of_output(0), g.output(0)}, {attr("axis", g.attr_int("axis", -1))}));
}

void log_softmax(GradientContext& g) {
  if (g.opset() < 13) g.fail("LogSoftmax before opset 13 (2-D coercion) is not supported");
  g.set_input_grad(
      0, g.call("LogSoftmaxGrad", {g.grad_of_output(0), g.output(0)}, {attr("axis", g.attr_int("axis", -1))}));
}

// Dropout: in training mode dX = dY * mask / (1 - ratio); in inference mode, dY.
void dropout(GradientContext& g) {
  const std::string dy = g.grad_of_output(0);
  if (!g.has_input(2)) {  // no training_mode: inference
    g.set_input_grad(0, dy);
    return;
  }
  const Tensor* training = g.constant_input(2);
  if (training && training->numel() == 1 && training->item_as_double() == 0) {
    g.set_input_grad(0, dy);
    return;
  }
  const Tensor* ratio_value = g.constant_input(1);
  const bool has_ratio = g.has_input(1);
  if (training && has_ratio && ratio_value && ratio_value->numel() == 1 && ratio_value->item_as_double() == 0) {
    g.set_input_grad(0, dy);  // nothing is dropped
    return;
  }
  const std::string mask = g.require_output(1, "mask");
  const std::string one = g.scalar(1, dy);
  const std::string ratio = has_ratio ? g.cast_like(g.input(1), dy) : g.scalar(0.5, dy);
  std::string scale = g.emit("Div", {one, g.emit("Sub", {one, ratio})});
  if (!training) scale = g.emit("Where", {g.input(2), scale, one});
  g.set_input_grad(0, g.emit("Where", {mask, g.emit("Mul", {dy, scale}), g.scalar(0, dy)}));
}

// Swish: d/dx x s(a x) = s + a x s (1 - s), s = sigmoid(a x).
void swish(GradientContext& g) {
  const std::string dy = g.grad_of_output(0);
  if (dy.empty() || !g.needs_grad(0)) return;
  const std::string x = g.input(0);
  const std::string ax = g.emit("Mul", {x, g.scalar(g.attr_float("alpha", 1.0f), x)});
  const std::string s = g.emit("Sigmoid", {ax});
  const std::string tail = g.emit("Mul", {g.emit("Mul", {ax, s}), g.emit("Sub", {g.scalar(1, x), s})});
  g.set_input_grad(0, g.emit("Mul", {dy, g.emit("Add", {s, tail})}));
}

// Shrink: slope 1 outside [-lambd, lambd], 0 inside.
void shrink(GradientContext& g) {
  const std::string dy = g.grad_of_output(0);
  if (dy.empty() || !g.needs_grad(0)) return;
  const std::string x = g.input(0);
  const double lambd = g.attr_float("lambd", 0.5f);
  const std::string outside =
      g.emit("Or", {g.emit("Less", {x, g.scalar(-lambd, x)}), g.emit("Greater", {x, g.scalar(lambd, x)})});
  g.set_input_grad(0, g.emit("Where", {outside, dy, g.scalar(0, dy)}));
}

const RuleRegistration kActivationRules{
    {"Relu", relu},
    {"Sigmoid", sigmoid},
    {"Gelu", gelu},
    {"LeakyRelu", leaky_relu},
    {"Elu", elu},
    {"Selu", selu},
    {"HardSigmoid", hard_sigmoid},
    {"HardSwish", hard_swish},
    {"Softplus", softplus},
    {"Softmax", softmax},
    {"LogSoftmax", log_softmax},
    {"Dropout", dropout},
    {"Swish", swish},
    {"Shrink", shrink},
};

const RuleRegistration kFusedActivationRules{{{"Gelu", fused_gelu}, {"GeluTanh", fused_gelu_tanh}}, kOnnxtrainDomain};

}  // namespace
}  // namespace onnxtrain::autodiff
