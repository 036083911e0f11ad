// Gradient rule of Resize (nearest, linear, cubic; any coordinate transformation but
// tf_crop_and_resize).
//
// Resize is linear in X and separable: along each resized axis it multiplies by an
// interpolation matrix A [out, in]. A is computed at run time by resizing an identity
// matrix along its first axis with the node's own attributes and that axis's scale or size,
// so every mode and rounding rule matches the forward pass exactly. The gradient
// multiplies by A^T along each resized axis.
#include "autodiff/gradient_context.h"

namespace onnxtrain::autodiff {
namespace {

// The attributes of the forward Resize that define one axis's interpolation.
std::vector<ir::Attribute> interpolation_attributes(GradientContext& g) {
  std::vector<ir::Attribute> attributes;
  for (const ir::Attribute& a : g.node().attributes) {
    if (a.name == "axes" || a.name == "keep_aspect_ratio_policy") continue;
    attributes.push_back(a);
  }
  return attributes;
}

void resize(GradientContext& g) {
  const std::string mode = g.attr_string("coordinate_transformation_mode", "half_pixel");
  if (mode == "tf_crop_and_resize") g.fail("the gradient with tf_crop_and_resize is not implemented");
  if (g.attr_string("keep_aspect_ratio_policy", "stretch") != "stretch") {
    g.fail("the gradient with keep_aspect_ratio_policy other than stretch is not implemented");
  }
  const std::string x = g.input(0);
  const auto rank = g.rank(x);
  if (!rank) g.fail("the gradient needs the input's rank");
  const bool by_scales = g.has_input(2) && !(g.constant_input(2) && g.constant_input(2)->numel() == 0);
  if (!by_scales && !g.has_input(3)) g.fail("neither scales nor sizes given");
  // The scales/sizes entry of each axis (the "axes" attribute lists them, opset 18).
  std::vector<int64_t> entry(*rank, -1);
  const std::vector<int64_t> axes = g.attr_ints("axes");
  if (axes.empty()) {
    for (size_t a = 0; a < *rank; ++a) entry[a] = static_cast<int64_t>(a);
  } else {
    for (size_t k = 0; k < axes.size(); ++k) {
      const int64_t a = axes[k] < 0 ? axes[k] + static_cast<int64_t>(*rank) : axes[k];
      entry.at(static_cast<size_t>(a)) = static_cast<int64_t>(k);
    }
  }
  const Tensor* constant_scales = by_scales ? g.constant_input(2) : nullptr;
  const std::string x_shape = g.shape_of(x);
  const std::string float_one = g.emit("Constant", {}, {attr("value", Tensor::from_vector<float>({1}, {1.0f}))});
  std::string grad = g.grad_of_output(0);
  for (size_t a = 0; a < *rank; ++a) {
    if (entry[a] < 0) continue;
    if (constant_scales && constant_scales->dtype() == DType::kFloat32 &&
        constant_scales->data<float>()[entry[a]] == 1.0f) {
      continue;  // not resized
    }
    const std::string size_in = g.emit("Gather", {x_shape, g.ints({static_cast<int64_t>(a)})});
    const std::string square = g.emit("Concat", {size_in, size_in}, {attr("axis", 0)});
    const std::string eye = g.emit("EyeLike", {g.emit("ConstantOfShape", {square})});
    std::string matrix;
    if (by_scales) {
      const std::string scale = g.emit("Gather", {g.input(2), g.ints({entry[a]})});
      const std::string scales = g.emit("Concat", {scale, float_one}, {attr("axis", 0)});
      matrix = g.emit("Resize", {eye, "", scales}, interpolation_attributes(g));
    } else {
      const std::string size_out = g.emit("Gather", {g.input(3), g.ints({entry[a]})});
      const std::string sizes = g.emit("Concat", {size_out, size_in}, {attr("axis", 0)});
      matrix = g.emit("Resize", {eye, "", "", sizes}, interpolation_attributes(g));
    }
    matrix = g.cast_like(matrix, g.grad_of_output(0));  // [out, in]
    // Move axis a last, multiply by A (contracting the output positions), move it back.
    std::vector<int64_t> perm;
    for (size_t i = 0; i < *rank; ++i) {
      if (i != a) perm.push_back(static_cast<int64_t>(i));
    }
    perm.push_back(static_cast<int64_t>(a));
    std::vector<int64_t> inverse(*rank);
    for (size_t i = 0; i < *rank; ++i) inverse[static_cast<size_t>(perm[i])] = static_cast<int64_t>(i);
    const std::string moved = g.emit("Transpose", {grad}, {attr("perm", perm)});
    grad = g.emit("Transpose", {g.emit("MatMul", {moved, matrix})}, {attr("perm", inverse)});
  }
  g.set_input_grad(0, grad);
}

const RuleRegistration kResizeRules{
    {"Resize", resize},
};

}  // namespace
}  // namespace onnxtrain::autodiff
