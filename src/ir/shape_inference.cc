#include "ir/shape_inference.h"

#include <algorithm>
#include <functional>
#include <numeric>
#include <unordered_map>

namespace onnxtrain::ir {
namespace {

using Shape = std::vector<Dim>;

Dim known(int64_t value) { return Dim{value, {}}; }
bool same(const Dim& a, const Dim& b) {
  return (a.value && b.value && *a.value == *b.value) || (!a.param.empty() && a.param == b.param);
}
bool is_one(const Dim& d) { return d.value && *d.value == 1; }

// One node's view of the types known so far.
class Context {
 public:
  Context(const Node& node, const std::map<std::string, ValueType>& types,
          const std::unordered_map<std::string, const Tensor*>& constants)
      : node_(node), types_(types), constants_(constants), outputs_(node.outputs.size()) {}

  const Node& node() const { return node_; }
  size_t input_count() const { return node_.inputs.size(); }
  const ValueType* input(size_t i) const {
    if (i >= node_.inputs.size() || node_.inputs[i].empty()) return nullptr;
    auto it = types_.find(node_.inputs[i]);
    return it == types_.end() ? nullptr : &it->second;
  }
  DType dtype(size_t i) const { return input(i) ? input(i)->dtype : DType::kUndefined; }
  const Shape* shape(size_t i) const {
    const ValueType* t = input(i);
    return t && t->shape ? &*t->shape : nullptr;
  }
  // The value of input i when it is a constant (initializer or Constant node).
  std::optional<std::vector<int64_t>> ints(size_t i) const {
    if (i >= node_.inputs.size()) return std::nullopt;
    auto it = constants_.find(node_.inputs[i]);
    if (it == constants_.end()) return std::nullopt;
    return it->second->to_int64_vector();
  }
  std::optional<int64_t> int_attribute(std::string_view name) const {
    const Attribute* a = node_.attribute(name);
    return a && a->type == AttributeType::kInt ? std::optional(a->i) : std::nullopt;
  }
  std::optional<std::vector<int64_t>> ints_attribute(std::string_view name) const {
    const Attribute* a = node_.attribute(name);
    return a && a->type == AttributeType::kInts ? std::optional(a->ints) : std::nullopt;
  }
  // Axes from the attribute (older opsets) or from a constant input (newer ones).
  std::optional<std::vector<int64_t>> axes(size_t input_index) const {
    if (auto a = ints_attribute("axes")) return a;
    return ints(input_index);
  }

  void set(size_t i, DType dtype, std::optional<Shape> shape = std::nullopt) {
    if (i < outputs_.size()) outputs_[i] = ValueType{dtype, std::move(shape)};
  }
  std::vector<ValueType>& outputs() { return outputs_; }

