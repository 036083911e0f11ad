// Shapes of CenterCropPad, DepthToSpace, SpaceToDepth, ReverseSequence and TensorScatter
// (src/ops/cpu/rearrange.cc).
#include "ir/shape_rules.h"

namespace onnxtrain::ir {
namespace {

// The listed axes (every axis without `axes`) take the sizes of constant `shape`.
void center_crop_pad(ShapeContext& c) {
  const SymbolicShape* x = c.shape(0);
  if (!x) return c.set(0, c.dtype(0));
  SymbolicShape out = *x;
  const auto target = c.ints(1);
  std::vector<int64_t> axes = c.ints_attribute("axes").value_or(std::vector<int64_t>{});
  if (axes.empty()) {
    for (size_t a = 0; a < x->size(); ++a) axes.push_back(static_cast<int64_t>(a));
  }
  for (size_t k = 0; k < axes.size(); ++k) {
    const auto a = axis_index(axes[k], x->size());
    if (!a) return c.set(0, c.dtype(0), unknown_dims(x->size()));
    out[*a] = target && target->size() == axes.size() ? known((*target)[k]) : Dim{};
  }
  c.set(0, c.dtype(0), out);
}

// [N, C, H, W] -> [N, C / b^2, H b, W b] (to_space) or [N, C b^2, H / b, W / b].
void depth_space(ShapeContext& c, bool to_space) {
  const SymbolicShape* x = c.shape(0);
  const int64_t b = c.int_attribute("blocksize").value_or(0);
  if (!x || x->size() != 4 || b < 1)
    return c.set(0, c.dtype(0), x ? std::optional(unknown_dims(x->size())) : std::nullopt);
  auto scaled = [](const Dim& d, int64_t multiply, int64_t divide) {
    return d.value ? known(*d.value * multiply / divide) : Dim{};
  };
  SymbolicShape out = *x;
  if (to_space) {
    out[1] = scaled((*x)[1], 1, b * b), out[2] = scaled((*x)[2], b, 1), out[3] = scaled((*x)[3], b, 1);
  } else {
    out[1] = scaled((*x)[1], b * b, 1), out[2] = scaled((*x)[2], 1, b), out[3] = scaled((*x)[3], 1, b);
  }
  c.set(0, c.dtype(0), out);
}

void depth_to_space(ShapeContext& c) {
  depth_space(c, true);
}
void space_to_depth(ShapeContext& c) {
  depth_space(c, false);
}

const ShapeRuleRegistration kRearrangeShapes{{{"CenterCropPad", center_crop_pad},
                                              {"DepthToSpace", depth_to_space},
                                              {"SpaceToDepth", space_to_depth},
                                              {"ReverseSequence", same_as_input},
                                              {"TensorScatter", same_as_input}}};

}  // namespace
}  // namespace onnxtrain::ir
