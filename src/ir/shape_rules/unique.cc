// Shapes of Unique (src/ops/cpu/unique.cc): how many distinct values there are is known
// only at run time; inverse_indices has one entry per element (or slice along axis).
#include "ir/shape_rules.h"

namespace onnxtrain::ir {
namespace {

void unique(ShapeContext& c) {
  const SymbolicShape* x = c.shape(0);
  const auto axis = c.int_attribute("axis");
  std::optional<SymbolicShape> y;
  Dim rows;
  if (x && axis) {
    if (const auto a = axis_index(*axis, x->size())) {
      y = *x;
      rows = (*x)[*a];
      (*y)[*a] = Dim{};
    }
  } else if (!axis) {
    y = unknown_dims(1);
    if (x) {
      if (const auto n = product(*x, 0, x->size())) rows = known(*n);
    }
  }
  c.set(0, c.dtype(0), y);
  if (c.output_count() > 1) c.set(1, DType::kInt64, unknown_dims(1));
  if (c.output_count() > 2) c.set(2, DType::kInt64, SymbolicShape{rows});
  if (c.output_count() > 3) c.set(3, DType::kInt64, unknown_dims(1));
}

const ShapeRuleRegistration kUniqueShapes{{{"Unique", unique}}};

}  // namespace
}  // namespace onnxtrain::ir
