// Gradient rules of indexing ops: Gather, GatherElements, GatherND, ScatterElements,
// ScatterND, TopK. Gathers scatter their gradient back, adding where an index repeats.
#include "autodiff/gradient_context.h"
#include "ir/functions.h"

namespace onnxtrain::autodiff {
namespace {

// dX of Y = Gather(X, indices, axis): zeros of X's shape with dY added at the gathered
// positions. The index axes of dY are flattened into one, and the indices broadcast over
// the other axes, so that ScatterElements can add them.
const FunctionRegistration kGatherGrad{R"(
GatherGrad <axis> (dY, shape, indices) => (dX) {
  axis = Constant <value_int: int = @axis> ()
  one = Constant <value = int64[1] {1}> ()
  end = Constant <value = int64[1] {9223372036854775807}> ()
  rank = Size (shape)
  shifted = Add (axis, rank)
  axis_n = Mod (shifted, rank)
  axis_1d = Reshape (axis_n, one)
  after_1d = Add (axis_1d, one)
  zero_1d = Constant <value = int64[1] {0}> ()
  outer = Slice (shape, zero_1d, axis_1d)
  inner = Slice (shape, after_1d, end)
  count = Size (indices)
  count_1d = Reshape (count, one)
  flat_shape = Concat <axis = 0> (outer, count_1d, inner)
  flat_dY = Reshape (dY, flat_shape)
  outer_rank = Shape (outer)
  inner_rank = Shape (inner)
  outer_ones = ConstantOfShape <value = int64[1] {1}> (outer_rank)
  inner_ones = ConstantOfShape <value = int64[1] {1}> (inner_rank)
  index_shape = Concat <axis = 0> (outer_ones, count_1d, inner_ones)
  index_column = Reshape (indices, index_shape)
  index = Expand (index_column, flat_shape)
  zeros_f = ConstantOfShape (shape)
  zeros = CastLike (zeros_f, dY)
  dX = ScatterElements <axis: int = @axis, reduction = "add"> (zeros, index, flat_dY)
}
)",
                                       16};

void gather(GradientContext& g) {
  if (!g.needs_grad(0)) return;
  const int64_t axis = g.attr_int("axis", 0);
  g.set_input_grad(
      0, g.call("GatherGrad", {g.grad_of_output(0), g.shape_of(g.input(0)), g.input(1)}, {attr("axis", axis)}));
}

void require_scatter_reduction(GradientContext& g) {
  if (g.opset() < 16) g.fail("the gradient needs ScatterElements/ScatterND with reduction (opset 16 or later)");
}

void gather_elements(GradientContext& g) {
  if (!g.needs_grad(0)) return;
  require_scatter_reduction(g);
  const std::string dy = g.grad_of_output(0);
  const std::string zeros = g.zeros(g.shape_of(g.input(0)), dy);
  g.set_input_grad(0, g.emit("ScatterElements", {zeros, g.input(1), dy},
                             {attr("axis", g.attr_int("axis", 0)), attr("reduction", "add")}));
}

void gather_nd(GradientContext& g) {
  if (!g.needs_grad(0)) return;
  if (g.attr_int("batch_dims", 0) != 0) g.fail("the gradient of GatherND with batch_dims > 0 is not implemented");
  require_scatter_reduction(g);
  const std::string dy = g.grad_of_output(0);
  const std::string zeros = g.zeros(g.shape_of(g.input(0)), dy);
  g.set_input_grad(0, g.emit("ScatterND", {zeros, g.input(1), dy}, {attr("reduction", "add")}));
}

// ScatterElements / ScatterND (reduction none or add): the data's gradient is dY except,
// without reduction, at the overwritten positions; the updates' gradient is gathered.
void scatter(GradientContext& g, const std::string& gather_op, std::vector<ir::Attribute> gather_attributes) {
  const std::string reduction = g.attr_string("reduction", "none");
  if (reduction != "none" && reduction != "add") {
    g.fail("the gradient of " + g.node().op_type + " with reduction '" + reduction + "' is not implemented");
  }
  const std::string dy = g.grad_of_output(0);
  if (g.needs_grad(0)) {
    if (reduction == "add") {
      g.set_input_grad(0, dy);
    } else {
      const std::string zeros = g.zeros(g.shape_of(g.input(2)), dy);
      std::vector<ir::Attribute> attributes;
      if (gather_op == "GatherElements") attributes.push_back(attr("axis", g.attr_int("axis", 0)));
      g.set_input_grad(0, g.emit(g.node().op_type, {dy, g.input(1), zeros}, std::move(attributes)));
    }
  }
  if (g.needs_grad(2)) g.set_input_grad(2, g.emit(gather_op, {dy, g.input(1)}, std::move(gather_attributes)));
}

void scatter_elements(GradientContext& g) {
  scatter(g, "GatherElements", {attr("axis", g.attr_int("axis", 0))});
}

void scatter_nd(GradientContext& g) {
  scatter(g, "GatherND", {});
}

// TopK: the values' gradient goes back to where they were taken from (distinct indices).
void topk(GradientContext& g) {
  const std::string dvalues = g.grad_of_output(0);
  if (dvalues.empty()) return;
  const std::string indices = g.require_output(1, "indices");
  const std::string zeros = g.zeros(g.shape_of(g.input(0)), dvalues);
  g.set_input_grad(0, g.emit("ScatterElements", {zeros, indices, dvalues}, {attr("axis", g.attr_int("axis", -1))}));
}

const RuleRegistration kGatherRules{
    {"Gather", gather},        {"GatherElements", gather_elements},
    {"GatherND", gather_nd},   {"ScatterElements", scatter_elements},
    {"ScatterND", scatter_nd}, {"TopK", topk},
};

}  // namespace
}  // namespace onnxtrain::autodiff
