// Shapes of the ops that move data without computing (src/ops/cpu/shape.cc).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>

#include "ir/shape_rules.h"

namespace onnxtrain::ir {
namespace {

std::optional<SymbolicShape> known_dims(const std::optional<std::vector<int64_t>>& sizes) {
  if (!sizes) return std::nullopt;
  SymbolicShape out;
  for (int64_t d : *sizes) out.push_back(known(d));
  return out;
}

void reshape(ShapeContext& c) {
  const SymbolicShape* x = c.shape(0);
  const auto target = c.ints(1);
  if (!target) {
    // The rank is the target's length, when that is known.
    const SymbolicShape* t = c.shape(1);
    if (t && t->size() == 1 && (*t)[0].value) return c.set(0, c.dtype(0), unknown_dims(*(*t)[0].value));
    return c.set(0, c.dtype(0));
  }
  const bool allow_zero = c.int_attribute("allowzero").value_or(0);
  SymbolicShape out;
  std::optional<size_t> inferred;
  for (size_t i = 0; i < target->size(); ++i) {
    const int64_t d = (*target)[i];
    if (d == 0 && !allow_zero) {
      out.push_back(x && i < x->size() ? (*x)[i] : Dim{});
    } else if (d == -1) {
      inferred = i;
      out.push_back(Dim{});
    } else {
      out.push_back(known(d));
    }
  }
  if (inferred && x) {
    const auto total = product(*x, 0, x->size());
    int64_t rest = 1;
    bool all_known = true;
    for (size_t i = 0; i < out.size(); ++i) {
      if (i == *inferred) continue;
      if (out[i].value)
        rest *= *out[i].value;
      else
        all_known = false;
    }
    if (total && all_known && rest != 0) out[*inferred] = known(*total / rest);
  }
  c.set(0, c.dtype(0), out);
}

void flatten(ShapeContext& c) {
  const SymbolicShape* x = c.shape(0);
  if (!x) return c.set(0, c.dtype(0), unknown_dims(2));
  // axis in [-rank, rank]: a negative one counts from the end, as for the other ops.
  const int64_t rank = static_cast<int64_t>(x->size());
  int64_t given = c.int_attribute("axis").value_or(1);
  if (given < 0) given += rank;
  if (given < 0 || given > rank) return c.set(0, c.dtype(0), unknown_dims(2));
  const std::optional<size_t> axis = static_cast<size_t>(given);
  const auto outer = product(*x, 0, *axis);
  const auto inner = product(*x, *axis, x->size());
  const Dim first = outer ? known(*outer) : (*axis == 1 ? (*x)[0] : Dim{});
  const Dim second = inner ? known(*inner) : (*axis + 1 == x->size() ? x->back() : Dim{});
  c.set(0, c.dtype(0), SymbolicShape{first, second});
}

void transpose(ShapeContext& c) {
  const SymbolicShape* x = c.shape(0);
  std::vector<int64_t> perm = c.ints_attribute("perm").value_or(std::vector<int64_t>{});
  if (!x) return c.set(0, c.dtype(0), perm.empty() ? std::nullopt : std::optional(unknown_dims(perm.size())));
  if (perm.empty()) {
    for (size_t i = x->size(); i-- > 0;) perm.push_back(static_cast<int64_t>(i));
  }
  SymbolicShape out;
  for (int64_t p : perm) {
    if (p < 0 || p >= static_cast<int64_t>(x->size())) return c.set(0, c.dtype(0));
    out.push_back((*x)[static_cast<size_t>(p)]);
  }
  c.set(0, c.dtype(0), out);
}

void unsqueeze(ShapeContext& c) {
  const SymbolicShape* x = c.shape(0);
  const auto axes = c.axes(1);
  if (!x || !axes) return c.set(0, c.dtype(0));
  const size_t rank = x->size() + axes->size();
  std::vector<bool> inserted(rank, false);
  for (int64_t a : *axes) {
    const auto axis = axis_index(a, rank);
    if (!axis) return c.set(0, c.dtype(0));
    inserted[*axis] = true;
  }
  SymbolicShape out;
  size_t next = 0;
  for (size_t i = 0; i < rank; ++i) out.push_back(inserted[i] || next >= x->size() ? known(1) : (*x)[next++]);
  c.set(0, c.dtype(0), out);
}

void squeeze(ShapeContext& c) {
  const SymbolicShape* x = c.shape(0);
  if (!x) return c.set(0, c.dtype(0));
  const auto axes = c.axes(1);
  if (!axes && c.has_input(1)) return c.set(0, c.dtype(0));
  std::vector<bool> removed(x->size(), false);
  if (axes && !axes->empty()) {
    for (int64_t a : *axes) {
      const auto axis = axis_index(a, x->size());
      if (!axis) return c.set(0, c.dtype(0));
      removed[*axis] = true;
    }
  } else {
    for (size_t i = 0; i < x->size(); ++i) {
      if (!(*x)[i].value) return c.set(0, c.dtype(0));  // which dims are 1 is not known
      removed[i] = is_one((*x)[i]);
    }
  }
  SymbolicShape out;
  for (size_t i = 0; i < x->size(); ++i) {
    if (!removed[i]) out.push_back((*x)[i]);
  }
  c.set(0, c.dtype(0), out);
}

void concat(ShapeContext& c) {
  const SymbolicShape* first = nullptr;
  for (size_t i = 0; i < c.input_count() && !first; ++i) first = c.shape(i);
  if (!first) return c.set(0, c.dtype(0));
  const auto axis = axis_index(c.int_attribute("axis").value_or(0), first->size());
  if (!axis) return c.set(0, c.dtype(0));
  SymbolicShape out = *first;
  int64_t total = 0;
  bool all_known = true;
  for (size_t i = 0; i < c.input_count(); ++i) {
    const SymbolicShape* s = c.shape(i);
    if (!s || s->size() != first->size()) {
      all_known = false;
      continue;
    }
    for (size_t d = 0; d < s->size(); ++d) {
      if (d != *axis && !out[d].value && (*s)[d].value) out[d] = (*s)[d];
    }
    if ((*s)[*axis].value)
      total += *(*s)[*axis].value;
    else
      all_known = false;
  }
  out[*axis] = all_known ? known(total) : Dim{};
  c.set(0, c.dtype(0), out);
}

// Split: sizes from the attribute (before opset 13) or input 1, or num_outputs / the output
// count in equal parts (the last one smaller).
void split(ShapeContext& c) {
  const SymbolicShape* x = c.shape(0);
  const size_t n = c.output_count();
  const auto axis = x ? axis_index(c.int_attribute("axis").value_or(0), x->size()) : std::nullopt;
  auto sizes = c.ints_attribute("split");
  if (!sizes && c.has_input(1)) sizes = c.ints(1);
  for (size_t i = 0; i < n; ++i) {
    if (!x || !axis) {
      c.set(i, c.dtype(0), x ? std::optional(unknown_dims(x->size())) : std::nullopt);
      continue;
    }
    SymbolicShape out = *x;
    const Dim& d = (*x)[*axis];
    if (sizes && i < sizes->size()) {
      out[*axis] = known((*sizes)[i]);
    } else if (!sizes && !c.has_input(1) && d.value) {
      const int64_t parts = static_cast<int64_t>(n);
      const int64_t chunk = (*d.value + parts - 1) / parts;
      out[*axis] = known(std::clamp<int64_t>(*d.value - chunk * static_cast<int64_t>(i), 0, chunk));
    } else {
      out[*axis] = Dim{};
    }
    c.set(i, c.dtype(0), out);
  }
}

void slice(ShapeContext& c) {
  const SymbolicShape* x = c.shape(0);
  if (!x) return c.set(0, c.dtype(0));
  const SymbolicShape unknown = unknown_dims(x->size());
  const auto starts = c.ints(1), ends = c.ints(2);
  if (!starts || !ends || starts->size() != ends->size()) return c.set(0, c.dtype(0), unknown);
  std::vector<int64_t> axes(starts->size());
  std::iota(axes.begin(), axes.end(), 0);
  if (c.has_input(3)) {
    const auto given = c.ints(3);
    if (!given || given->size() != starts->size()) return c.set(0, c.dtype(0), unknown);
    axes = *given;
  }
  std::vector<int64_t> steps(starts->size(), 1);
  if (c.has_input(4)) {
    const auto given = c.ints(4);
    if (!given || given->size() != starts->size()) return c.set(0, c.dtype(0), unknown);
    steps = *given;
  }
  SymbolicShape out = *x;
  for (size_t k = 0; k < axes.size(); ++k) {
    const auto axis = axis_index(axes[k], x->size());
    if (!axis || steps[k] == 0) return c.set(0, c.dtype(0), unknown);
    const Dim& d = (*x)[*axis];
    if (!d.value) {
      const bool whole = (*starts)[k] == 0 && (*ends)[k] >= INT32_MAX && steps[k] == 1;
      out[*axis] = whole ? d : Dim{};
      continue;
    }
    const int64_t n = *d.value;
    auto clamp = [n](int64_t v, int64_t lo, int64_t hi) { return std::clamp(v < 0 ? v + n : v, lo, hi); };
    const int64_t s = steps[k] > 0 ? clamp((*starts)[k], 0, n) : clamp((*starts)[k], -1, n - 1);
    const int64_t e = steps[k] > 0 ? clamp((*ends)[k], 0, n) : clamp((*ends)[k], -1, n - 1);
    const int64_t len = steps[k] > 0 ? (e - s + steps[k] - 1) / steps[k] : (s - e - steps[k] - 1) / -steps[k];
    out[*axis] = known(std::max<int64_t>(0, len));
  }
  c.set(0, c.dtype(0), out);
}

void expand(ShapeContext& c) {
  const auto target = known_dims(c.ints(1));
  const SymbolicShape* x = c.shape(0);
  if (target && x) return c.set(0, c.dtype(0), broadcast({x, &*target}));
  const SymbolicShape* t = c.shape(1);
  if (x && t && t->size() == 1 && (*t)[0].value) {
    return c.set(0, c.dtype(0), unknown_dims(std::max<size_t>(x->size(), *(*t)[0].value)));
  }
  c.set(0, c.dtype(0));
}

void constant_of_shape(ShapeContext& c) {
  const Attribute* value = c.node().attribute("value");
  const DType dtype = value && value->t.defined() ? value->t.dtype() : DType::kFloat32;
  if (const auto dims = known_dims(c.ints(0))) return c.set(0, dtype, dims);
  const SymbolicShape* s = c.shape(0);
  c.set(0, dtype, s && s->size() == 1 && (*s)[0].value ? std::optional(unknown_dims(*(*s)[0].value)) : std::nullopt);
}

void shape_of(ShapeContext& c) {
  const SymbolicShape* x = c.shape(0);
  if (!x) return c.set(0, DType::kInt64, SymbolicShape{Dim{}});
  const auto rank = static_cast<int64_t>(x->size());
  auto clamp = [rank](int64_t v) { return std::clamp(v < 0 ? v + rank : v, int64_t{0}, rank); };
  const int64_t start = clamp(c.int_attribute("start").value_or(0));
  const int64_t end = clamp(c.int_attribute("end").value_or(rank));
  c.set(0, DType::kInt64, SymbolicShape{known(std::max<int64_t>(0, end - start))});
}

void size(ShapeContext& c) {
  c.set(0, DType::kInt64, SymbolicShape{});
}

// Range (start, limit, delta): max(ceil((limit - start) / delta), 0) elements.
void range(ShapeContext& c) {
  const Tensor* start = c.constant(0);
  const Tensor* limit = c.constant(1);
  const Tensor* delta = c.constant(2);
  Dim length;
  auto scalar = [](const Tensor* t) {
    return t && t->numel() == 1 && (is_integer(t->dtype()) || is_floating(t->dtype()));
  };
  if (scalar(start) && scalar(limit) && scalar(delta)) {
    const double step = delta->item_as_double();
    if (step != 0) {
      const double n = std::ceil((limit->item_as_double() - start->item_as_double()) / step);
      if (n < 9.0e18) length = known(std::max<int64_t>(0, static_cast<int64_t>(n)));
    }
  }
  c.set(0, c.dtype(0), SymbolicShape{length});
}

void tile(ShapeContext& c) {
  const SymbolicShape* x = c.shape(0);
  const auto repeats = c.ints(1);
  if (!x) return c.set(0, c.dtype(0));
  if (!repeats || repeats->size() != x->size()) return c.set(0, c.dtype(0), unknown_dims(x->size()));
  SymbolicShape out = *x;
  for (size_t i = 0; i < out.size(); ++i) {
    if ((*repeats)[i] != 1) out[i] = out[i].value ? known(*out[i].value * (*repeats)[i]) : Dim{};
  }
  c.set(0, c.dtype(0), out);
}

// Pad: pads from the attribute (before opset 11) or input 1, over input 3's axes (opset 18).
void pad(ShapeContext& c) {
  const SymbolicShape* x = c.shape(0);
  if (!x) return c.set(0, c.dtype(0));
  auto pads = c.ints_attribute("pads");
  if (!pads) pads = c.ints(1);
  std::vector<int64_t> axes(x->size());
  std::iota(axes.begin(), axes.end(), 0);
  if (c.has_input(3)) {
    const auto given = c.ints(3);
    if (!given) return c.set(0, c.dtype(0), unknown_dims(x->size()));
    axes = *given;
  }
  if (!pads || pads->size() != 2 * axes.size()) return c.set(0, c.dtype(0), unknown_dims(x->size()));
  SymbolicShape out = *x;
  for (size_t k = 0; k < axes.size(); ++k) {
    const auto axis = axis_index(axes[k], x->size());
    if (!axis) return c.set(0, c.dtype(0), unknown_dims(x->size()));
    const int64_t added = (*pads)[k] + (*pads)[k + axes.size()];
    if (added != 0) out[*axis] = out[*axis].value ? known(*out[*axis].value + added) : Dim{};
  }
  c.set(0, c.dtype(0), out);
}

void eye_like(ShapeContext& c) {
  const auto dtype = c.int_attribute("dtype");
  c.set(0, dtype ? dtype_from_onnx(static_cast<int32_t>(*dtype)) : c.dtype(0),
        c.shape(0) ? std::optional(*c.shape(0)) : std::nullopt);
}

const ShapeRuleRegistration kShapeShapes{{
    {"Reshape", reshape},
    {"Flatten", flatten},
    {"Transpose", transpose},
    {"Unsqueeze", unsqueeze},
    {"Squeeze", squeeze},
    {"Concat", concat},
    {"Split", split},
    {"Slice", slice},
    {"Expand", expand},
    {"ConstantOfShape", constant_of_shape},
    {"Shape", shape_of},
    {"Size", size},
    {"Range", range},
    {"Tile", tile},
    {"Pad", pad},
    {"EyeLike", eye_like},
    {"Trilu", same_as_input},
}};

}  // namespace
}  // namespace onnxtrain::ir
