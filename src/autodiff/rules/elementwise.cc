// Gradient rules of elementwise ops: arithmetic with broadcasting, math functions,
// selection (Where, Min, Max, Clip) and type changes (Cast).
#include <cmath>
#include <numbers>

#include "autodiff/gradient_context.h"
#include "ir/functions.h"

namespace onnxtrain::autodiff {
namespace {

// Sums `grad` over the axes along which the target shape (1-D int64) was broadcast: where
// the target is shorter or has a 1, and reshapes to it.
const FunctionRegistration kReduceToShape{R"(
ReduceToShape (grad, target_shape) => (reduced) {
  one = Constant <value = int64[1] {1}> ()
  zero = Constant <value_int = 0> ()
  step = Constant <value_int = 1> ()
  grad_shape = Shape (grad)
  grad_rank = Size (grad_shape)
  target_rank = Size (target_shape)
  missing = Sub (grad_rank, target_rank)
  missing_1d = Reshape (missing, one)
  ones = ConstantOfShape <value = int64[1] {1}> (missing_1d)
  aligned = Concat <axis = 0> (ones, target_shape)
  broadcast = Equal (aligned, one)
  all_axes = Range (zero, grad_rank, step)
  axes = Compress (all_axes, broadcast)
  summed = ReduceSum <keepdims = 1, noop_with_empty_axes = 1> (grad, axes)
  reduced = Reshape (summed, target_shape)
}
)"};

// Product with broadcasting undone: the gradient of input `i` for a product-like term.
void set_reduced(GradientContext& g, size_t i, const std::string& grad) {
  if (g.needs_grad(i)) g.set_input_grad(i, g.reduce_to_shape(grad, g.input(i)));
}

void add(GradientContext& g) {
  const std::string dy = g.grad_of_output(0);
  set_reduced(g, 0, dy);
  set_reduced(g, 1, dy);
}

void sub(GradientContext& g) {
  const std::string dy = g.grad_of_output(0);
  set_reduced(g, 0, dy);
  if (g.needs_grad(1)) set_reduced(g, 1, g.emit("Neg", {dy}));
}

void mul(GradientContext& g) {
  const std::string dy = g.grad_of_output(0);
  if (g.needs_grad(0)) set_reduced(g, 0, g.emit("Mul", {dy, g.input(1)}));
  if (g.needs_grad(1)) set_reduced(g, 1, g.emit("Mul", {dy, g.input(0)}));
}

void div(GradientContext& g) {
  const std::string dy = g.grad_of_output(0);
  const std::string b = g.input(1);
  if (g.needs_grad(0)) set_reduced(g, 0, g.emit("Div", {dy, b}));
  if (g.needs_grad(1)) {
    // d(a/b)/db = -y/b
    set_reduced(g, 1, g.emit("Neg", {g.emit("Div", {g.emit("Mul", {dy, g.output(0)}), b})}));
  }
}

void neg(GradientContext& g) {
  g.set_input_grad(0, g.emit("Neg", {g.grad_of_output(0)}));
}

void identity(GradientContext& g) {
  g.set_input_grad(0, g.grad_of_output(0));
}

void pow(GradientContext& g) {
  const std::string dy = g.grad_of_output(0);
  const std::string x = g.input(0);
  std::string e = g.input(1);
  if (g.dtype(e) != g.dtype(x) || g.dtype(x) == DType::kUndefined) e = g.cast_like(e, x);
  if (g.needs_grad(0)) {
    // d(x^e)/dx = e * x^(e-1); for a constant e = 2 that is 2x.
    const Tensor* c = g.constant_input(1);
    std::string slope;
    if (c && c->numel() == 1 && c->item_as_double() == 2.0) {
      slope = g.emit("Mul", {x, g.scalar(2.0, x)});
    } else {
      slope = g.emit("Mul", {e, g.emit("Pow", {x, g.emit("Sub", {e, g.scalar(1.0, x)})})});
    }
    set_reduced(g, 0, g.emit("Mul", {dy, slope}));
  }
  if (g.needs_grad(1)) {
    // d(x^e)/de = y * log(x)
    set_reduced(g, 1, g.emit("Mul", {dy, g.emit("Mul", {g.output(0), g.emit("Log", {x})})}));
  }
}

void sqrt(GradientContext& g) {
  const std::string dy = g.grad_of_output(0);
  g.set_input_grad(0, g.emit("Div", {g.emit("Mul", {dy, g.scalar(0.5, dy)}), g.output(0)}));
}

void exp(GradientContext& g) {
  g.set_input_grad(0, g.emit("Mul", {g.grad_of_output(0), g.output(0)}));
}

void log(GradientContext& g) {
  g.set_input_grad(0, g.emit("Div", {g.grad_of_output(0), g.input(0)}));
}

void sin(GradientContext& g) {
  g.set_input_grad(0, g.emit("Mul", {g.grad_of_output(0), g.emit("Cos", {g.input(0)})}));
}

void cos(GradientContext& g) {
  g.set_input_grad(0, g.emit("Neg", {g.emit("Mul", {g.grad_of_output(0), g.emit("Sin", {g.input(0)})})}));
}

const FunctionRegistration kTanhGrad{R"(
TanhGrad (dY, Y) => (dX) {
  one_f = Constant <value_float = 1.0> ()
  one = CastLike (one_f, Y)
  square = Mul (Y, Y)
  slope = Sub (one, square)
  dX = Mul (dY, slope)
}
)"};

void tanh(GradientContext& g) {
  g.set_input_grad(0, g.call("TanhGrad", {g.grad_of_output(0), g.output(0)}));
}

void atan(GradientContext& g) {
  const std::string x = g.input(0);
  const std::string denominator = g.emit("Add", {g.scalar(1.0, x), g.emit("Mul", {x, x})});
  g.set_input_grad(0, g.emit("Div", {g.grad_of_output(0), denominator}));
}

void erf(GradientContext& g) {
  // d erf(x)/dx = 2/sqrt(pi) * exp(-x^2)
  const std::string x = g.input(0);
  const std::string gauss = g.emit("Exp", {g.emit("Neg", {g.emit("Mul", {x, x})})});
  const std::string slope = g.emit("Mul", {gauss, g.scalar(2.0 / std::sqrt(std::numbers::pi), x)});
  g.set_input_grad(0, g.emit("Mul", {g.grad_of_output(0), slope}));
}

void abs(GradientContext& g) {
  g.set_input_grad(0, g.emit("Mul", {g.grad_of_output(0), g.emit("Sign", {g.input(0)})}));
}

void reciprocal(GradientContext& g) {
  const std::string y = g.output(0);
  g.set_input_grad(0, g.emit("Neg", {g.emit("Mul", {g.grad_of_output(0), g.emit("Mul", {y, y})})}));
}

// Clip(x, min, max): the gradient flows to x where min <= x <= max (as in PyTorch), to
// min where x < min and to max where x > max.
void clip(GradientContext& g) {
  const std::string dy = g.grad_of_output(0);
  const std::string x = g.input(0);
  const std::string zero = g.scalar(0.0, dy);
  std::string inside;
  if (g.has_input(1)) inside = g.emit("GreaterOrEqual", {x, g.input(1)});
  if (g.has_input(2)) {
    const std::string below_max = g.emit("LessOrEqual", {x, g.input(2)});
    inside = inside.empty() ? below_max : g.emit("And", {inside, below_max});
  }
  if (g.needs_grad(0)) g.set_input_grad(0, inside.empty() ? dy : g.emit("Where", {inside, dy, zero}));
  if (g.needs_grad(1)) {
    g.set_input_grad(
        1, g.emit("ReduceSum", {g.emit("Where", {g.emit("Less", {x, g.input(1)}), dy, zero})}, {attr("keepdims", 0)}));
  }
  if (g.needs_grad(2)) {
    g.set_input_grad(2, g.emit("ReduceSum", {g.emit("Where", {g.emit("Greater", {x, g.input(2)}), dy, zero})},
                               {attr("keepdims", 0)}));
  }
}

// Min and Max: the gradient goes to the inputs equal to the result, split evenly on ties
// (as in PyTorch).
void min_max(GradientContext& g) {
  const std::string dy = g.grad_of_output(0);
  const std::string y = g.output(0);
  if (g.input_count() == 1) {
    g.set_input_grad(0, dy);
    return;
  }
  std::vector<std::string> masks;
  std::vector<std::string> counts;
  for (size_t i = 0; i < g.input_count(); ++i) {
    masks.push_back(g.emit("Equal", {g.input(i), y}));
    counts.push_back(g.cast_like(masks.back(), dy));
  }
  const std::string count = g.emit("Sum", counts);
  const std::string share = g.emit("Div", {dy, count});
  const std::string zero = g.scalar(0.0, dy);
  for (size_t i = 0; i < g.input_count(); ++i) {
    if (g.needs_grad(i)) set_reduced(g, i, g.emit("Where", {masks[i], share, zero}));
  }
}

void sum(GradientContext& g) {
  const std::string dy = g.grad_of_output(0);
  for (size_t i = 0; i < g.input_count(); ++i) set_reduced(g, i, dy);
}

void mean(GradientContext& g) {
  const std::string dy = g.grad_of_output(0);
  const std::string share = g.emit("Div", {dy, g.scalar(static_cast<double>(g.input_count()), dy)});
  for (size_t i = 0; i < g.input_count(); ++i) set_reduced(g, i, share);
}

void where(GradientContext& g) {
  const std::string dy = g.grad_of_output(0);
  const std::string zero = g.scalar(0.0, dy);
  if (g.needs_grad(1)) set_reduced(g, 1, g.emit("Where", {g.input(0), dy, zero}));
  if (g.needs_grad(2)) set_reduced(g, 2, g.emit("Where", {g.input(0), zero, dy}));
}

// Cast and CastLike: the gradient is cast back to the input's type.
void cast(GradientContext& g) {
  const std::string dy = g.grad_of_output(0);
  const std::string x = g.input(0);
  const bool same = g.dtype(x) != DType::kUndefined && g.dtype(x) == g.dtype(dy);
  g.set_input_grad(0, same ? dy : g.cast_like(dy, x));
}

const RuleRegistration kElementwiseRules{
    {"Add", add},
    {"Sub", sub},
    {"Mul", mul},
    {"Div", div},
    {"Neg", neg},
    {"Pow", pow},
    {"Sqrt", sqrt},
    {"Exp", exp},
    {"Log", log},
    {"Sin", sin},
    {"Cos", cos},
    {"Tanh", tanh},
    {"Atan", atan},
    {"Erf", erf},
    {"Abs", abs},
    {"Reciprocal", reciprocal},
    {"Clip", clip},
    {"Min", min_max},
    {"Max", min_max},
    {"Sum", sum},
    {"Mean", mean},
    {"Where", where},
    {"Cast", cast},
    {"CastLike", cast},
    {"Identity", identity},
    // Piecewise constant: no gradient.
    {"Floor", piecewise_constant},
    {"Ceil", piecewise_constant},
    {"Round", piecewise_constant},
    {"Sign", piecewise_constant},
};

}  // namespace
}  // namespace onnxtrain::autodiff
