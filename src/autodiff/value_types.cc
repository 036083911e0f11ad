#include "autodiff/value_types.h"

#include <algorithm>
#include <set>
#include <string_view>

namespace onnxtrain::autodiff {
namespace {

// Ops whose output 0 has the element type and shape of input 0.
const std::set<std::string_view> kSameAsInput = {
    "Abs", "Acos", "Acosh", "Asin", "Asinh", "Atan", "Atanh", "BatchNormalization", "Cast", "CastLike", "Ceil", "Celu",
    "Clip", "Cos", "Cosh", "Dropout", "Elu", "Erf", "Exp", "Floor", "Gelu", "GroupNormalization", "HardSigmoid",
    "HardSwish", "Hardmax", "Identity", "InstanceNormalization", "IsInf", "IsNaN", "LayerNormalization", "LeakyRelu",
    "Log", "LogSoftmax", "LpNormalization", "Mish", "Neg", "Not", "Reciprocal", "Relu", "Round", "Selu", "Shrink",
    "Sigmoid", "Sign", "Sin", "Sinh", "Softmax", "Softplus", "Softsign", "Sqrt", "Tan", "Tanh", "ThresholdedRelu",
    "Trilu", "RMSNormalization", "RotaryEmbedding", "LRN", "BitwiseNot", "QuantizeLinear", "DequantizeLinear",
    // org.onnxtrain ops: fused GELU; gradients have their value's shape.
    "GeluTanh", "ReluGrad", "SigmoidGrad", "TanhGrad", "GeluGrad", "GeluTanhGrad", "SoftmaxGrad", "LogSoftmaxGrad"};

// Ops that broadcast their inputs (numpy rules).
const std::set<std::string_view> kBroadcasting = {
    "Add",   "And",         "BitwiseAnd", "BitwiseOr", "BitwiseXor", "Div", "Equal", "Greater", "GreaterOrEqual",
    "Less",  "LessOrEqual", "Max",        "Mean",      "Min",        "Mod", "Mul",   "Or",      "Pow",
    "PRelu", "Sub",         "Sum",        "Where",     "Xor"};

const std::set<std::string_view> kBoolResult = {
    "And", "Equal", "Greater", "GreaterOrEqual", "IsInf", "IsNaN", "Less", "LessOrEqual", "Not", "Or", "Xor"};

const std::set<std::string_view> kInt64Result = {"ArgMax", "ArgMin", "NonZero", "Shape", "Size"};

std::optional<ir::Dim> broadcast_dim(const ir::Dim& a, const ir::Dim& b) {
  if (dims_equal(a, b)) return a;
  if (a.value == 1) return b;
  if (b.value == 1) return a;
  return ir::Dim{};  // unknown: either may be 1 at run time
}

std::optional<StaticShape> broadcast(const std::vector<const std::optional<StaticShape>*>& shapes) {
  StaticShape out;
  for (const auto* s : shapes) {
    if (!*s) return std::nullopt;
    const StaticShape& shape = **s;
    if (shape.size() > out.size()) out.insert(out.begin(), shape.size() - out.size(), ir::Dim{1, ""});
    const size_t offset = out.size() - shape.size();
    for (size_t i = 0; i < shape.size(); ++i) out[offset + i] = *broadcast_dim(out[offset + i], shape[i]);
  }
  return out;
}

const ir::Attribute* find_attribute(const ir::Node& node, std::string_view name) {
  return node.attribute(name);
}

int64_t int_attribute(const ir::Node& node, std::string_view name, int64_t fallback) {
  const ir::Attribute* a = find_attribute(node, name);
  return a && a->type == ir::AttributeType::kInt ? a->i : fallback;
}

DType tensor_attribute_dtype(const ir::Node& node) {
  for (const ir::Attribute& a : node.attributes) {
    if (a.type == ir::AttributeType::kTensor && a.t.defined()) return a.t.dtype();
    if (a.name == "value_float" || a.name == "value_floats") return DType::kFloat32;
    if (a.name == "value_int" || a.name == "value_ints") return DType::kInt64;
  }
  return DType::kUndefined;
}

}  // namespace

bool dims_equal(const ir::Dim& a, const ir::Dim& b) {
  if (a.value && b.value) return *a.value == *b.value;
  return !a.value && !b.value && !a.param.empty() && a.param == b.param;
}

ValueTypes::ValueTypes(const ir::Graph& graph, const std::vector<size_t>& order, int64_t opset,
                       ConstantLookup constants)
    : opset_(opset), constants_(std::move(constants)) {
  for (const auto& [name, tensor] : graph.initializers) {
    StaticShape shape;
    for (int64_t d : tensor.shape()) shape.push_back({d, ""});
    entries_[name] = {tensor.dtype(), shape, true};
  }
  for (const auto& v : graph.inputs) declare(v);
  for (const auto& v : graph.value_info) declare(v);
  for (const auto& v : graph.outputs) declare(v);
  for (size_t i : order) infer(graph.nodes[i]);
}

void ValueTypes::declare(const ir::ValueInfo& info) {
  Entry& e = entries_[info.name];
  if (info.dtype != DType::kUndefined) e.dtype = info.dtype;
  if (info.shape && !e.shape_declared) {
    e.shape = info.shape;
    e.shape_declared = true;
  }
}

void ValueTypes::set_dtype(const std::string& value, DType dtype) {
  Entry& e = entries_[value];
  if (e.dtype == DType::kUndefined) e.dtype = dtype;
}

void ValueTypes::set_shape(const std::string& value, std::optional<StaticShape> shape) {
  if (!shape || value.empty()) return;
  Entry& e = entries_[value];
  // A propagated shape keeps the inputs' dimension names, which declared value_info
  // often renames ("Gemm_dim_0"); prefer it when it is at least as precise.
  if (e.shape && e.shape->size() == shape->size()) {
    for (size_t i = 0; i < shape->size(); ++i) {
      const ir::Dim& d = (*shape)[i];
      if (!d.value && d.param.empty()) (*shape)[i] = (*e.shape)[i];
    }
  } else if (e.shape && e.shape_declared) {
    return;
  }
  e.shape = std::move(shape);
}

void ValueTypes::set_shape_like(const std::string& value, const std::string& like) {
  if (auto it = entries_.find(like); it != entries_.end()) {
    set_dtype(value, it->second.dtype);
    set_shape(value, it->second.shape);
  }
}

DType ValueTypes::dtype(const std::string& value) const {
  auto it = entries_.find(value);
  return it == entries_.end() ? DType::kUndefined : it->second.dtype;
}

const std::optional<StaticShape>& ValueTypes::shape(const std::string& value) const {
  static const std::optional<StaticShape> kUnknown;
  auto it = entries_.find(value);
  return it == entries_.end() ? kUnknown : it->second.shape;
}

std::optional<size_t> ValueTypes::rank(const std::string& value) const {
  const auto& s = shape(value);
  return s ? std::optional<size_t>(s->size()) : std::nullopt;
}

bool ValueTypes::same_shape(const std::string& a, const std::string& b) const {
  if (a == b) return true;
  const auto& sa = shape(a);
  const auto& sb = shape(b);
  if (!sa || !sb || sa->size() != sb->size()) return false;
  for (size_t i = 0; i < sa->size(); ++i) {
    if (!dims_equal((*sa)[i], (*sb)[i])) return false;
  }
  return true;
}

bool ValueTypes::differentiable(const std::string& value) const {
  const DType d = dtype(value);
  return d == DType::kUndefined || is_floating(d);
}

void ValueTypes::infer(const ir::Node& node) {
  const std::string_view op = node.op_type;
  auto input = [&](size_t i) -> const std::string& {
    static const std::string kNone;
    return i < node.inputs.size() ? node.inputs[i] : kNone;
  };
  auto out = [&](size_t i) -> const std::string& {
    static const std::string kNone;
    return i < node.outputs.size() ? node.outputs[i] : kNone;
  };
  // Element types.
  DType first = DType::kUndefined;
  for (const std::string& in : node.inputs) {
    if (!in.empty()) {
      first = dtype(in);
      break;
    }
  }
  const DType output_dtype = dtype_from_onnx(static_cast<int32_t>(int_attribute(node, "output_dtype", 0)));
  if (op == "Cast")
    first = dtype_from_onnx(static_cast<int32_t>(int_attribute(node, "to", 0)));
  else if (op == "CastLike")
    first = dtype(input(1));
  else if (op == "Where")
    first = dtype(input(1));
  else if (op == "OneHot")
    first = dtype(input(2));
  else if (op == "QuantizeLinear")  // output_dtype, else the zero point's type, else uint8
    first = output_dtype != DType::kUndefined ? output_dtype : input(2).empty() ? DType::kUInt8 : dtype(input(2));
  else if (op == "DequantizeLinear")  // output_dtype, else the scale's type
    first = output_dtype != DType::kUndefined ? output_dtype : dtype(input(1));
  else if (kBoolResult.contains(op))
    first = DType::kBool;
  else if (kInt64Result.contains(op))
    first = DType::kInt64;
  else if (op == "Constant")
    first = tensor_attribute_dtype(node);
  else if (op == "ConstantOfShape") {
    first = tensor_attribute_dtype(node);
    if (first == DType::kUndefined) first = DType::kFloat32;
  } else if (op == "EyeLike" || op == "RandomNormalLike" || op == "RandomUniformLike" || op == "RandomNormal" ||
             op == "RandomUniform" || op == "Multinomial") {
    const int64_t to = int_attribute(node, "dtype", 0);
    if (to != 0) first = dtype_from_onnx(static_cast<int32_t>(to));
  }
  if (node.domain.empty() || node.domain == "ai.onnx" || node.domain == "org.onnxtrain") {
    set_dtype(out(0), first);
    for (size_t i = 1; i < node.outputs.size(); ++i) {
      if (op == "TopK" || op == "MaxPool" || op == "Unique")
        set_dtype(out(i), DType::kInt64);
      else if (op == "Dropout")
        set_dtype(out(i), DType::kBool);
      else if (op == "LayerNormalization") {
        const int64_t stash = int_attribute(node, "stash_type", 1);
        set_dtype(out(i), dtype_from_onnx(static_cast<int32_t>(stash)));
      } else if (op == "BatchNormalization")
        set_dtype(out(i), dtype(input(3)));
      else
        set_dtype(out(i), first);
    }
  }

  infer_shape(node);
}

std::optional<std::vector<int64_t>> ValueTypes::constant_ints(const std::string& value) const {
  if (value.empty() || !constants_) return std::nullopt;
  const Tensor* t = constants_(value);
  if (t == nullptr || !is_integer(t->dtype())) return std::nullopt;
  return t->to_int64_vector();
}

void ValueTypes::infer_shape(const ir::Node& node) {
  const std::string_view op = node.op_type;
  auto input = [&](size_t i) -> const std::string& {
    static const std::string kNone;
    return i < node.inputs.size() ? node.inputs[i] : kNone;
  };
  auto out = [&](size_t i) -> const std::string& {
    static const std::string kNone;
    return i < node.outputs.size() ? node.outputs[i] : kNone;
  };
  auto unknown_dims = [](size_t rank) { return StaticShape(rank); };
  const auto& in0 = shape(input(0));
  if (kSameAsInput.contains(op)) {
    set_shape(out(0), shape(input(0)));
    if (op == "Dropout") set_shape(out(1), shape(input(0)));
    return;
  }
  if (kBroadcasting.contains(op)) {
    std::vector<const std::optional<StaticShape>*> shapes;
    for (const std::string& in : node.inputs) shapes.push_back(&shape(in));
    set_shape(out(0), broadcast(shapes));
    return;
  }
  if (op == "Constant") {
    for (const ir::Attribute& a : node.attributes) {
      if (a.type == ir::AttributeType::kTensor && a.t.defined()) {
        StaticShape s;
        for (int64_t d : a.t.shape()) s.push_back({d, ""});
        set_shape(out(0), s);
      } else if (a.name == "value_float" || a.name == "value_int") {
        set_shape(out(0), StaticShape{});
      } else if (a.name == "value_ints" || a.name == "value_floats") {
        set_shape(out(0), StaticShape{{static_cast<int64_t>(std::max(a.ints.size(), a.floats.size())), ""}});
      }
    }
    return;
  }
  if (op == "Shape") {
    if (auto r = rank(input(0))) {
      const int64_t n = static_cast<int64_t>(*r);
      auto clamp = [n](int64_t i) { return std::clamp(i < 0 ? i + n : i, int64_t{0}, n); };
      const int64_t start = clamp(int_attribute(node, "start", 0));
      const int64_t end = clamp(int_attribute(node, "end", n));
      set_shape(out(0), StaticShape{{std::max<int64_t>(end - start, 0), ""}});
    }
    return;
  }
  if (op == "Size") {
    set_shape(out(0), StaticShape{});
    return;
  }
  if (op == "Transpose") {
    const auto& s = shape(input(0));
    const ir::Attribute* perm = node.attribute("perm");
    if (!s) {
      if (perm) set_shape(out(0), unknown_dims(perm->ints.size()));
      return;
    }
    StaticShape result;
    for (size_t i = 0; i < s->size(); ++i) {
      const size_t from = perm ? static_cast<size_t>(perm->ints.at(i)) : s->size() - 1 - i;
      if (from >= s->size()) return;
      result.push_back((*s)[from]);
    }
    set_shape(out(0), result);
    return;
  }
  if (op == "Gemm") {
    const auto& a = shape(input(0));
    const auto& b = shape(input(1));
    if (!a || !b || a->size() != 2 || b->size() != 2) return;
    const bool ta = int_attribute(node, "transA", 0) != 0;
    const bool tb = int_attribute(node, "transB", 0) != 0;
    set_shape(out(0), StaticShape{(*a)[ta ? 1 : 0], (*b)[tb ? 0 : 1]});
    return;
  }
  if (op == "MatMul") {
    const auto& a = shape(input(0));
    const auto& b = shape(input(1));
    if (!a || !b || a->size() < 2 || b->size() < 2) return;
    const std::optional<StaticShape> batch_a = StaticShape(a->begin(), a->end() - 2);
    const std::optional<StaticShape> batch_b = StaticShape(b->begin(), b->end() - 2);
    auto result = broadcast({&batch_a, &batch_b});
    result->push_back((*a)[a->size() - 2]);
    result->push_back(b->back());
    set_shape(out(0), result);
    return;
  }
  if (op == "Reshape") {
    const auto target = constant_ints(input(1));
    if (!target) {
      if (const auto& s1 = shape(input(1)); s1 && s1->size() == 1 && (*s1)[0].value) {
        set_shape(out(0), unknown_dims(static_cast<size_t>(*(*s1)[0].value)));
      }
      return;
    }
    const bool allow_zero = int_attribute(node, "allowzero", 0) != 0;
    StaticShape result;
    for (size_t i = 0; i < target->size(); ++i) {
      const int64_t d = (*target)[i];
      if (d > 0 || (d == 0 && allow_zero))
        result.push_back({d, ""});
      else if (d == 0 && in0 && i < in0->size())
        result.push_back((*in0)[i]);
      else
        result.push_back({});
    }
    // One -1 with every other size known: it is the rest of the element count.
    if (in0 && std::count(target->begin(), target->end(), -1) == 1) {
      int64_t total = 1;
      int64_t known = 1;
      bool all_known = true;
      for (const ir::Dim& d : *in0) {
        if (!d.value)
          all_known = false;
        else
          total *= *d.value;
      }
      for (const ir::Dim& d : result) {
        if (d.value) known *= *d.value;
      }
      const auto minus_one = std::find(target->begin(), target->end(), -1) - target->begin();
      if (all_known && known > 0) result[static_cast<size_t>(minus_one)] = {total / known, ""};
    }
    set_shape(out(0), result);
    return;
  }
  if (op == "Flatten") {
    set_shape(out(0), unknown_dims(2));
    return;
  }
  if (op == "Gather") {
    const auto& indices = shape(input(1));
    if (!in0 || !indices || in0->empty()) return;
    int64_t axis = int_attribute(node, "axis", 0);
    if (axis < 0) axis += static_cast<int64_t>(in0->size());
    if (axis < 0 || axis >= static_cast<int64_t>(in0->size())) return;
    StaticShape result(in0->begin(), in0->begin() + axis);
    result.insert(result.end(), indices->begin(), indices->end());
    result.insert(result.end(), in0->begin() + axis + 1, in0->end());
    set_shape(out(0), result);
    return;
  }
  if (op == "Unsqueeze" || op == "Squeeze") {
    const auto axes = opset_ >= 13
                          ? constant_ints(input(1))
                          : (node.attribute("axes") ? std::optional(node.attribute("axes")->ints) : std::nullopt);
    if (!in0) return;
    if (op == "Unsqueeze") {
      if (!axes) return;
      const int64_t rank = static_cast<int64_t>(in0->size() + axes->size());
      std::vector<bool> inserted(static_cast<size_t>(rank), false);
      for (int64_t a : *axes) {
        const int64_t p = a < 0 ? a + rank : a;
        if (p < 0 || p >= rank) return;
        inserted[static_cast<size_t>(p)] = true;
      }
      StaticShape result;
      size_t next = 0;
      for (int64_t i = 0; i < rank; ++i) {
        if (inserted[static_cast<size_t>(i)])
          result.push_back({1, ""});
        else
          result.push_back((*in0)[next++]);
      }
      set_shape(out(0), result);
      return;
    }
    const int64_t rank = static_cast<int64_t>(in0->size());
    std::vector<bool> removed(in0->size(), false);
    if (axes && !axes->empty()) {
      for (int64_t a : *axes) {
        const int64_t p = a < 0 ? a + rank : a;
        if (p < 0 || p >= rank) return;
        removed[static_cast<size_t>(p)] = true;
      }
    } else if (opset_ < 13 || input(1).empty()) {
      for (size_t i = 0; i < in0->size(); ++i) {
        if (!(*in0)[i].value) return;  // might or might not be 1
        removed[i] = (*in0)[i].value == 1;
      }
    } else {
      return;
    }
    StaticShape result;
    for (size_t i = 0; i < in0->size(); ++i) {
      if (!removed[i]) result.push_back((*in0)[i]);
    }
    set_shape(out(0), result);
    return;
  }
  if (op == "Concat" || op == "Split" || op == "Slice" || op == "Pad" || op == "Tile" || op == "TopK" ||
      op == "Resize" || op == "Conv" || op == "ConvTranspose" || op == "MaxPool" || op == "AveragePool" ||
      op == "LpPool" || op == "CumSum" || op == "ReverseSequence") {
    // Same rank as the input; the dims along the axes these ops touch are left unknown.
    if (!in0) return;
    StaticShape result = unknown_dims(in0->size());
    if (op == "Concat" || op == "Split") {
      int64_t axis = int_attribute(node, "axis", 0);
      if (axis < 0) axis += static_cast<int64_t>(in0->size());
      for (size_t i = 0; i < result.size(); ++i) {
        if (static_cast<int64_t>(i) != axis) result[i] = (*in0)[i];
      }
      if (op == "Concat" && axis >= 0 && axis < static_cast<int64_t>(result.size())) {
        int64_t total = 0;  // the concatenated axis, when every piece's size is known
        for (const std::string& in : node.inputs) {
          const auto& s = shape(in);
          if (!s || s->size() != result.size() || !(*s)[static_cast<size_t>(axis)].value) {
            total = -1;
            break;
          }
          total += *(*s)[static_cast<size_t>(axis)].value;
        }
        if (total >= 0) result[static_cast<size_t>(axis)] = {total, ""};
      }
    } else if (op == "Conv" || op == "ConvTranspose" || op == "MaxPool" || op == "AveragePool" || op == "LpPool") {
      if (!result.empty()) result[0] = (*in0)[0];
      if (op == "MaxPool" || op == "AveragePool" || op == "LpPool") {
        if (result.size() > 1) result[1] = (*in0)[1];
      } else if (const auto& w = shape(input(1)); w && !w->empty() && result.size() > 1 && op == "Conv") {
        result[1] = (*w)[0];
      }
    }
    for (size_t i = 0; i < node.outputs.size(); ++i) set_shape(out(i), result);
    return;
  }
  if (op == "GlobalAveragePool" || op == "GlobalMaxPool") {
    if (!in0 || in0->size() < 2) return;
    StaticShape result = {(*in0)[0], (*in0)[1]};
    result.resize(in0->size(), ir::Dim{1, ""});
    set_shape(out(0), result);
    return;
  }
  if (op == "Expand") {
    const auto target = constant_ints(input(1));
    if (target) {
      StaticShape t;
      for (int64_t d : *target) t.push_back({d, ""});
      const std::optional<StaticShape> ts = t;
      set_shape(out(0), broadcast({&in0, &ts}));
      return;
    }
    const auto& s1 = shape(input(1));
    if (in0 && s1 && s1->size() == 1 && (*s1)[0].value) {
      set_shape(out(0), unknown_dims(std::max(in0->size(), static_cast<size_t>(*(*s1)[0].value))));
    }
    return;
  }
  if (op == "ConstantOfShape") {
    const auto& s0 = shape(input(0));
    if (const auto target = constant_ints(input(0))) {
      StaticShape t;
      for (int64_t d : *target) t.push_back({d, ""});
      set_shape(out(0), t);
    } else if (s0 && s0->size() == 1 && (*s0)[0].value) {
      set_shape(out(0), unknown_dims(static_cast<size_t>(*(*s0)[0].value)));
    }
    return;
  }
  if (op.starts_with("Reduce") && in0) {
    const bool axes_as_input = op == "ReduceSum" ? opset_ >= 13 : opset_ >= 18;
    std::optional<std::vector<int64_t>> axes;
    if (axes_as_input) {
      if (input(1).empty())
        axes = std::vector<int64_t>{};
      else
        axes = constant_ints(input(1));
    } else {
      const ir::Attribute* a = node.attribute("axes");
      axes = a ? a->ints : std::vector<int64_t>{};
    }
    if (!axes) return;
    const bool keep = int_attribute(node, "keepdims", 1) != 0;
    if (axes->empty()) {
      if (axes_as_input && int_attribute(node, "noop_with_empty_axes", 0) != 0) {
        set_shape(out(0), in0);
        return;
      }
      set_shape(out(0), keep ? StaticShape(in0->size(), ir::Dim{1, ""}) : StaticShape{});
      return;
    }
    const int64_t rank = static_cast<int64_t>(in0->size());
    std::vector<bool> reduced(in0->size(), false);
    for (int64_t a : *axes) {
      const int64_t p = a < 0 ? a + rank : a;
      if (p < 0 || p >= rank) return;
      reduced[static_cast<size_t>(p)] = true;
    }
    StaticShape result;
    for (size_t i = 0; i < in0->size(); ++i) {
      if (!reduced[i])
        result.push_back((*in0)[i]);
      else if (keep)
        result.push_back({1, ""});
    }
    set_shape(out(0), result);
    return;
  }
  if (op == "SoftmaxCrossEntropyLoss" || op == "NegativeLogLikelihoodLoss") {
    const std::string reduction = node.attribute("reduction") ? node.attribute("reduction")->s : "mean";
    if (reduction != "none")
      set_shape(out(0), StaticShape{});
    else
      set_shape(out(0), shape(input(1)));
    if (op == "SoftmaxCrossEntropyLoss") set_shape(out(1), in0);
    return;
  }
  if (op == "OneHot") {
    if (!in0) return;
    int64_t axis = int_attribute(node, "axis", -1);
    const int64_t rank = static_cast<int64_t>(in0->size()) + 1;
    if (axis < 0) axis += rank;
    StaticShape result = *in0;
    if (axis >= 0 && axis <= static_cast<int64_t>(result.size())) result.insert(result.begin() + axis, ir::Dim{});
    set_shape(out(0), result);
    return;
  }
  if (op == "Range") {
    set_shape(out(0), unknown_dims(1));
    return;
  }
  if (op == "Attention") {  // Y: Q's leading axes with V's head size ([B, H, S, Dv] or [B, S, H * Dv])
    const auto& v = shape(input(2));
    if (!in0 || !v || in0->size() != v->size()) return;
    StaticShape y = *in0;
    const auto& k = shape(input(1));
    if (in0->size() == 4)
      y.back() = v->back();
    else  // V's hidden size equal to K's makes Y's equal to Q's
      y.back() = k && dims_equal(k->back(), v->back()) ? in0->back() : ir::Dim{};
    set_shape(out(0), y);
    return;
  }
}

}  // namespace onnxtrain::autodiff
