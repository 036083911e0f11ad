// Gradient rules of the reductions. Each brings dY (and Y where needed) back to the
// reduced axes (Unsqueeze when keepdims=0) and broadcasts it over the input. CumSum, a
// running sum, is here too.
#include "autodiff/gradient_context.h"

namespace onnxtrain::autodiff {
namespace {

// Where a reduction's axes come from: an input (ReduceSum from opset 13, the others from
// 18), an attribute, or nowhere (all axes).
struct ReducedAxes {
  bool all = false;   // no axes: every axis is reduced (or none, see noop)
  bool noop = false;  // no axes and noop_with_empty_axes: the op is an identity
  std::string axes;   // int64 1-D value, when not `all`
};

ReducedAxes reduced_axes(GradientContext& g) {
  const bool axes_as_input = g.node().op_type == "ReduceSum" ? g.opset() >= 13 : g.opset() >= 18;
  ReducedAxes r;
  if (axes_as_input) {
    if (g.has_input(1)) {
      const auto constant = g.constant_ints(1);
      if (!constant || !constant->empty()) {
        r.axes = g.input(1);
        return r;
      }
    }
    r.all = true;
    r.noop = g.attr_int("noop_with_empty_axes", 0) != 0;
    return r;
  }
  const std::vector<int64_t> axes = g.attr_ints("axes");
  if (axes.empty()) {
    r.all = true;
    return r;
  }
  r.axes = g.ints(axes);
  return r;
}

// A reduced value (dY or Y) with the reduced axes back as 1s, so it broadcasts over X.
std::string unreduce(GradientContext& g, const ReducedAxes& r, const std::string& value) {
  if (r.all || g.attr_int("keepdims", 1) != 0) return value;
  return g.emit("Unsqueeze", {value, r.axes});
}

std::string broadcast_to_input(GradientContext& g, const std::string& value) {
  return g.emit("Expand", {value, g.shape_of(g.input(0))});
}

void reduce_sum(GradientContext& g) {
  const ReducedAxes r = reduced_axes(g);
  const std::string dy = g.grad_of_output(0);
  if (r.noop) {
    g.set_input_grad(0, dy);
    return;
  }
  g.set_input_grad(0, broadcast_to_input(g, unreduce(g, r, dy)));
}

void reduce_mean(GradientContext& g) {
  const ReducedAxes r = reduced_axes(g);
  const std::string dy = g.grad_of_output(0);
  if (r.noop) {
    g.set_input_grad(0, dy);
    return;
  }
  const std::vector<ir::Attribute> all = {attr("keepdims", 0)};
  const std::string in_count = g.emit("ReduceProd", {g.shape_of(g.input(0))}, all);
  const std::string out_count = g.emit("ReduceProd", {g.shape_of(g.output(0))}, all);
  const std::string count = g.cast_like(g.emit("Div", {in_count, out_count}), dy);
  g.set_input_grad(0, g.emit("Div", {broadcast_to_input(g, unreduce(g, r, dy)), count}));
}

// ReduceMax / ReduceMin: the gradient goes to the elements equal to the result, split
// evenly on ties (as PyTorch's amax/amin).
void reduce_extremum(GradientContext& g) {
  const ReducedAxes r = reduced_axes(g);
  const std::string dy = g.grad_of_output(0);
  if (r.noop) {
    g.set_input_grad(0, dy);
    return;
  }
  const std::string x = g.input(0);
  const std::string mask = g.emit("Equal", {x, unreduce(g, r, g.output(0))});
  std::vector<std::string> count_inputs = {g.cast_like(mask, dy)};
  if (!r.all) count_inputs.push_back(r.axes);
  const std::string count = g.emit("ReduceSum", count_inputs, {attr("keepdims", 1)});
  const std::string share = g.emit("Div", {unreduce(g, r, dy), count});
  g.set_input_grad(0, g.emit("Where", {mask, share, g.scalar(0, dy)}));
}

// Reductions whose gradient is dY (unreduced) times a function of x and y.
template <typename Slope>
void reduce_with_slope(GradientContext& g, Slope slope) {
  const ReducedAxes r = reduced_axes(g);
  const std::string dy = g.grad_of_output(0);
  if (r.noop) {
    g.set_input_grad(0, dy);
    return;
  }
  const std::string y = g.has_output(0) ? unreduce(g, r, g.output(0)) : "";
  g.set_input_grad(0, g.emit("Mul", {unreduce(g, r, dy), slope(g.input(0), y)}));
}

void reduce_log_sum_exp(GradientContext& g) {
  reduce_with_slope(g, [&](const std::string& x, const std::string& y) {
    return g.emit("Exp", {g.emit("Sub", {x, y})});
  });
}

void reduce_log_sum(GradientContext& g) {
  reduce_with_slope(g, [&](const std::string& x, const std::string& y) {
    return g.emit("Expand", {g.emit("Reciprocal", {g.emit("Exp", {y})}), g.shape_of(x)});
  });
}

void reduce_l2(GradientContext& g) {
  reduce_with_slope(g, [&](const std::string& x, const std::string& y) { return g.emit("Div", {x, y}); });
}

void reduce_l1(GradientContext& g) {
  reduce_with_slope(g, [&](const std::string& x, const std::string&) { return g.emit("Sign", {x}); });
}

void reduce_sum_square(GradientContext& g) {
  reduce_with_slope(g, [&](const std::string& x, const std::string&) { return g.emit("Mul", {x, g.scalar(2, x)}); });
}

void reduce_prod(GradientContext& g) {
  reduce_with_slope(g, [&](const std::string& x, const std::string& y) { return g.emit("Div", {y, x}); });
}

const RuleRegistration kReduceRules{
    {"ReduceSum", reduce_sum},
    {"ReduceMean", reduce_mean},
    {"ReduceMax", reduce_extremum},
    {"ReduceMin", reduce_extremum},
    {"ReduceLogSumExp", reduce_log_sum_exp},
    {"ReduceLogSum", reduce_log_sum},
    {"ReduceL2", reduce_l2},
    {"ReduceL1", reduce_l1},
    {"ReduceSumSquare", reduce_sum_square},
    {"ReduceProd", reduce_prod},
};

// CumSum, a running sum: y = L x along the axis, L the (strictly, when exclusive) lower
// triangle of ones, or the upper one when reverse. The gradient is the transpose, the
// same cumulative sum run the other way: dX = CumSum(dY, axis, exclusive, !reverse).
void cumsum(GradientContext& g) {
  const std::string dy = g.grad_of_output(0);
  if (dy.empty() || !g.needs_grad(0)) return;
  const std::vector<ir::Attribute> attributes = {attr("exclusive", g.attr_int("exclusive", 0)),
                                                 attr("reverse", g.attr_int("reverse", 0) != 0 ? 0 : 1)};
  g.set_input_grad(0, g.emit("CumSum", {dy, g.input(1)}, attributes));
}

const RuleRegistration kCumSumRules{{"CumSum", cumsum}};

}  // namespace
}  // namespace onnxtrain::autodiff
