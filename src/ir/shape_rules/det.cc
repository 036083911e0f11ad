// Shape of Det (src/ops/cpu/det.cc): X [..., M, M] without its last two axes.
#include "ir/shape_rules.h"

namespace onnxtrain::ir {
namespace {

void det(ShapeContext& c) {
  const SymbolicShape* x = c.shape(0);
  if (!x || x->size() < 2) return c.set(0, c.dtype(0));
  c.set(0, c.dtype(0), SymbolicShape(x->begin(), x->end() - 2));
}

const ShapeRuleRegistration kDetShapes{{{"Det", det}}};

}  // namespace
}  // namespace onnxtrain::ir
