// Shapes of GridSample and AffineGrid (src/ops/cpu/grid_sample.cc).
#include "ir/shape_rules.h"

namespace onnxtrain::ir {
namespace {

// Y [N, C, O1..Or] from X [N, C, D1..Dr] and grid [N, O1..Or, r].
void grid_sample(ShapeContext& c) {
  const SymbolicShape* x = c.shape(0);
  const SymbolicShape* grid = c.shape(1);
  if (!grid || grid->size() < 2) {
    if (x) return c.set(0, c.dtype(0), unknown_dims(x->size()));
    return c.set(0, c.dtype(0));
  }
  SymbolicShape out{(*grid)[0], x && x->size() >= 2 ? (*x)[1] : Dim{}};
  if (x && !x->empty() && (*x)[0].value) out[0] = (*x)[0];
  out.insert(out.end(), grid->begin() + 1, grid->end() - 1);
  c.set(0, c.dtype(0), out);
}

// grid [N, D1..Dr, r] from theta [N, r, r+1] and size (N, C, D1..Dr).
void affine_grid(ShapeContext& c) {
  const SymbolicShape* theta = c.shape(0);
  const Dim n = theta && theta->size() == 3 ? (*theta)[0] : Dim{};
  if (const auto size = c.ints(1); size && (size->size() == 4 || size->size() == 5)) {
    SymbolicShape out{n};
    for (size_t i = 2; i < size->size(); ++i) out.push_back(known((*size)[i]));
    out.push_back(known(static_cast<int64_t>(size->size()) - 2));
    return c.set(0, c.dtype(0), out);
  }
  if (theta && theta->size() == 3 && (*theta)[1].value) {
    const int64_t r = *(*theta)[1].value;
    if (r == 2 || r == 3) {
      SymbolicShape out = unknown_dims(static_cast<size_t>(r) + 2);
      out.front() = n;
      out.back() = known(r);
      return c.set(0, c.dtype(0), out);
    }
  }
  if (const SymbolicShape* size = c.shape(1); size && size->size() == 1 && (*size)[0].value) {
    const int64_t values = *(*size)[0].value;
    if (values == 4 || values == 5) {
      SymbolicShape out = unknown_dims(static_cast<size_t>(values) - 1);
      out.front() = n;
      out.back() = known(values - 2);
      return c.set(0, c.dtype(0), out);
    }
  }
  c.set(0, c.dtype(0));
}

const ShapeRuleRegistration kGridSampleShapes{{{"GridSample", grid_sample}, {"AffineGrid", affine_grid}}};

}  // namespace
}  // namespace onnxtrain::ir
