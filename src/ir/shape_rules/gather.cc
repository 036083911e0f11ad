// Shapes of the indexing ops (src/ops/cpu/gather.cc).
#include "ir/shape_rules.h"

namespace onnxtrain::ir {
namespace {

// Gather: data's axes before `axis`, then the indices' axes, then data's after it.
void gather(ShapeContext& c) {
  const SymbolicShape* data = c.shape(0);
  const SymbolicShape* indices = c.shape(1);
  if (!data || !indices) return c.set(0, c.dtype(0));
  const auto axis = axis_index(c.int_attribute("axis").value_or(0), data->size());
  if (!axis) return c.set(0, c.dtype(0));
  SymbolicShape out(data->begin(), data->begin() + *axis);
  out.insert(out.end(), indices->begin(), indices->end());
  out.insert(out.end(), data->begin() + *axis + 1, data->end());
  c.set(0, c.dtype(0), out);
}

// GatherElements: the indices' shape.
void gather_elements(ShapeContext& c) {
  c.set(0, c.dtype(0), c.shape(1) ? std::optional(*c.shape(1)) : std::nullopt);
}

// GatherND (data [b..., r...], indices [b..., q..., k]): indices' leading axes, then data's
// axes past batch_dims + k.
void gather_nd(ShapeContext& c) {
  const SymbolicShape* data = c.shape(0);
  const SymbolicShape* indices = c.shape(1);
  const auto batch = static_cast<size_t>(std::max<int64_t>(0, c.int_attribute("batch_dims").value_or(0)));
  if (!data || !indices || indices->empty() || !indices->back().value) return c.set(0, c.dtype(0));
  const auto k = static_cast<size_t>(*indices->back().value);
  if (batch + k > data->size()) return c.set(0, c.dtype(0));
  SymbolicShape out(indices->begin(), indices->end() - 1);
  out.insert(out.end(), data->begin() + batch + k, data->end());
  c.set(0, c.dtype(0), out);
}

// NonZero: [rank, number of non-zeros].
void non_zero(ShapeContext& c) {
  const SymbolicShape* x = c.shape(0);
  c.set(0, DType::kInt64,
        x ? std::optional(SymbolicShape{known(static_cast<int64_t>(x->size())), Dim{}}) : std::nullopt);
}

// OneHot (indices, depth, values): the values' element type; a new axis of size depth.
void one_hot(ShapeContext& c) {
  const SymbolicShape* indices = c.shape(0);
  if (!indices) return c.set(0, c.dtype(2));
  const auto axis = axis_index(c.int_attribute("axis").value_or(-1), indices->size() + 1);
  if (!axis) return c.set(0, c.dtype(2));
  Dim depth;
  if (const Tensor* d = c.constant(1); d && d->numel() == 1 && (is_integer(d->dtype()) || is_floating(d->dtype()))) {
    depth = known(static_cast<int64_t>(d->item_as_double()));
  }
  SymbolicShape out = *indices;
  out.insert(out.begin() + static_cast<std::ptrdiff_t>(*axis), depth);
  c.set(0, c.dtype(2), out);
}

// Compress: 1-D without an axis; with one, that axis' size is how many conditions hold.
void compress(ShapeContext& c) {
  const SymbolicShape* x = c.shape(0);
  const auto axis_attribute = c.int_attribute("axis");
  if (!axis_attribute) return c.set(0, c.dtype(0), SymbolicShape{Dim{}});
  if (!x) return c.set(0, c.dtype(0));
  const auto axis = axis_index(*axis_attribute, x->size());
  if (!axis) return c.set(0, c.dtype(0));
  SymbolicShape out = *x;
  out[*axis] = Dim{};
  c.set(0, c.dtype(0), out);
}

const ShapeRuleRegistration kGatherShapes{{
    {"Gather", gather},
    {"GatherElements", gather_elements},
    {"GatherND", gather_nd},
    {"Scatter", same_as_input},
    {"ScatterElements", same_as_input},
    {"ScatterND", same_as_input},
    {"NonZero", non_zero},
    {"OneHot", one_hot},
    {"Compress", compress},
}};

}  // namespace
}  // namespace onnxtrain::ir
