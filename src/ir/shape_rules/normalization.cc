// Shapes of the normalizations (src/ops/cpu/normalization.cc).
#include <algorithm>

#include "ir/shape_rules.h"

namespace onnxtrain::ir {
namespace {

// BatchNormalization (X, scale, B, input_mean, input_var): Y like X; the optional outputs
// (running or saved statistics) like the mean.
void batch_normalization(ShapeContext& c) {
  same_as_input(c);
  for (size_t i = 1; i < c.output_count(); ++i) c.set_like(i, 3);
}

// LayerNormalization: Y like X; Mean and InvStdDev in stash_type, X's shape with the
// normalized axes (axis and after) kept as 1.
void layer_normalization(ShapeContext& c) {
  same_as_input(c);
  const DType stats = dtype_from_onnx(static_cast<int32_t>(c.int_attribute("stash_type").value_or(1)));
  const SymbolicShape* x = c.shape(0);
  std::optional<SymbolicShape> reduced;
  if (x) {
    if (const auto axis = axis_index(c.int_attribute("axis").value_or(-1), x->size())) {
      reduced = *x;
      std::fill(reduced->begin() + static_cast<std::ptrdiff_t>(*axis), reduced->end(), known(1));
    }
  }
  c.set(1, stats, reduced);
  c.set(2, stats, reduced);
}

// RMSNormalization (X, scale): Y has X's shape and scale's element type.
void rms_normalization(ShapeContext& c) {
  c.set(0, c.dtype(1), c.shape(0) ? std::optional(*c.shape(0)) : std::nullopt);
}

// onnxruntime's SimplifiedLayerNormalization (its RMSNorm, default domain): Y like X; the
// inverse standard deviation in float (double for double X), shape not inferred.
void simplified_layer_normalization(ShapeContext& c) {
  same_as_input(c);
  c.set(1, c.dtype(0) == DType::kFloat64 ? DType::kFloat64 : DType::kFloat32);
}

const ShapeRuleRegistration kNormalizationShapes{{
    {"BatchNormalization", batch_normalization},
    {"LayerNormalization", layer_normalization},
    {"GroupNormalization", same_as_input},
    {"InstanceNormalization", same_as_input},
    {"LpNormalization", same_as_input},
    {"MeanVarianceNormalization", same_as_input},
    {"RMSNormalization", rms_normalization},
    {"SimplifiedLayerNormalization", simplified_layer_normalization},
}};

}  // namespace
}  // namespace onnxtrain::ir
