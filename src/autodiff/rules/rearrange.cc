// Gradient rules of the element-moving ops of src/ops/cpu/rearrange.cc and MaxUnpool: each
// moves dY back to where the forward pass took its elements from, in standard ONNX.
//
// - DepthToSpace (DCR) and SpaceToDepth undo each other; DepthToSpace CRD is undone by its
//   reshape / transpose written backwards.
// - CenterCropPad: cropping about the centre and padding about it are adjoint, so dX is
//   dY cropped or padded back to X's sizes on the same axes.
// - ReverseSequence reverses itself.
// - TensorScatter: past_cache's gradient is dY with the written positions zeroed (a
//   TensorScatter of zeros); update's is dY gathered from those positions.
// - MaxUnpool: dX gathers dY at the positions Indices names (in the leading corner that
//   holds the unpooled tensor when output_shape makes the output larger).
#include <cstdint>

#include "autodiff/gradient_context.h"

namespace onnxtrain::autodiff {
namespace {

std::string axis_of(GradientContext& g, const std::string& shape, int64_t axis) {
  return g.emit("Slice", {shape, g.ints({axis}), g.ints({axis + 1})});
}

void depth_to_space(GradientContext& g) {
  const std::string dy = g.grad_of_output(0);
  if (dy.empty() || !g.needs_grad(0)) return;
  const int64_t block = g.attr_int("blocksize", 0);
  if (g.attr_string("mode", "DCR") == "DCR") {
    g.set_input_grad(0, g.emit("SpaceToDepth", {dy}, {attr("blocksize", block)}));
    return;
  }
  // CRD: x [N, C' b b, H, W] -> [N, C', b, b, H, W] -> perm (0, 1, 4, 2, 5, 3) -> [N, C', H b, W b].
  const std::string x_shape = g.shape_of(g.input(0));
  const std::string channels = g.emit("Div", {axis_of(g, x_shape, 1), g.ints({block * block})});
  const std::string split = g.emit("Concat",
                                   {axis_of(g, x_shape, 0), channels, axis_of(g, x_shape, 2), g.ints({block}),
                                    axis_of(g, x_shape, 3), g.ints({block})},
                                   {attr("axis", int64_t{0})});
  const std::string moved =
      g.emit("Transpose", {g.emit("Reshape", {dy, split})}, {attr("perm", std::vector<int64_t>{0, 1, 3, 5, 2, 4})});
  g.set_input_grad(0, g.emit("Reshape", {moved, x_shape}));
}

void space_to_depth(GradientContext& g) {
  const std::string dy = g.grad_of_output(0);
  if (dy.empty() || !g.needs_grad(0)) return;
  g.set_input_grad(0,
                   g.emit("DepthToSpace", {dy}, {attr("blocksize", g.attr_int("blocksize", 0)), attr("mode", "DCR")}));
}

void center_crop_pad(GradientContext& g) {
  const std::string dy = g.grad_of_output(0);
  if (dy.empty() || !g.needs_grad(0)) return;
  const std::string x_shape = g.shape_of(g.input(0));
  const std::vector<int64_t> axes = g.attr_ints("axes");
  if (axes.empty()) {
    g.set_input_grad(0, g.emit("CenterCropPad", {dy, x_shape}));
    return;
  }
  const std::string sizes = g.emit("Gather", {x_shape, g.ints(axes)});
  g.set_input_grad(0, g.emit("CenterCropPad", {dy, sizes}, {attr("axes", axes)}));
}

void reverse_sequence(GradientContext& g) {
  const std::string dy = g.grad_of_output(0);
  if (dy.empty() || !g.needs_grad(0)) return;
  g.set_input_grad(0, g.emit("ReverseSequence", {dy, g.input(1)}, g.node().attributes));
}

void tensor_scatter(GradientContext& g) {
  const std::string dy = g.grad_of_output(0);
  if (dy.empty()) return;
  const std::string update = g.input(1);
  std::vector<std::string> indices;
  if (g.has_input(2)) indices.push_back(g.input(2));
  if (g.needs_grad(0)) {
    std::vector<std::string> inputs{dy, g.zeros(g.shape_of(update), update)};
    inputs.insert(inputs.end(), indices.begin(), indices.end());
    g.set_input_grad(0, g.emit("TensorScatter", inputs, g.node().attributes));
  }
  if (!g.needs_grad(1)) return;
  auto rank = g.rank(dy);
  if (!rank) rank = g.rank(g.input(0));
  if (!rank) rank = g.rank(update);
  if (!rank) g.fail("the gradient of update needs the rank of past_cache");
  const int64_t r = static_cast<int64_t>(*rank), given = g.attr_int("axis", -2);
  const int64_t axis = given < 0 ? given + r : given;
  if (axis < 1 || axis >= r) g.fail("axis " + std::to_string(given) + " is outside [1, " + std::to_string(r) + ")");
  // The position along `axis` that update's element s came from: write_indices[b] + s.
  const std::string update_shape = g.shape_of(update);
  const std::string length = g.emit("Gather", {update_shape, g.int_scalar(axis)});
  std::vector<int64_t> along(static_cast<size_t>(r), 1), per_batch(static_cast<size_t>(r), 1);
  along[static_cast<size_t>(axis)] = -1;
  per_batch[0] = -1;
  std::string position =
      g.emit("Reshape", {g.emit("Range", {g.int_scalar(0), length, g.int_scalar(1)}), g.ints(along)});
  if (!indices.empty()) {
    const std::string starts = g.emit("Cast", {indices[0]}, {attr("to", int64_t{7})});
    position = g.emit("Add", {position, g.emit("Reshape", {starts, g.ints(per_batch)})});
  }
  if (g.attr_string("mode", "linear") == "circular") {
    position = g.emit("Mod", {position, g.emit("Gather", {g.shape_of(dy), g.int_scalar(axis)})});
  }
  const std::string full = g.emit("Expand", {position, update_shape});
  g.set_input_grad(1, g.emit("GatherElements", {dy, full}, {attr("axis", axis)}));
}

void max_unpool(GradientContext& g) {
  const std::string dy = g.grad_of_output(0);
  if (dy.empty() || !g.needs_grad(0)) return;
  const std::string x = g.input(0);
  std::string region = dy;
  if (g.has_input(2)) {  // the unpooled tensor: (D - 1) * stride - pads + kernel per axis
    const std::vector<int64_t> kernel = g.attr_ints("kernel_shape");
    const size_t r = kernel.size();
    std::vector<int64_t> strides = g.attr_ints("strides", std::vector<int64_t>(r, 1));
    std::vector<int64_t> pads = g.attr_ints("pads", std::vector<int64_t>(2 * r, 0));
    if (strides.size() != r || pads.size() != 2 * r) g.fail("strides and pads do not fit kernel_shape");
    std::vector<int64_t> extra(r);
    for (size_t a = 0; a < r; ++a) extra[a] = kernel[a] - pads[a] - pads[a + r];
    const std::string x_shape = g.shape_of(x);
    const std::string spatial = g.emit("Slice", {x_shape, g.ints({2}), g.ints({INT64_MAX})});
    const std::string unpooled =
        g.emit("Add", {g.emit("Mul", {g.emit("Sub", {spatial, g.ints({1})}), g.ints(strides)}), g.ints(extra)});
    const std::string ends =
        g.emit("Concat", {g.emit("Slice", {x_shape, g.ints({0}), g.ints({2})}), unpooled}, {attr("axis", int64_t{0})});
    region = g.emit("Slice", {dy, g.ints(std::vector<int64_t>(r + 2, 0)), ends});
  }
  const std::string flat = g.ints({-1});
  const std::string picked =
      g.emit("Gather", {g.emit("Reshape", {region, flat}), g.emit("Reshape", {g.input(1), flat})});
  g.set_input_grad(0, g.emit("Reshape", {picked, g.shape_of(x)}));
}

const RuleRegistration kRearrangeRules{{
    {"DepthToSpace", depth_to_space},
    {"SpaceToDepth", space_to_depth},
    {"CenterCropPad", center_crop_pad},
    {"ReverseSequence", reverse_sequence},
    {"TensorScatter", tensor_scatter},
    {"MaxUnpool", max_unpool},
}};

}  // namespace
}  // namespace onnxtrain::autodiff
