// Shape of Col2Im (src/ops/cpu/col2im.cc): [N, C, image_shape...] with C the input's
// axis 1 over prod(block_shape).
#include "ir/shape_rules.h"

namespace onnxtrain::ir {
namespace {

void col2im(ShapeContext& c) {
  const SymbolicShape* x = c.shape(0);
  const auto image = c.ints(1);
  const auto block = c.ints(2);
  std::optional<size_t> spatial;
  if (image) spatial = image->size();
  if (!spatial) {
    if (const SymbolicShape* s = c.shape(1); s && s->size() == 1 && (*s)[0].value) {
      spatial = static_cast<size_t>(*(*s)[0].value);
    }
  }
  if (!spatial) return c.set(0, c.dtype(0));
  SymbolicShape out = unknown_dims(*spatial + 2);
  if (x && x->size() == 3) {
    out[0] = (*x)[0];
    if (block && (*x)[1].value) {
      int64_t size = 1;
      for (int64_t b : *block) size *= b;
      if (size > 0) out[1] = known(*(*x)[1].value / size);
    }
  }
  if (image) {
    for (size_t a = 0; a < image->size(); ++a) out[a + 2] = known((*image)[a]);
  }
  c.set(0, c.dtype(0), out);
}

const ShapeRuleRegistration kCol2ImShapes{{{"Col2Im", col2im}}};

}  // namespace
}  // namespace onnxtrain::ir
