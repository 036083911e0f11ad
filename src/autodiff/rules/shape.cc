// Gradient rules of the ops that move data without arithmetic: reshapes, transposes,
// concatenation and splitting, slicing, padding, broadcasting, tiling, Trilu.
#include <algorithm>
#include <limits>

#include "autodiff/gradient_context.h"

namespace onnxtrain::autodiff {
namespace {

// Reshape, Flatten, Squeeze, Unsqueeze: the gradient takes the input's shape back.
void reshape_back(GradientContext& g) {
  std::vector<ir::Attribute> attributes;
  if (g.opset() >= 14) attributes.push_back(attr("allowzero", 1));  // Shape(x) may hold zeros
  g.set_input_grad(0, g.emit("Reshape", {g.grad_of_output(0), g.shape_of(g.input(0))}, std::move(attributes)));
}

void transpose(GradientContext& g) {
  const std::string dy = g.grad_of_output(0);
  if (!g.has_attribute("perm")) {  // reversal is its own inverse
    g.set_input_grad(0, g.emit("Transpose", {dy}));
    return;
  }
  const std::vector<int64_t> perm = g.attr_ints("perm");
  std::vector<int64_t> inverse(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) inverse.at(static_cast<size_t>(perm[i])) = static_cast<int64_t>(i);
  g.set_input_grad(0, g.emit("Transpose", {dy}, {attr("perm", inverse)}));
}

void expand(GradientContext& g) {
  g.set_input_grad(0, g.reduce_to_shape(g.grad_of_output(0), g.input(0)));
}

// Concat: split the gradient back into pieces of the inputs' sizes along the axis.
void concat(GradientContext& g) {
  const int64_t axis = g.attr_int("axis", 0);
  const std::string axis_index = g.ints({axis});
  std::vector<std::string> sizes;
  for (size_t i = 0; i < g.input_count(); ++i) {
    sizes.push_back(g.emit("Gather", {g.shape_of(g.input(i)), axis_index}));
  }
  const std::string split = g.emit("Concat", sizes, {attr("axis", 0)});
  const std::vector<std::string> pieces =
      g.emit_n("Split", {g.grad_of_output(0), split}, {attr("axis", axis)}, g.input_count());
  for (size_t i = 0; i < g.input_count(); ++i) g.set_input_grad(i, pieces[i]);
}

// Split: concatenate the outputs' gradients, with zeros for absent ones.
void split(GradientContext& g) {
  const int64_t axis = g.attr_int("axis", 0);
  std::vector<std::string> pieces;
  for (size_t i = 0; i < g.output_count(); ++i) {
    std::string piece = g.grad_of_output(i);
    if (piece.empty()) piece = g.zeros(g.shape_of(g.require_output(i, "split")), g.input(0));
    pieces.push_back(piece);
  }
  g.set_input_grad(0, g.emit("Concat", pieces, {attr("axis", axis)}));
}

// The int64 form of an index input (Slice and Pad accept int32 too).
std::string as_int64(GradientContext& g, const std::string& value) {
  if (g.dtype(value) == DType::kInt64) return value;
  return g.emit("Cast", {value}, {attr("to", static_cast<int64_t>(DType::kInt64))});
}

// Slice with unit steps: pad the gradient back with zeros; the padding is computed at run
// time from the input's shape with Slice's clamping rules.
void slice_unit_steps(GradientContext& g) {
  const std::string x_shape = g.shape_of(g.input(0));
  const std::string rank = g.emit("Size", {x_shape});
  const std::string starts = as_int64(g, g.input(1));
  const std::string ends = as_int64(g, g.input(2));
  std::string axes;
  if (g.has_input(3)) {
    axes = as_int64(g, g.input(3));
    const std::string zero = g.int_scalar(0);
    axes = g.emit("Where", {g.emit("Less", {axes, zero}), g.emit("Add", {axes, rank}), axes});
  } else {
    axes = g.emit("Range", {g.int_scalar(0), g.emit("Size", {starts}), g.int_scalar(1)});
  }
  const std::string dims = g.emit("Gather", {x_shape, axes});
  const std::string zero = g.int_scalar(0);
  auto clamp_index = [&](const std::string& index) {
    const std::string wrapped = g.emit("Where", {g.emit("Less", {index, zero}), g.emit("Add", {index, dims}), index});
    return g.emit("Min", {g.emit("Max", {wrapped, zero}), dims});
  };
  const std::string begin = clamp_index(starts);
  const std::string end = g.emit("Max", {clamp_index(ends), begin});
  const std::string zeros_rank =
      g.emit("ConstantOfShape", {g.emit("Shape", {x_shape})}, {attr("value", Tensor::from_vector<int64_t>({1}, {0}))});
  const std::string pads_begin = g.emit("ScatterElements", {zeros_rank, axes, begin});
  const std::string pads_end = g.emit("ScatterElements", {zeros_rank, axes, g.emit("Sub", {dims, end})});
  const std::string pads = g.emit("Concat", {pads_begin, pads_end}, {attr("axis", 0)});
  g.set_input_grad(0, g.emit("Pad", {g.grad_of_output(0), pads}));
}

// Slice with any steps: slice a tensor of element indices the same way and scatter the
// gradient to the indices it selected.
void slice_any_steps(GradientContext& g) {
  const std::string x = g.input(0);
  const std::string x_shape = g.shape_of(x);
  const std::string count = g.emit("ReduceProd", {x_shape}, {attr("keepdims", 1)});
  const std::string flat_index = g.emit("Range", {g.int_scalar(0), g.emit("Squeeze", {count}), g.int_scalar(1)});
  std::vector<std::string> slice_inputs = {g.emit("Reshape", {flat_index, x_shape})};
  for (size_t i = 1; i < g.input_count(); ++i) slice_inputs.push_back(g.input(i));
  const std::string picked = g.emit("Reshape", {g.emit("Slice", slice_inputs), g.ints({-1})});
  const std::string dy = g.emit("Reshape", {g.grad_of_output(0), g.ints({-1})});
  const std::string scattered = g.emit("ScatterElements", {g.zeros(count, dy), picked, dy});
  g.set_input_grad(0, g.emit("Reshape", {scattered, x_shape}));
}

void slice(GradientContext& g) {
  if (g.opset() < 10) g.fail("Slice before opset 10 (attributes) is not supported");
  bool unit_steps = !g.has_input(4);
  if (!unit_steps) {
    const auto steps = g.constant_ints(4);
    unit_steps = steps && std::all_of(steps->begin(), steps->end(), [](int64_t s) { return s == 1; });
  }
  if (unit_steps)
    slice_unit_steps(g);
  else
    slice_any_steps(g);
}

// Pad (constant mode): negative pads cut the padding off again.
void pad(GradientContext& g) {
  const std::string mode = g.attr_string("mode", "constant");
  if (mode != "constant") g.fail("the gradient of Pad in mode '" + mode + "' is not implemented");
  const std::string dy = g.grad_of_output(0);
  const auto pads = g.constant_ints(1);
  std::optional<std::vector<int64_t>> axes;
  if (g.has_input(3)) axes = g.constant_ints(3);
  std::string dx;
  if (pads && std::all_of(pads->begin(), pads->end(), [](int64_t p) { return p >= 0; }) && (!g.has_input(3) || axes)) {
    // Padding only: cut the input's window out of dY.
    const size_t n = pads->size() / 2;
    std::vector<int64_t> begin(pads->begin(), pads->begin() + static_cast<int64_t>(n));
    std::vector<int64_t> slice_axes;
    for (size_t i = 0; i < n; ++i) slice_axes.push_back(axes ? axes->at(i) : static_cast<int64_t>(i));
    const std::string sizes = g.emit("Gather", {g.shape_of(g.input(0)), g.ints(slice_axes)});
    const std::string starts = g.ints(begin);
    dx = g.emit("Slice", {dy, starts, g.emit("Add", {starts, sizes}), g.ints(slice_axes)});
  } else {
    // Negative pads crop; padding with the negated pads undoes either.
    std::vector<std::string> inputs = {dy, g.emit("Neg", {as_int64(g, g.input(1))})};
    if (g.has_input(3)) inputs.insert(inputs.end(), {"", g.input(3)});
    dx = g.emit("Pad", inputs);
  }
  g.set_input_grad(0, dx);
  if (g.needs_grad(2)) {
    const std::string total = g.emit("ReduceSum", {dy}, {attr("keepdims", 0)});
    const std::string inner = g.emit("ReduceSum", {dx}, {attr("keepdims", 0)});
    g.set_input_grad(2, g.emit("Sub", {total, inner}));
  }
}

// Tile: view the gradient as [r0, d0, r1, d1, ...] and sum over the repeat axes.
void tile(GradientContext& g) {
  const std::string x_shape = g.shape_of(g.input(0));
  const std::string repeats = as_int64(g, g.input(1));
  const std::string one = g.ints({1});
  const std::string pairs =
      g.emit("Concat", {g.emit("Unsqueeze", {repeats, one}), g.emit("Unsqueeze", {x_shape, one})}, {attr("axis", 1)});
  const std::string split_shape = g.emit("Reshape", {pairs, g.ints({-1})});
  const std::string split = g.emit("Reshape", {g.grad_of_output(0), split_shape});
  const std::string rank2 = g.emit("Size", {split_shape});
  const std::string repeat_axes = g.emit("Range", {g.int_scalar(0), rank2, g.int_scalar(2)});
  g.set_input_grad(0, g.emit("ReduceSum", {split, repeat_axes}, {attr("keepdims", 0)}));
}

void trilu(GradientContext& g) {
  std::vector<std::string> inputs = {g.grad_of_output(0)};
  if (g.has_input(1)) inputs.push_back(g.input(1));
  g.set_input_grad(0, g.emit("Trilu", inputs, {attr("upper", g.attr_int("upper", 1))}));
}

const RuleRegistration kShapeRules{
    {"Reshape", reshape_back},
    {"Flatten", reshape_back},
    {"Squeeze", reshape_back},
    {"Unsqueeze", reshape_back},
    {"Transpose", transpose},
    {"Expand", expand},
    {"Concat", concat},
    {"Split", split},
    {"Slice", slice},
    {"Pad", pad},
    {"Tile", tile},
    {"Trilu", trilu},
};

}  // namespace
}  // namespace onnxtrain::autodiff