 private:
  const Node& node_;
  const std::map<std::string, ValueType>& types_;
  const std::unordered_map<std::string, const Tensor*>& constants_;
  std::vector<ValueType> outputs_;
};

std::optional<int64_t> normalize_axis(int64_t axis, size_t rank) {
  const auto r = static_cast<int64_t>(rank);
  if (axis < -r || axis >= r) return std::nullopt;
  return axis < 0 ? axis + r : axis;
}

std::optional<Shape> broadcast(const std::vector<const Shape*>& shapes) {
  size_t rank = 0;
  for (const Shape* s : shapes) {
    if (s == nullptr) return std::nullopt;
    rank = std::max(rank, s->size());
  }
  Shape out(rank, known(1));
  for (const Shape* s : shapes) {
    const size_t pad = rank - s->size();
    for (size_t i = 0; i < s->size(); ++i) {
      Dim& o = out[pad + i];
      const Dim& d = (*s)[i];
      if (is_one(d) || same(o, d)) continue;
      if (is_one(o)) o = d;
      else if (d.value && !o.value) o = d;  // a fixed size wins over a name it must equal
      else if (!(o.value && !d.value)) o = Dim{};
    }
  }
  return out;
}

std::optional<int64_t> product(const Shape& s, size_t begin, size_t end) {
  int64_t n = 1;
  for (size_t i = begin; i < end; ++i) {
    if (!s[i].value) return std::nullopt;
    n *= *s[i].value;
  }
  return n;
}

// Input i's shape, when known.
std::optional<Shape> input_shape(const Context& c, size_t i) {
  return c.shape(i) ? std::optional(*c.shape(i)) : std::nullopt;
}

void same_as_input_to(Context& c, size_t output) {
  c.set(output, c.dtype(0), c.shape(0) ? std::optional(*c.shape(0)) : std::nullopt);
}

void same_as_input(Context& c) { same_as_input_to(c, 0); }

void elementwise(Context& c, DType dtype, size_t first = 0) {
  std::vector<const Shape*> shapes;
  for (size_t i = first; i < c.input_count(); ++i) shapes.push_back(c.shape(i));
  c.set(0, dtype, broadcast(shapes));
}

// The shape of MatMul(a, b) (numpy's rules), when both shapes are known.
std::optional<Shape> matmul_shape(const Shape* a, const Shape* b) {
  if (!a || !b || a->empty() || b->empty()) return std::nullopt;
  Shape sa = *a, sb = *b;
  const bool a_vector = sa.size() == 1, b_vector = sb.size() == 1;
  if (a_vector) sa.insert(sa.begin(), known(1));
  if (b_vector) sb.push_back(known(1));
  Shape batch_a(sa.begin(), sa.end() - 2), batch_b(sb.begin(), sb.end() - 2);
  auto batch = broadcast({&batch_a, &batch_b});
  Shape out = *batch;
  if (!a_vector) out.push_back(sa[sa.size() - 2]);
  if (!b_vector) out.push_back(sb.back());
  return out;
}

void matmul(Context& c) {
  c.set(0, c.dtype(0), matmul_shape(c.shape(0), c.shape(1)));
}

void gemm(Context& c) {
  const Shape* a = c.shape(0);
  const Shape* b = c.shape(1);
  if (!a || !b || a->size() != 2 || b->size() != 2) return c.set(0, c.dtype(0));
  const bool ta = c.int_attribute("transA").value_or(0), tb = c.int_attribute("transB").value_or(0);
  c.set(0, c.dtype(0), Shape{(*a)[ta ? 1 : 0], (*b)[tb ? 0 : 1]});
}

// Conv, ConvTranspose and pooling: spatial sizes from kernel, strides, pads, dilations.
void windowed(Context& c, bool transposed) {
  const Shape* x = c.shape(0);
  const std::string& op = c.node().op_type;
  if (!x || x->size() < 3) return c.set(0, c.dtype(0));
  const size_t spatial = x->size() - 2;
  Dim channels = (*x)[1];
  std::vector<int64_t> kernel = c.ints_attribute("kernel_shape").value_or(std::vector<int64_t>{});
  const bool has_weights = op == "Conv" || op == "ConvTranspose" || op == "ConvInteger" || op == "QLinearConv";
  const Shape* w = has_weights ? c.shape(op == "QLinearConv" ? 3 : 1) : nullptr;
  if (w && w->size() == x->size()) {
    if (kernel.empty()) {
      for (size_t i = 2; i < w->size(); ++i) kernel.push_back((*w)[i].value.value_or(-1));
    }
    const int64_t group = c.int_attribute("group").value_or(1);
    channels = transposed ? ((*w)[1].value ? known(*(*w)[1].value * group) : Dim{}) : (*w)[0];
  }
  Shape out{(*x)[0], channels};
  const auto strides = c.ints_attribute("strides").value_or(std::vector<int64_t>(spatial, 1));
  const auto dilations = c.ints_attribute("dilations").value_or(std::vector<int64_t>(spatial, 1));
  const auto pads = c.ints_attribute("pads").value_or(std::vector<int64_t>(2 * spatial, 0));
  const auto output_padding = c.ints_attribute("output_padding").value_or(std::vector<int64_t>(spatial, 0));
  const std::string auto_pad = c.node().attribute("auto_pad") ? c.node().attribute("auto_pad")->s : "NOTSET";
  const bool ceil_mode = c.int_attribute("ceil_mode").value_or(0);
  for (size_t i = 0; i < spatial; ++i) {
    const Dim& in = (*x)[i + 2];
    if (!in.value || kernel.size() != spatial || kernel[i] < 0 || strides.size() != spatial) {
      out.push_back(Dim{});
      continue;
    }
    const int64_t effective = (kernel[i] - 1) * (i < dilations.size() ? dilations[i] : 1) + 1;
    if (transposed) {
      out.push_back(known(strides[i] * (*in.value - 1) + output_padding[i] + effective - pads[i] - pads[i + spatial]));
    } else if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
      out.push_back(known((*in.value + strides[i] - 1) / strides[i]));
    } else {
      const int64_t padded = *in.value + (auto_pad == "VALID" ? 0 : pads[i] + pads[i + spatial]) - effective;
      out.push_back(known((ceil_mode ? (padded + strides[i] - 1) : padded) / strides[i] + 1));
    }
  }
  c.set(0, c.dtype(0), out);
  if (op == "MaxPool") c.set(1, DType::kInt64, out);
}

void global_pool(Context& c) {
  const Shape* x = c.shape(0);
  if (!x || x->size() < 2) return c.set(0, c.dtype(0));
  Shape out{(*x)[0], (*x)[1]};
  out.resize(x->size(), known(1));
  c.set(0, c.dtype(0), out);
}

void reshape(Context& c) {
  const Shape* x = c.shape(0);
  const auto target = c.ints(1);
  if (!target) return c.set(0, c.dtype(0));
  const bool allow_zero = c.int_attribute("allowzero").value_or(0);
  Shape out;
  std::optional<size_t> infer;
  for (size_t i = 0; i < target->size(); ++i) {
    const int64_t d = (*target)[i];
    if (d == 0 && !allow_zero) out.push_back(x && i < x->size() ? (*x)[i] : Dim{});
    else if (d == -1) {
      infer = i;
      out.push_back(Dim{});
    } else out.push_back(known(d));
  }
  if (infer && x) {
    const auto total = product(*x, 0, x->size());
    int64_t rest = 1;
    bool all_known = true;
    for (size_t i = 0; i < out.size(); ++i) {
      if (i == *infer) continue;
      if (out[i].value) rest *= *out[i].value;
      else all_known = false;
    }
    if (total && all_known && rest != 0) out[*infer] = known(*total / rest);
    // [batch, seq, 768] -> [batch, seq, -1, 64]: the unknown part is not a single named dim.
  }
  c.set(0, c.dtype(0), out);
}

void flatten(Context& c) {
  const Shape* x = c.shape(0);
  if (!x) return c.set(0, c.dtype(0));
  const auto axis = normalize_axis(c.int_attribute("axis").value_or(1), x->size() + 1);
  if (!axis) return c.set(0, c.dtype(0));
  auto outer = product(*x, 0, static_cast<size_t>(*axis));
  auto inner = product(*x, static_cast<size_t>(*axis), x->size());
  Dim first = outer ? known(*outer) : (*axis == 1 ? (*x)[0] : Dim{});
  c.set(0, c.dtype(0), Shape{first, inner ? known(*inner) : Dim{}});
}

void transpose(Context& c) {
  const Shape* x = c.shape(0);
  if (!x) return c.set(0, c.dtype(0));
  std::vector<int64_t> perm = c.ints_attribute("perm").value_or(std::vector<int64_t>{});
  if (perm.empty()) {
    for (size_t i = x->size(); i-- > 0;) perm.push_back(static_cast<int64_t>(i));
  }
  Shape out;
  for (int64_t p : perm) {
    if (p < 0 || p >= static_cast<int64_t>(x->size())) return c.set(0, c.dtype(0));
    out.push_back((*x)[static_cast<size_t>(p)]);
  }
  c.set(0, c.dtype(0), out);
}

void unsqueeze(Context& c) {
  const Shape* x = c.shape(0);
  const auto axes = c.axes(1);
  if (!x || !axes) return c.set(0, c.dtype(0));
  const size_t rank = x->size() + axes->size();
  std::vector<bool> inserted(rank, false);
  for (int64_t a : *axes) {
    auto axis = normalize_axis(a, rank);
    if (!axis) return c.set(0, c.dtype(0));
    inserted[static_cast<size_t>(*axis)] = true;
  }
  Shape out;
  size_t next = 0;
  for (size_t i = 0; i < rank; ++i) out.push_back(inserted[i] ? known(1) : (*x)[next++]);
  c.set(0, c.dtype(0), out);
}

void squeeze(Context& c) {
  const Shape* x = c.shape(0);
  if (!x) return c.set(0, c.dtype(0));
  const auto axes = c.axes(1);
  if (!axes && c.input_count() > 1 && !c.node().inputs[1].empty()) return c.set(0, c.dtype(0));
  std::vector<bool> removed(x->size(), false);
  if (axes) {
    for (int64_t a : *axes) {
      auto axis = normalize_axis(a, x->size());
      if (!axis) return c.set(0, c.dtype(0));
      removed[static_cast<size_t>(*axis)] = true;
    }
  } else {
    for (size_t i = 0; i < x->size(); ++i) {
      if (!(*x)[i].value) return c.set(0, c.dtype(0));  // which dims are 1 is not known
      removed[i] = is_one((*x)[i]);
    }
  }
  Shape out;
  for (size_t i = 0; i < x->size(); ++i) {
    if (!removed[i]) out.push_back((*x)[i]);
  }
  c.set(0, c.dtype(0), out);
}

void concat(Context& c) {
  const Shape* first = c.shape(0);
  if (!first) return c.set(0, c.dtype(0));
  const auto axis = normalize_axis(c.int_attribute("axis").value_or(0), first->size());
  if (!axis) return c.set(0, c.dtype(0));
  Shape out = *first;
  int64_t total = 0;
  bool all_known = true;
  for (size_t i = 0; i < c.input_count(); ++i) {
    const Shape* s = c.shape(i);
    if (!s || s->size() != first->size()) return c.set(0, c.dtype(0));
    const Dim& d = (*s)[static_cast<size_t>(*axis)];
    if (d.value) total += *d.value;
    else all_known = false;
  }
  out[static_cast<size_t>(*axis)] = all_known ? known(total) : Dim{};
  c.set(0, c.dtype(0), out);
}

void gather(Context& c) {
  const Shape* data = c.shape(0);
  const Shape* indices = c.shape(1);
  if (!data || !indices) return c.set(0, c.dtype(0));
  const auto axis = normalize_axis(c.int_attribute("axis").value_or(0), data->size());
  if (!axis) return c.set(0, c.dtype(0));
  Shape out(data->begin(), data->begin() + *axis);
  out.insert(out.end(), indices->begin(), indices->end());
  out.insert(out.end(), data->begin() + *axis + 1, data->end());
  c.set(0, c.dtype(0), out);
}

void reduce(Context& c) {
  const Shape* x = c.shape(0);
  const DType dtype = c.node().op_type.starts_with("Arg") ? DType::kInt64 : c.dtype(0);
  if (!x) return c.set(0, dtype);
  const bool keep = c.int_attribute("keepdims").value_or(1);
  std::optional<std::vector<int64_t>> axes;
  if (c.node().op_type.starts_with("Arg")) axes = std::vector<int64_t>{c.int_attribute("axis").value_or(0)};
  else axes = c.axes(1);
  const bool has_axes_input = c.input_count() > 1 && !c.node().inputs[1].empty();
  if (!axes && has_axes_input) return c.set(0, dtype);
  std::vector<bool> reduced(x->size(), !axes || axes->empty());
  if (axes && axes->empty() && c.int_attribute("noop_with_empty_axes").value_or(0)) return same_as_input(c);
  if (axes) {
    for (int64_t a : *axes) {
      auto axis = normalize_axis(a, x->size());
      if (!axis) return c.set(0, dtype);
      reduced[static_cast<size_t>(*axis)] = true;
    }
  }
  Shape out;
  for (size_t i = 0; i < x->size(); ++i) {
    if (!reduced[i]) out.push_back((*x)[i]);
    else if (keep) out.push_back(known(1));
  }
  c.set(0, dtype, out);
}

void split(Context& c) {
  const Shape* x = c.shape(0);
  const size_t n = c.node().outputs.size();
  if (!x) {
    for (size_t i = 0; i < n; ++i) c.set(i, c.dtype(0));
    return;
  }
  const auto axis = normalize_axis(c.int_attribute("axis").value_or(0), x->size());
  auto sizes = c.ints_attribute("split");
  if (!sizes) sizes = c.ints(1);
  for (size_t i = 0; i < n; ++i) {
    Shape out = *x;
    if (!axis) {
      c.set(i, c.dtype(0));
      continue;
    }
    const Dim& d = (*x)[static_cast<size_t>(*axis)];
    if (sizes && i < sizes->size()) out[static_cast<size_t>(*axis)] = known((*sizes)[i]);
    else if (!sizes && d.value) {
      const int64_t chunk = (*d.value + static_cast<int64_t>(n) - 1) / static_cast<int64_t>(n);
      out[static_cast<size_t>(*axis)] = known(std::min(chunk, *d.value - chunk * static_cast<int64_t>(i)));
    } else out[static_cast<size_t>(*axis)] = Dim{};
    c.set(i, c.dtype(0), out);
  }
}

void slice(Context& c) {
  const Shape* x = c.shape(0);
  const auto starts = c.ints(1), ends = c.ints(2);
  if (!x || !starts || !ends) return c.set(0, c.dtype(0), x ? std::optional(Shape(x->size())) : std::nullopt);
  std::vector<int64_t> axes(starts->size());
  std::iota(axes.begin(), axes.end(), 0);
  if (c.input_count() > 3 && !c.node().inputs[3].empty()) {
    auto given = c.ints(3);
    if (!given) return c.set(0, c.dtype(0), Shape(x->size()));
    axes = *given;
  }
  std::vector<int64_t> steps(starts->size(), 1);
  if (c.input_count() > 4 && !c.node().inputs[4].empty()) {
    auto given = c.ints(4);
    if (!given) return c.set(0, c.dtype(0), Shape(x->size()));
    steps = *given;
  }
  Shape out = *x;
  for (size_t k = 0; k < axes.size() && k < ends->size() && k < steps.size(); ++k) {
    const auto axis = normalize_axis(axes[k], x->size());
    if (!axis || steps[k] == 0) return c.set(0, c.dtype(0), Shape(x->size()));
    const Dim& d = (*x)[static_cast<size_t>(*axis)];
    if (!d.value) {
      const bool whole = (*starts)[k] == 0 && (*ends)[k] >= INT32_MAX && steps[k] == 1;
      out[static_cast<size_t>(*axis)] = whole ? d : Dim{};
      continue;
    }
    const int64_t n = *d.value;
    auto clamp = [&](int64_t v, int64_t lo, int64_t hi) { return std::clamp(v < 0 ? v + n : v, lo, hi); };
    const int64_t s = steps[k] > 0 ? clamp((*starts)[k], 0, n) : clamp((*starts)[k], -1, n - 1);
    const int64_t e = steps[k] > 0 ? clamp((*ends)[k], 0, n) : clamp((*ends)[k], -1, n - 1);
    const int64_t len = steps[k] > 0 ? (e - s + steps[k] - 1) / steps[k] : (s - e - steps[k] - 1) / -steps[k];
    out[static_cast<size_t>(*axis)] = known(std::max<int64_t>(0, len));
  }
  c.set(0, c.dtype(0), out);
}

void expand(Context& c) {
  const auto target = c.ints(1);
  if (!target || !c.shape(0)) return c.set(0, c.dtype(0));
  Shape t;
  for (int64_t d : *target) t.push_back(known(d));
  c.set(0, c.dtype(0), broadcast({c.shape(0), &t}));
}

void constant_of_shape(Context& c) {
  const Attribute* value = c.node().attribute("value");
  const DType dtype = value && value->t.defined() ? value->t.dtype() : DType::kFloat32;
  const auto dims = c.ints(0);
  if (!dims) return c.set(0, dtype);
  Shape out;
  for (int64_t d : *dims) out.push_back(known(d));
  c.set(0, dtype, out);
}

void shape_of(Context& c) {
  const Shape* x = c.shape(0);
  if (!x) return c.set(0, DType::kInt64, Shape{Dim{}});
  const auto rank = static_cast<int64_t>(x->size());
  auto clamp = [&](int64_t v) { return std::clamp(v < 0 ? v + rank : v, int64_t{0}, rank); };
  const int64_t start = clamp(c.int_attribute("start").value_or(0));
  const int64_t end = clamp(c.int_attribute("end").value_or(rank));
  c.set(0, DType::kInt64, Shape{known(std::max<int64_t>(0, end - start))});
}

void loss(Context& c) {
  const Attribute* r = c.node().attribute("reduction");
  const std::string reduction = r ? r->s : "mean";
  const Shape* x = c.shape(0);
  if (reduction != "none") c.set(0, c.dtype(0), Shape{});
  else if (x && x->size() >= 2) {
    Shape out{(*x)[0]};
    out.insert(out.end(), x->begin() + 2, x->end());
    c.set(0, c.dtype(0), out);
  } else c.set(0, c.dtype(0));
  if (c.node().op_type == "SoftmaxCrossEntropyLoss") same_as_input_to(c, 1);
}

void layer_norm(Context& c) {
  same_as_input(c);
  const Shape* x = c.shape(0);
  const DType stats = c.dtype(0);
  if (!x) {
    c.set(1, stats);
    c.set(2, stats);
    return;
  }
  const auto axis = normalize_axis(c.int_attribute("axis").value_or(-1), x->size());
  Shape reduced = *x;
  if (axis) std::fill(reduced.begin() + *axis, reduced.end(), known(1));
  c.set(1, stats, reduced);
  c.set(2, stats, reduced);
}

// Attention: Y [B, Hq, Sq, Dv] (or [B, Sq, Hq * Dv]), present_key/value
// [B, Hkv, past + Skv, D/Dv], qk_matmul_output [B, Hq, Sq, past + Skv].
void attention(Context& c) {
  const Shape* q = c.shape(0);
  const Shape* k = c.shape(1);
  const Shape* v = c.shape(2);
  const Shape* past = c.shape(4);
  const bool four_d = q && q->size() == 4;
  std::optional<Shape> y;
  if (q && v && v->size() == q->size()) {
    y = *q;
    y->back() = four_d ? v->back() : Dim{};
    if (!four_d && k && same(k->back(), v->back())) y->back() = q->back();
  }
  c.set(0, c.dtype(0), y);
  Dim total;
  if (k && k->size() >= 3) {
    const Dim& kv = (*k)[k->size() == 4 ? 2 : 1];
    if (!c.input(4) && kv.value) total = kv;
    if (past && past->size() == 4 && (*past)[2].value && kv.value) total = known(*(*past)[2].value + *kv.value);
  }
  auto present = [&](const Shape* s) -> std::optional<Shape> {
    if (!s || s->size() != 4 || !four_d) return std::nullopt;
    return Shape{(*s)[0], (*s)[1], total, (*s)[3]};
  };
  c.set(1, c.dtype(1), present(k));
  c.set(2, c.dtype(2), present(v));
  c.set(3, c.dtype(0), four_d ? std::optional(Shape{(*q)[0], (*q)[1], (*q)[2], total}) : std::nullopt);
}

using Rule = std::function<void(Context&)>;

const std::unordered_map<std::string, Rule>& rules() {
  static const std::unordered_map<std::string, Rule> table = [] {
    std::unordered_map<std::string, Rule> t;
    for (const char* op : {"Add", "Sub", "Mul", "Div", "Pow", "Mod", "Min", "Max", "Sum", "Mean", "PRelu", "BitShift"}) {
      t[op] = [](Context& c) { elementwise(c, c.dtype(0)); };
    }
    for (const char* op : {"Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual", "And", "Or", "Xor"}) {
      t[op] = [](Context& c) { elementwise(c, DType::kBool); };
    }
    for (const char* op : {"Not", "IsNaN", "IsInf"}) {
      t[op] = [](Context& c) { c.set(0, DType::kBool, c.shape(0) ? std::optional(*c.shape(0)) : std::nullopt); };
    }
    t["Where"] = [](Context& c) { elementwise(c, c.dtype(1)); };
    for (const char* op : {"Neg", "Abs", "Sqrt", "Exp", "Log", "Sin", "Cos", "Tan", "Asin", "Acos", "Atan", "Sinh",
                           "Cosh", "Asinh", "Acosh", "Atanh", "Tanh", "Erf", "Reciprocal", "Sign", "Floor", "Ceil",
                           "Round", "Identity", "Clip", "Relu", "LeakyRelu", "Elu", "Selu", "Celu", "ThresholdedRelu",
                           "Sigmoid", "HardSigmoid", "HardSwish", "Softplus", "Softsign", "Gelu", "Mish", "Softmax",
                           "LogSoftmax", "Hardmax", "BatchNormalization", "InstanceNormalization",
                           "GroupNormalization", "LpNormalization", "CumSum", "Trilu", "ScatterND",
                           "ScatterElements", "Resize"}) {
      t[op] = same_as_input;
    }
    t["Resize"] = [](Context& c) { c.set(0, c.dtype(0), c.shape(0) ? std::optional(Shape(c.shape(0)->size())) : std::nullopt); };
    t["Dropout"] = [](Context& c) {
      same_as_input(c);
      c.set(1, DType::kBool, c.shape(0) ? std::optional(*c.shape(0)) : std::nullopt);
    };
    t["Cast"] = [](Context& c) {
      c.set(0, static_cast<DType>(c.int_attribute("to").value_or(0)), c.shape(0) ? std::optional(*c.shape(0)) : std::nullopt);
    };
    t["CastLike"] = [](Context& c) { c.set(0, c.dtype(1), c.shape(0) ? std::optional(*c.shape(0)) : std::nullopt); };
    t["MatMul"] = matmul;
    t["Gemm"] = gemm;
    t["Conv"] = [](Context& c) { windowed(c, false); };
    t["ConvTranspose"] = [](Context& c) { windowed(c, true); };
    t["MaxPool"] = [](Context& c) { windowed(c, false); };
    t["AveragePool"] = [](Context& c) { windowed(c, false); };
    t["GlobalAveragePool"] = global_pool;
    t["GlobalMaxPool"] = global_pool;
    t["Reshape"] = reshape;
    t["Flatten"] = flatten;
    t["Transpose"] = transpose;
    t["Unsqueeze"] = unsqueeze;
    t["Squeeze"] = squeeze;
    t["Concat"] = concat;
    t["Gather"] = gather;
    t["GatherElements"] = [](Context& c) { c.set(0, c.dtype(0), c.shape(1) ? std::optional(*c.shape(1)) : std::nullopt); };
    for (const char* op : {"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceLogSumExp",
                           "ReduceLogSum", "ReduceL1", "ReduceL2", "ReduceSumSquare", "ArgMax", "ArgMin"}) {
      t[op] = reduce;
    }
    t["Split"] = split;
    t["Slice"] = slice;
    t["Expand"] = expand;
    t["ConstantOfShape"] = constant_of_shape;
    t["Shape"] = shape_of;
    t["Size"] = [](Context& c) { c.set(0, DType::kInt64, Shape{}); };
    t["Range"] = [](Context& c) { c.set(0, c.dtype(0), Shape{Dim{}}); };
    t["NonZero"] = [](Context& c) { c.set(0, DType::kInt64, c.shape(0) ? std::optional(Shape{known(static_cast<int64_t>(c.shape(0)->size())), Dim{}}) : std::nullopt); };
    t["TopK"] = [](Context& c) {
      c.set(0, c.dtype(0), c.shape(0) ? std::optional(Shape(c.shape(0)->size())) : std::nullopt);
      c.set(1, DType::kInt64, c.shape(0) ? std::optional(Shape(c.shape(0)->size())) : std::nullopt);
    };
    t["SoftmaxCrossEntropyLoss"] = loss;
    t["NegativeLogLikelihoodLoss"] = loss;
    t["LayerNormalization"] = layer_norm;
    t["RotaryEmbedding"] = same_as_input;
    t["LRN"] = same_as_input;
    for (const char* op : {"BitwiseAnd", "BitwiseOr", "BitwiseXor"}) {
      t[op] = [](Context& c) { elementwise(c, c.dtype(0)); };
    }
    t["BitwiseNot"] = same_as_input;
    t["Attention"] = attention;
    t["RMSNormalization"] = [](Context& c) { c.set(0, c.dtype(1), c.shape(0) ? std::optional(*c.shape(0)) : std::nullopt); };
    t["OneHot"] = [](Context& c) { c.set(0, c.dtype(2)); };
    t["QuantizeLinear"] = [](Context& c) {  // output_dtype, else the zero point's type, else uint8
      const int64_t to = c.int_attribute("output_dtype").value_or(0);
      const bool zero_point = c.input_count() > 2 && !c.node().inputs[2].empty();
      c.set(0, to ? static_cast<DType>(to) : zero_point ? c.dtype(2) : DType::kUInt8, input_shape(c, 0));
    };
    t["DequantizeLinear"] = [](Context& c) {  // output_dtype, else the scale's type
      const int64_t to = c.int_attribute("output_dtype").value_or(0);
      c.set(0, to ? static_cast<DType>(to) : c.dtype(1), input_shape(c, 0));
    };
    t["DynamicQuantizeLinear"] = [](Context& c) {
      c.set(0, DType::kUInt8, input_shape(c, 0));
      c.set(1, DType::kFloat32, Shape{});
      c.set(2, DType::kUInt8, Shape{});
    };
    t["MatMulInteger"] = [](Context& c) { c.set(0, DType::kInt32, matmul_shape(c.shape(0), c.shape(1))); };
    // (a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale, y_zero_point)
    t["QLinearMatMul"] = [](Context& c) { c.set(0, c.dtype(7), matmul_shape(c.shape(0), c.shape(3))); };
    t["ConvInteger"] = [](Context& c) {
      windowed(c, false);
      c.set(0, DType::kInt32, c.outputs()[0].shape);
    };
    t["QLinearConv"] = [](Context& c) {
      windowed(c, false);
      c.set(0, c.dtype(7), c.outputs()[0].shape);
    };
    t["EyeLike"] = [](Context& c) {
      const auto dtype = c.int_attribute("dtype");
      c.set(0, dtype ? static_cast<DType>(*dtype) : c.dtype(0), c.shape(0) ? std::optional(*c.shape(0)) : std::nullopt);
    };
    return t;
  }();
  return table;
}

ValueType type_of(const ValueInfo& info) { return {info.dtype, info.shape}; }

ValueType type_of(const Tensor& t) {
  Shape shape;
  for (int64_t d : t.shape()) shape.push_back(known(d));
  return {t.dtype(), shape};
}

// ---- com.microsoft: the ops of onnxruntime-training's artifacts ----

// Output `output` has the type and shape of input `input`.
void like_input(Context& c, size_t output, size_t input) {
  c.set(output, c.dtype(input), c.shape(input) ? std::optional(*c.shape(input)) : std::nullopt);
}

// alpha * op(A) @ op(B), op transposing the last two axes; the batch axes broadcast.
void fused_matmul(Context& c) {
  const Shape* a = c.shape(0);
  const Shape* b = c.shape(1);
  if (!a || !b || a->size() < 2 || b->size() < 2) return c.set(0, c.dtype(0));
  const bool ta = c.int_attribute("transA").value_or(0), tb = c.int_attribute("transB").value_or(0);
  const size_t batch = std::max(a->size(), b->size()) - 2;
  Shape out(batch);
  for (size_t i = 0; i < batch; ++i) {
    const size_t from_end = batch - i;  // 1 for the last batch axis
    const Dim* da = from_end <= a->size() - 2 ? &(*a)[a->size() - 2 - from_end] : nullptr;
    const Dim* db = from_end <= b->size() - 2 ? &(*b)[b->size() - 2 - from_end] : nullptr;
    if (!da || is_one(*da)) {
      out[i] = db ? *db : known(1);
    } else if (!db || is_one(*db) || same(*da, *db)) {
      out[i] = *da;
    }  // else two different sizes: left unknown, the kernel reports the mismatch
  }
  out.push_back(ta ? a->back() : (*a)[a->size() - 2]);
  out.push_back(tb ? (*b)[b->size() - 2] : b->back());
  c.set(0, c.dtype(0), out);
}

const std::unordered_map<std::string, Rule>& microsoft_rules() {
  static const std::unordered_map<std::string, Rule> table = [] {
    std::unordered_map<std::string, Rule> t;
    for (const char* op :
         {"Gelu", "FastGelu", "Scale", "ReluGrad", "SigmoidGrad", "TanhGrad", "GeluGrad", "FastGeluGrad",
          "SoftmaxGrad_13", "LogSoftmaxGrad_13", "BiasGelu", "BiasGeluGrad_dX", "ZeroGradient", "DropoutGrad"}) {
      t[op] = same_as_input;
    }
    t["SoftmaxCrossEntropyLossGrad"] = [](Context& c) { like_input(c, 0, 1); };
    // (dY, X, scale, ...) => (dX like X, dScale and dB like scale)
    for (const char* op : {"LayerNormalizationGrad", "BatchNormalizationGrad"}) {
      t[op] = [](Context& c) {
        like_input(c, 0, 1);
        like_input(c, 1, 2);
        like_input(c, 2, 2);
      };
    }
    t["ConvGrad"] = [](Context& c) {
      like_input(c, 0, 1);
      like_input(c, 1, 2);
      const Shape* w = c.shape(2);
      c.set(2, c.dtype(2), w && !w->empty() ? std::optional(Shape{(*w)[0]}) : std::nullopt);
    };
    t["BatchNormInternal"] = [](Context& c) {
      like_input(c, 0, 0);
      for (size_t i = 1; i <= 4; ++i) like_input(c, i, 3);
    };
    t["FusedMatMul"] = fused_matmul;
    t["TransposeMatMul"] = fused_matmul;
    t["InPlaceAccumulatorV2"] = [](Context& c) {
      c.set(0, DType::kBool, Shape{known(1)});
      like_input(c, 1, 0);
    };
    return t;
  }();
  return table;
}

}  // namespace

