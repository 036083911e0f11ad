// Shape of DeformConv (src/ops/cpu/deform_conv.cc): [N, M, oH, oW], the output's spatial
// sizes being those of the offsets.
#include "ir/shape_rules.h"

namespace onnxtrain::ir {
namespace {

void deform_conv(ShapeContext& c) {
  const SymbolicShape* x = c.shape(0);
  const SymbolicShape* w = c.shape(1);
  const SymbolicShape* offset = c.shape(2);
  const size_t rank = x ? x->size() : w ? w->size() : offset ? offset->size() : 0;
  if (rank < 3) return c.set(0, c.dtype(0));
  SymbolicShape out = unknown_dims(rank);
  if (x && x->size() == rank) out[0] = (*x)[0];
  if (w && w->size() == rank) out[1] = (*w)[0];
  if (offset && offset->size() == rank) std::copy(offset->begin() + 2, offset->end(), out.begin() + 2);
  c.set(0, c.dtype(0), out);
}

const ShapeRuleRegistration kDeformConvShapes{{{"DeformConv", deform_conv}}};

}  // namespace
}  // namespace onnxtrain::ir
