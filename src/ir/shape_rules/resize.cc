// Shapes of Resize and Upsample (src/ops/cpu/resize.cc).
#include <cmath>

#include "ir/shape_rules.h"

namespace onnxtrain::ir {
namespace {

// Output sizes from constant `sizes`, or floor(size * scale) from constant `scales`, over
// the axes attribute's axes (every axis without it); unknown sizes otherwise.
void scaled(ShapeContext& c, size_t scales_input, size_t sizes_input) {
  const SymbolicShape* x = c.shape(0);
  if (!x) return c.set(0, c.dtype(0));
  std::vector<size_t> axes;
  if (const auto given = c.ints_attribute("axes")) {
    for (int64_t a : *given) {
      const auto axis = axis_index(a, x->size());
      if (!axis) return c.set(0, c.dtype(0), unknown_dims(x->size()));
      axes.push_back(*axis);
    }
  } else {
    for (size_t i = 0; i < x->size(); ++i) axes.push_back(i);
  }
  SymbolicShape out = *x;
  if (const auto sizes = c.has_input(sizes_input) ? c.ints(sizes_input) : std::nullopt) {
    if (sizes->size() != axes.size()) return c.set(0, c.dtype(0), unknown_dims(x->size()));
    for (size_t k = 0; k < axes.size(); ++k) out[axes[k]] = known((*sizes)[k]);
    return c.set(0, c.dtype(0), out);
  }
  std::vector<double> scales;
  if (const Attribute* a = c.node().attribute("scales")) {  // Upsample before opset 9
    scales.assign(a->floats.begin(), a->floats.end());
  } else if (const Tensor* t = c.constant(scales_input); t && t->dtype() == DType::kFloat32) {
    scales.assign(t->data<float>(), t->data<float>() + t->numel());
  }
  if (scales.size() != axes.size()) return c.set(0, c.dtype(0), unknown_dims(x->size()));
  for (size_t k = 0; k < axes.size(); ++k) {
    const Dim& d = out[axes[k]];
    out[axes[k]] = d.value ? known(static_cast<int64_t>(std::floor(static_cast<double>(*d.value) * scales[k]))) : Dim{};
  }
  c.set(0, c.dtype(0), out);
}

void resize(ShapeContext& c) {
  scaled(c, 2, 3);
}  // (X, roi, scales, sizes)
void upsample(ShapeContext& c) {
  scaled(c, 1, 99);
}  // (X, scales)

const ShapeRuleRegistration kResizeShapes{{{"Resize", resize}, {"Upsample", upsample}}};

}  // namespace
}  // namespace onnxtrain::ir
