// Shapes of Cast and CastLike (src/ops/cpu/cast.cc).
#include "ir/shape_rules.h"

namespace onnxtrain::ir {
namespace {

void cast(ShapeContext& c) {
  const DType to = dtype_from_onnx(static_cast<int32_t>(c.int_attribute("to").value_or(0)));
  c.set(0, to, c.shape(0) ? std::optional(*c.shape(0)) : std::nullopt);
}

void cast_like(ShapeContext& c) {
  c.set(0, c.dtype(1), c.shape(0) ? std::optional(*c.shape(0)) : std::nullopt);
}

const ShapeRuleRegistration kCastShapes{{{"Cast", cast}, {"CastLike", cast_like}}};

}  // namespace
}  // namespace onnxtrain::ir