std::map<std::string, ValueType> infer_types(const Model& model) {
  const Graph& graph = model.graph;
  std::map<std::string, ValueType> types;
  std::unordered_map<std::string, const Tensor*> constants;
  for (const auto& [name, tensor] : graph.initializers) {
    types[name] = type_of(tensor);
    constants[name] = &tensor;
  }
  for (const ValueInfo& v : graph.inputs) {
    if (!constants.contains(v.name)) types[v.name] = type_of(v);
  }
  for (size_t index : topological_order(graph)) {
    const Node& node = graph.nodes[index];
    if (node.op_type == "Constant" && node.outputs.size() == 1) {
      for (const Attribute& a : node.attributes) {
        if (a.name == "value" && a.t.defined()) {
          types[node.outputs[0]] = type_of(a.t);
          constants[node.outputs[0]] = &a.t;
        }
      }
      continue;
    }
    Context context(node, types, constants);
    const auto& table = rules();
    if (auto rule = table.find(node.op_type); rule != table.end() && canonical_domain(node.domain).empty()) {
      rule->second(context);
    } else if (node.domain == "org.onnxtrain" && (node.op_type == "Gelu" || node.op_type == "GeluTanh")) {
      same_as_input(context);  // the fused GELU of passes/fuse_gelu.h
    } else if (auto ms = microsoft_rules().find(node.op_type);
               node.domain == "com.microsoft" && ms != microsoft_rules().end()) {
      ms->second(context);
    } else {
      context.set(0, context.dtype(0));  // unknown op: guess the element type, no shape
    }
    for (size_t i = 0; i < node.outputs.size(); ++i) {
      if (!node.outputs[i].empty() && context.outputs()[i].dtype != DType::kUndefined) {
        types[node.outputs[i]] = context.outputs()[i];
      }
    }
  }
  // What the model declares wins over what was inferred.
  for (const ValueInfo& v : graph.value_info) {
    if (v.dtype != DType::kUndefined && v.shape) types[v.name] = type_of(v);
  }
  for (const ValueInfo& v : graph.outputs) {
    if (v.dtype != DType::kUndefined && v.shape) types[v.name] = type_of(v);
  }
  return types;
}

void annotate_types(Model& model) {
  const auto types = infer_types(model);
  std::map<std::string, bool> is_node_output;
  for (const Node& node : model.graph.nodes) {
    for (const auto& out : node.outputs) is_node_output[out] = true;
  }
  std::vector<ValueInfo> value_info;
  for (const auto& [name, type] : types) {
    if (!is_node_output.contains(name)) continue;
    value_info.push_back(ValueInfo{name, type.dtype, type.shape, {}, {}});
  }
  model.graph.value_info = std::move(value_info);
}

}  // namespace onnxtrain::ir
