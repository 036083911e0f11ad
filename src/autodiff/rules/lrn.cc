// Gradient rule of LRN. With S_c the sum of x^2 over the window [c - b, c + a] of
// channels (b = floor((size-1)/2), a = ceil((size-1)/2)) and d = bias + alpha/size * S:
//   y = x d^-beta
//   dX_j = dY_j d_j^-beta - 2 alpha beta / size * x_j * sum over c with j in window(c) of
//          dY_c x_c d_c^(-beta-1)
// and j is in window(c) exactly when c lies in [j - a, j + b]: the same window mirrored.
// A window sum is the channel axis padded with zeros and `size` shifted slices added, all
// standard ONNX ops (exact, unlike differences of prefix sums).
#include "autodiff/gradient_context.h"

namespace onnxtrain::autodiff {
namespace {

// sum over k in [c - before, c + after] of v[:, k] for every channel c of v [N, C, ...].
std::string window_sum(GradientContext& g, const std::string& v, int64_t before, int64_t after) {
  const std::string zeros_rest =
      g.emit("ConstantOfShape", {g.emit("Reshape", {g.emit("Sub", {g.rank_of(v), g.int_scalar(2)}), g.ints({1})})},
             {attr("value", Tensor::from_vector<int64_t>({1}, {0}))});
  const std::string pads =
      g.emit("Concat", {g.ints({0, before}), zeros_rest, g.ints({0, after}), zeros_rest}, {attr("axis", 0)});
  const std::string padded = g.emit("Pad", {v, pads});
  const std::string channels = g.emit("Slice", {g.shape_of(v), g.ints({1}), g.ints({2})});
  std::vector<std::string> shifted;
  for (int64_t t = 0; t <= before + after; ++t) {
    const std::string end = g.emit("Add", {channels, g.ints({t})});
    shifted.push_back(g.emit("Slice", {padded, g.ints({t}), end, g.ints({1})}));
  }
  return shifted.size() == 1 ? shifted[0] : g.emit("Sum", shifted);
}

void lrn(GradientContext& g) {
  const std::string dy = g.grad_of_output(0);
  if (dy.empty() || !g.needs_grad(0)) return;
  const std::string x = g.input(0);
  const int64_t size = g.attr_int("size", 0);
  if (size < 1) g.fail("size is " + std::to_string(size) + ", expected 1 or more");
  const double alpha = g.attr_float("alpha", 1e-4f), beta = g.attr_float("beta", 0.75f);
  const double bias = g.attr_float("bias", 1.0f);
  const int64_t before = (size - 1) / 2, after = size - 1 - before;
  const std::string squares = window_sum(g, g.emit("Mul", {x, x}), before, after);
  const std::string d = g.emit("Add", {g.scalar(bias, x), g.emit("Mul", {squares, g.scalar(alpha / size, x)})});
  const std::string d_pow = g.emit("Pow", {d, g.scalar(-beta, x)});  // d^-beta
  const std::string direct = g.emit("Mul", {dy, d_pow});
  // dY_c x_c d_c^(-beta-1) = dY_c y_c / d_c
  const std::string w = g.emit("Div", {g.emit("Mul", {dy, g.emit("Mul", {x, d_pow})}), d});
  const std::string spread = window_sum(g, w, after, before);
  const std::string factor = g.scalar(2.0 * alpha * beta / static_cast<double>(size), x);
  g.set_input_grad(0, g.emit("Sub", {direct, g.emit("Mul", {factor, g.emit("Mul", {x, spread})})}));
}

const RuleRegistration kLrnRules{{"LRN", lrn}};

}  // namespace
}  // namespace onnxtrain::autodiff
