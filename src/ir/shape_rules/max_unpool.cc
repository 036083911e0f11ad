// Shape of MaxUnpool (src/ops/cpu/max_unpool.cc): constant output_shape, or per spatial
// axis (D - 1) * stride - pad_begin - pad_end + kernel.
#include "ir/shape_rules.h"

namespace onnxtrain::ir {
namespace {

void max_unpool(ShapeContext& c) {
  if (c.has_input(2)) {
    if (const auto out = c.ints(2)) {
      SymbolicShape shape;
      for (int64_t d : *out) shape.push_back(known(d));
      return c.set(0, c.dtype(0), shape);
    }
  }
  const SymbolicShape* x = c.shape(0);
  const auto kernel = c.ints_attribute("kernel_shape");
  if (!x || !kernel || x->size() != kernel->size() + 2)
    return c.set(0, c.dtype(0), x ? std::optional(unknown_dims(x->size())) : std::nullopt);
  if (c.has_input(2)) return c.set(0, c.dtype(0), unknown_dims(x->size()));
  const size_t r = kernel->size();
  const auto strides = c.ints_attribute("strides").value_or(std::vector<int64_t>(r, 1));
  const auto pads = c.ints_attribute("pads").value_or(std::vector<int64_t>(2 * r, 0));
  SymbolicShape out{(*x)[0], (*x)[1]};
  for (size_t a = 0; a < r; ++a) {
    const Dim& d = (*x)[a + 2];
    const bool ok = d.value && strides.size() == r && pads.size() == 2 * r;
    out.push_back(ok ? known((*d.value - 1) * strides[a] - pads[a] - pads[a + r] + (*kernel)[a]) : Dim{});
  }
  c.set(0, c.dtype(0), out);
}

const ShapeRuleRegistration kMaxUnpoolShapes{{{"MaxUnpool", max_unpool}}};

}  // namespace
}  // namespace onnxtrain::ir
