// Shapes of the pools (src/ops/cpu/pool.cc).
#include "ir/shape_rules.h"

namespace onnxtrain::ir {
namespace {

// MaxPool, AveragePool, LpPool: the window slides over the spatial axes; MaxPool's Indices
// (int64) has the output's shape.
void pool(ShapeContext& c) {
  const SymbolicShape* x = c.shape(0);
  if (!x || x->size() < 3) return c.set(0, c.dtype(0));
  const WindowShape window{c.ints_attribute("kernel_shape").value_or(std::vector<int64_t>{}), (*x)[1], false, ""};
  const SymbolicShape out = windowed_shape(c, *x, window);
  c.set(0, c.dtype(0), out);
  c.set(1, DType::kInt64, out);
}

void global_pool(ShapeContext& c) {
  const SymbolicShape* x = c.shape(0);
  if (!x || x->size() < 2) return c.set(0, c.dtype(0));
  SymbolicShape out{(*x)[0], (*x)[1]};
  out.resize(x->size(), known(1));
  c.set(0, c.dtype(0), out);
}

const ShapeRuleRegistration kPoolShapes{{
    {"MaxPool", pool},
    {"AveragePool", pool},
    {"LpPool", pool},
    {"GlobalAveragePool", global_pool},
    {"GlobalMaxPool", global_pool},
    {"GlobalLpPool", global_pool},
}};

}  // namespace
}  // namespace onnxtrain::ir
