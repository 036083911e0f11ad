#include "ir/shape_inference.h"

#include <onnxtrain/shape_inference.h>

#include <algorithm>

#include "ir/functions.h"
#include "ir/onnx_io.h"
#include "ir/shape_rules.h"

namespace onnxtrain::ir {
namespace {

// Function calls inside function bodies are inferred through their bodies too, this deep.
constexpr int kMaxCallDepth = 16;

ValueType type_of(const Tensor& t) {
  SymbolicShape shape;
  for (int64_t d : t.shape()) shape.push_back(known(d));
  return {t.dtype(), shape};
}

bool is_default_domain(std::string_view domain) {
  return canonical_domain(domain).empty();
}

// The tensor a Constant node holds (value, value_float(s), value_int(s)); undefined otherwise.
Tensor constant_value(const Node& node) {
  if (node.attributes.size() != 1) return {};
  const Attribute& a = node.attributes[0];
  if (a.name == "value") return a.t;
  if (a.name == "value_float") return Tensor::scalar<float>(a.f);
  if (a.name == "value_int") return Tensor::scalar<int64_t>(a.i);
  if (a.name == "value_floats") return Tensor::from_vector<float>({static_cast<int64_t>(a.floats.size())}, a.floats);
  if (a.name == "value_ints") return Tensor::from_vector<int64_t>({static_cast<int64_t>(a.ints.size())}, a.ints);
  return {};
}

}  // namespace

bool dims_equal(const Dim& a, const Dim& b) {
  if (a.value && b.value) return *a.value == *b.value;
  return !a.value && !b.value && !a.param.empty() && a.param == b.param;
}

// ---- ShapeContext, the rule table and the shared pieces

std::optional<std::vector<int64_t>> ShapeContext::ints(size_t i) const {
  const Tensor* t = constant(i);
  if (t == nullptr || !is_integer(t->dtype())) return std::nullopt;
  return t->to_int64_vector();
}

std::optional<int64_t> ShapeContext::int_attribute(std::string_view name) const {
  const Attribute* a = node_.attribute(name);
  return a && a->type == AttributeType::kInt ? std::optional(a->i) : std::nullopt;
}

std::optional<float> ShapeContext::float_attribute(std::string_view name) const {
  const Attribute* a = node_.attribute(name);
  return a && a->type == AttributeType::kFloat ? std::optional(a->f) : std::nullopt;
}

std::optional<std::vector<int64_t>> ShapeContext::ints_attribute(std::string_view name) const {
  const Attribute* a = node_.attribute(name);
  return a && a->type == AttributeType::kInts ? std::optional(a->ints) : std::nullopt;
}

std::optional<std::string> ShapeContext::string_attribute(std::string_view name) const {
  const Attribute* a = node_.attribute(name);
  return a && a->type == AttributeType::kString ? std::optional(a->s) : std::nullopt;
}

std::optional<std::vector<int64_t>> ShapeContext::axes(size_t input_index) const {
  if (auto a = ints_attribute("axes")) return a;
  return ints(input_index);
}

void ShapeContext::set(size_t output, DType dtype, std::optional<SymbolicShape> shape) {
  if (output < outputs_.size()) outputs_[output] = ValueType{dtype, std::move(shape)};
}

void ShapeContext::set_like(size_t output, size_t input) {
  set(output, dtype(input), shape(input) ? std::optional(*shape(input)) : std::nullopt);
}

ShapeRuleTable& ShapeRuleTable::global() {
  static ShapeRuleTable table;
  return table;
}

void ShapeRuleTable::add(std::string_view domain, const ShapeRuleEntry& entry) {
  rules_[std::string(canonical_domain(domain)) + '\n' + std::string(entry.op_type)] = entry.rule;
}

ShapeRule ShapeRuleTable::find(std::string_view domain, std::string_view op_type) const {
  std::string key(canonical_domain(domain));
  key += '\n';
  key += op_type;
  auto it = rules_.find(key);
  return it == rules_.end() ? nullptr : it->second;
}

std::vector<std::string> ShapeRuleTable::op_types(std::string_view domain) const {
  const std::string prefix = std::string(canonical_domain(domain)) + '\n';
  std::vector<std::string> ops;
  for (const auto& [key, rule] : rules_) {
    if (key.starts_with(prefix)) ops.push_back(key.substr(prefix.size()));
  }
  std::sort(ops.begin(), ops.end());
  return ops;
}

std::optional<SymbolicShape> broadcast(const std::vector<const SymbolicShape*>& shapes) {
  size_t rank = 0;
  for (const SymbolicShape* s : shapes) {
    if (s == nullptr) return std::nullopt;
    rank = std::max(rank, s->size());
  }
  SymbolicShape out(rank, known(1));
  for (const SymbolicShape* s : shapes) {
    const size_t pad = rank - s->size();
    for (size_t i = 0; i < s->size(); ++i) {
      Dim& o = out[pad + i];
      const Dim& d = (*s)[i];
      if (is_one(d) || dims_equal(o, d)) continue;
      if (is_one(o)) {
        o = d;
      } else if (d.value && !o.value) {
        o = d;  // a fixed size wins over a name it must equal
      } else if (!(o.value && !d.value)) {
        o = Dim{};  // two names, or either may be 1 at run time
      }
    }
  }
  return out;
}

std::optional<int64_t> product(const SymbolicShape& shape, size_t begin, size_t end) {
  int64_t n = 1;
  for (size_t i = begin; i < end; ++i) {
    if (!shape[i].value) return std::nullopt;
    n *= *shape[i].value;
  }
  return n;
}

std::optional<size_t> axis_index(int64_t axis, size_t rank) {
  const auto r = static_cast<int64_t>(rank);
  if (axis < -r || axis >= r) return std::nullopt;
  return static_cast<size_t>(axis < 0 ? axis + r : axis);
}

void same_as_input(ShapeContext& c) {
  c.set_like(0, 0);
}

void broadcasting(ShapeContext& c) {
  std::vector<const SymbolicShape*> shapes;
  for (size_t i = 0; i < c.input_count(); ++i) shapes.push_back(c.shape(i));
  c.set(0, c.dtype(0), broadcast(shapes));
}

// ---- ShapeInference

ShapeInference::ShapeInference(const Graph& graph, int64_t default_opset, ConstantLookup constants,
                               FunctionLookup functions)
    : default_opset_(default_opset), constants_(std::move(constants)), functions_(std::move(functions)) {
  std::unordered_map<std::string_view, bool> is_input;
  for (const ValueInfo& v : graph.inputs) is_input[v.name] = true;
  for (const auto& [name, tensor] : graph.initializers) {
    entries_[name] = {type_of(tensor), true};
    if (!constants_ && !is_input.contains(name)) own_constants_[name] = tensor;
  }
  for (const ValueInfo& v : graph.inputs) declare(v);
  for (const ValueInfo& v : graph.value_info) declare(v);
  for (const ValueInfo& v : graph.outputs) declare(v);
  if (!functions_) {
    functions_ = [](std::string_view domain, std::string_view name) -> const Function* {
      const FunctionLibrary& library = FunctionLibrary::global();
      return domain == kOnnxtrainDomain && library.contains(name) ? &library.get(name) : nullptr;
    };
  }
}

void ShapeInference::declare(const ValueInfo& info) {
  Entry& e = entries_[info.name];
  if (info.dtype != DType::kUndefined) e.type.dtype = info.dtype;
  if (info.shape && !e.shape_declared) {
    e.type.shape = info.shape;
    e.shape_declared = true;
  }
}

void ShapeInference::set_shape(Entry& e, std::optional<SymbolicShape> shape) {
  if (!shape) return;
  if (e.type.shape && e.type.shape->size() == shape->size()) {
    // Per dimension, the more precise wins: a size over a name, a name over nothing. Between
    // two names the inferred one stays: it keeps the inputs' names, where declared value_info
    // often renames ("Gemm_dim_0").
    for (size_t i = 0; i < shape->size(); ++i) {
      Dim& d = (*shape)[i];
      const Dim& before = (*e.type.shape)[i];
      if (before.value && !d.value) d = before;
      if (!d.value && d.param.empty()) d = before;
    }
  } else if (e.type.shape && e.shape_declared) {
    return;  // a rank the model declares is not overruled
  }
  e.type.shape = std::move(shape);
}

void ShapeInference::set(const std::string& value, const ValueType& type) {
  if (value.empty()) return;
  Entry& e = entries_[value];
  if (e.type.dtype == DType::kUndefined) e.type.dtype = type.dtype;
  set_shape(e, type.shape);
}

void ShapeInference::set_dtype(const std::string& value, DType dtype) {
  set(value, ValueType{dtype, std::nullopt});
}

void ShapeInference::set_type_like(const std::string& value, const std::string& like) {
  if (const ValueType* t = find(like)) set(value, ValueType(*t));
}

const Tensor* ShapeInference::constant(const std::string& value) const {
  if (value.empty()) return nullptr;
  if (auto it = own_constants_.find(value); it != own_constants_.end()) return &it->second;
  return constants_ ? constants_(value) : nullptr;
}

std::vector<ValueType> ShapeInference::infer_outputs(const Node& node, int depth) const {
  std::vector<const ValueType*> inputs;
  std::vector<const Tensor*> constants;
  for (const std::string& in : node.inputs) {
    inputs.push_back(in.empty() ? nullptr : find(in));
    constants.push_back(constant(in));
  }
  const bool onnx_op = is_default_domain(node.domain);
  const int64_t opset = node.opset ? node.opset : (onnx_op ? default_opset_ : 1);
  ShapeContext context(node, opset, std::move(inputs), std::move(constants));
  context.set_scope(this);
  if (ShapeRule rule = ShapeRuleTable::global().find(node.domain, node.op_type)) {
    rule(context);
    return context.outputs();
  }
  if (!onnx_op && depth < kMaxCallDepth) {
    if (const Function* function = functions_(canonical_domain(node.domain), node.op_type)) {
      return infer_call(node, *function, depth);
    }
  }
  context.set(0, context.dtype(0));  // an op without a rule: the element type is a guess
  return context.outputs();
}

std::vector<ValueType> ShapeInference::infer_call(const Node& node, const Function& function, int depth) const {
  int64_t body_opset = default_opset_;
  for (const OpsetImport& o : function.opset_imports) {
    if (is_default_domain(o.domain)) body_opset = o.version;
  }
  // The body's inputs and outputs are named as the call names them, so the caller's types
  // and constants serve it directly; its other values get a prefix no caller's value has.
  const std::string prefix = "\x01" + function.name + "/";
  ShapeInference body(
      {}, body_opset, [this](const std::string& v) { return constant(v); }, functions_);
  for (const std::string& in : node.inputs) {
    if (const ValueType* t = in.empty() ? nullptr : find(in)) body.entries_[in].type = *t;
  }
  for (const Node& inner : expand_call(function, node, prefix)) {
    if (inner.op_type == "Constant" && is_default_domain(inner.domain)) {
      body.infer(inner);
      continue;
    }
    const std::vector<ValueType> outputs = body.infer_outputs(inner, depth + 1);
    for (size_t i = 0; i < inner.outputs.size(); ++i) body.set(inner.outputs[i], outputs[i]);
  }
  std::vector<ValueType> outputs(node.outputs.size());
  for (size_t i = 0; i < node.outputs.size(); ++i) {
    if (const ValueType* t = node.outputs[i].empty() ? nullptr : body.find(node.outputs[i])) outputs[i] = *t;
  }
  return outputs;
}

void ShapeInference::infer(const Node& node) {
  if (node.op_type == "Constant" && is_default_domain(node.domain) && node.outputs.size() == 1) {
    const Tensor value = constant_value(node);
    if (!value.defined()) return;  // a sparse or string constant: nothing to say
    set(node.outputs[0], type_of(value));
    own_constants_[node.outputs[0]] = value;
    return;
  }
  const std::vector<ValueType> outputs = infer_outputs(node, 0);
  for (size_t i = 0; i < node.outputs.size(); ++i) set(node.outputs[i], outputs[i]);
}

void ShapeInference::infer_graph(const Graph& graph) {
  for (size_t index : topological_order(graph)) infer(graph.nodes[index]);
}

const ValueType* ShapeInference::find(const std::string& value) const {
  auto it = entries_.find(value);
  return it == entries_.end() ? nullptr : &it->second.type;
}

DType ShapeInference::dtype(const std::string& value) const {
  const ValueType* t = find(value);
  return t ? t->dtype : DType::kUndefined;
}

const std::optional<SymbolicShape>& ShapeInference::shape(const std::string& value) const {
  static const std::optional<SymbolicShape> kUnknown;
  const ValueType* t = find(value);
  return t ? t->shape : kUnknown;
}

std::optional<size_t> ShapeInference::rank(const std::string& value) const {
  const auto& s = shape(value);
  return s ? std::optional(s->size()) : std::nullopt;
}

bool ShapeInference::same_shape(const std::string& a, const std::string& b) const {
  if (a == b) return true;
  const auto& sa = shape(a);
  const auto& sb = shape(b);
  if (!sa || !sb || sa->size() != sb->size()) return false;
  for (size_t i = 0; i < sa->size(); ++i) {
    if (!dims_equal((*sa)[i], (*sb)[i])) return false;
  }
  return true;
}

std::map<std::string, ValueType> ShapeInference::types() const {
  std::map<std::string, ValueType> all;
  for (const auto& [name, entry] : entries_) {
    if (entry.type.dtype != DType::kUndefined || entry.type.shape) all[name] = entry.type;
  }
  return all;
}

std::map<std::string, ValueType> infer_types(const Model& model) {
  ShapeInference inference(model.graph, model.opset("").value_or(0), {},
                           [&model](std::string_view domain, std::string_view name) -> const Function* {
                             if (const Function* f = model.function(domain, name)) return f;
                             const FunctionLibrary& library = FunctionLibrary::global();
                             return domain == kOnnxtrainDomain && library.contains(name) ? &library.get(name) : nullptr;
                           });
  inference.infer_graph(model.graph);
  return inference.types();
}

ValueMetadata metadata_of(const std::string& name, const ValueType& type) {
  ValueMetadata m;
  m.name = name;
  m.dtype = type.dtype;
  m.has_shape = type.shape.has_value();
  if (type.shape) {
    for (const Dim& d : *type.shape) {
      m.shape.push_back(d.value.value_or(-1));
      m.dim_names.push_back(d.param);
    }
  }
  return m;
}

}  // namespace onnxtrain::ir

namespace onnxtrain {
namespace {

std::vector<ValueMetadata> describe(const ir::Model& model) {
  std::vector<ValueMetadata> values;
  for (const auto& [name, type] : ir::infer_types(model)) values.push_back(ir::metadata_of(name, type));
  return values;
}

}  // namespace

std::vector<ValueMetadata> infer_types(std::span<const std::byte> model_bytes) {
  return describe(ir::load_model(model_bytes));
}

std::vector<ValueMetadata> infer_types(const std::filesystem::path& model_path) {
  return describe(ir::load_model(model_path));
}

}  // namespace onnxtrain
