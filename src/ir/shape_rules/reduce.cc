// Shapes of the reductions (src/ops/cpu/reduce.cc).
#include "ir/shape_rules.h"

namespace onnxtrain::ir {

SymbolicShape reduced_shape(const SymbolicShape& x, const std::vector<bool>& reduced, bool keep_dims) {
  SymbolicShape out;
  for (size_t i = 0; i < x.size(); ++i) {
    if (!reduced[i])
      out.push_back(x[i]);
    else if (keep_dims)
      out.push_back(known(1));
  }
  return out;
}

namespace {

// Axes from the attribute (ReduceSum before opset 13, the others before 18) or input 1;
// none means every axis, unless noop_with_empty_axes.
void reduce(ShapeContext& c) {
  const SymbolicShape* x = c.shape(0);
  if (!x) return c.set(0, c.dtype(0));
  const bool keep = c.int_attribute("keepdims").value_or(1);
  const auto axes = c.axes(1);
  if (!axes && c.has_input(1)) {
    return c.set(0, c.dtype(0), keep ? std::optional(unknown_dims(x->size())) : std::nullopt);
  }
  if ((!axes || axes->empty()) && c.int_attribute("noop_with_empty_axes").value_or(0)) return same_as_input(c);
  std::vector<bool> reduced(x->size(), !axes || axes->empty());
  for (int64_t a : axes.value_or(std::vector<int64_t>{})) {
    const auto axis = axis_index(a, x->size());
    if (!axis) return c.set(0, c.dtype(0));
    reduced[*axis] = true;
  }
  c.set(0, c.dtype(0), reduced_shape(*x, reduced, keep));
}

const ShapeRuleRegistration kReduceShapes{{
    {"ReduceSum", reduce},
    {"ReduceMean", reduce},
    {"ReduceMax", reduce},
    {"ReduceMin", reduce},
    {"ReduceProd", reduce},
    {"ReduceLogSumExp", reduce},
    {"ReduceLogSum", reduce},
    {"ReduceL1", reduce},
    {"ReduceL2", reduce},
    {"ReduceSumSquare", reduce},
}};

}  // namespace
}  // namespace onnxtrain::ir
