// Shapes of the ops that search along an axis (src/ops/cpu/topk.cc).
#include "ir/shape_rules.h"

namespace onnxtrain::ir {
namespace {

// ArgMax, ArgMin: int64 indices, the axis reduced (kept as 1 with keepdims).
void arg_reduce(ShapeContext& c) {
  const SymbolicShape* x = c.shape(0);
  if (!x) return c.set(0, DType::kInt64);
  const auto axis = axis_index(c.int_attribute("axis").value_or(0), x->size());
  if (!axis) return c.set(0, DType::kInt64);
  std::vector<bool> reduced(x->size(), false);
  reduced[*axis] = true;
  c.set(0, DType::kInt64, reduced_shape(*x, reduced, c.int_attribute("keepdims").value_or(1)));
}

// TopK (X, K) => (Values, Indices): K along the axis (the attribute k before opset 10).
void top_k(ShapeContext& c) {
  const SymbolicShape* x = c.shape(0);
  if (!x) {
    c.set(0, c.dtype(0));
    return c.set(1, DType::kInt64);
  }
  SymbolicShape out = *x;
  if (const auto axis = axis_index(c.int_attribute("axis").value_or(-1), x->size())) {
    auto k = c.int_attribute("k");
    if (const auto given = c.ints(1); given && given->size() == 1) k = (*given)[0];
    out[*axis] = k ? known(*k) : Dim{};
  } else {
    out = unknown_dims(x->size());
  }
  c.set(0, c.dtype(0), out);
  c.set(1, DType::kInt64, out);
}

const ShapeRuleRegistration kTopKShapes{{
    {"ArgMax", arg_reduce},
    {"ArgMin", arg_reduce},
    {"TopK", top_k},
    {"CumSum", same_as_input},
}};

}  // namespace
}  // namespace onnxtrain::ir
