#include "autodiff/gradient_context.h"

#include <onnxtrain/error.h>

#include <algorithm>

#include "autodiff/gradient_builder.h"
#include "ir/functions.h"

namespace onnxtrain::autodiff {

const ir::Node& GradientContext::node() const {
  return builder_.model_.graph.nodes[node_index_];
}

int64_t GradientContext::opset() const {
  const ir::Node& n = node();
  return n.opset ? n.opset : builder_.model_.opset(n.domain).value_or(0);
}

const std::string& GradientContext::input(size_t i) const {
  static const std::string kNone;
  return i < input_count() ? node().inputs[i] : kNone;
}

const std::string& GradientContext::output(size_t i) const {
  static const std::string kNone;
  return i < output_count() ? node().outputs[i] : kNone;
}

std::string GradientContext::require_output(size_t i, std::string_view hint) {
  if (has_output(i)) return output(i);
  ir::Node& n = builder_.model_.graph.nodes[node_index_];
  if (n.outputs.size() <= i) n.outputs.resize(i + 1);
  const std::string base = n.outputs[0] + "_" + std::string(hint);
  n.outputs[i] = builder_.names_.fresh(base);
  builder_.producer_[n.outputs[i]] = node_index_;
  builder_.types_->infer(n);
  return n.outputs[i];
}

std::vector<std::string> GradientContext::extend_node(std::vector<ir::Attribute> attributes, size_t first, size_t count,
                                                      std::string_view hint) {
  ir::Node& n = builder_.model_.graph.nodes[node_index_];
  if (n.outputs.size() > first) fail("extend_node: output " + std::to_string(first) + " is taken");
  for (ir::Attribute& a : attributes) {
    auto it = std::find_if(n.attributes.begin(), n.attributes.end(),
                           [&](const ir::Attribute& old) { return old.name == a.name; });
    if (it == n.attributes.end())
      n.attributes.push_back(std::move(a));
    else
      *it = std::move(a);
  }
  n.outputs.resize(first);
  std::vector<std::string> added;
  for (size_t k = 0; k < count; ++k) {
    added.push_back(builder_.names_.fresh(std::string(hint)));
    n.outputs.push_back(added.back());
    builder_.producer_[added.back()] = node_index_;
  }
  builder_.types_->infer(n);
  return added;
}

int64_t GradientContext::attr_int(std::string_view name, int64_t fallback) const {
  const ir::Attribute* a = node().attribute(name);
  if (a == nullptr) return fallback;
  if (a->type != ir::AttributeType::kInt) fail("attribute '" + std::string(name) + "' is not an int");
  return a->i;
}

float GradientContext::attr_float(std::string_view name, float fallback) const {
  const ir::Attribute* a = node().attribute(name);
  if (a == nullptr) return fallback;
  if (a->type != ir::AttributeType::kFloat) fail("attribute '" + std::string(name) + "' is not a float");
  return a->f;
}

std::string GradientContext::attr_string(std::string_view name, std::string fallback) const {
  const ir::Attribute* a = node().attribute(name);
  if (a == nullptr) return fallback;
  if (a->type != ir::AttributeType::kString) fail("attribute '" + std::string(name) + "' is not a string");
  return a->s;
}

std::vector<int64_t> GradientContext::attr_ints(std::string_view name, std::vector<int64_t> fallback) const {
  const ir::Attribute* a = node().attribute(name);
  if (a == nullptr) return fallback;
  if (a->type != ir::AttributeType::kInts) fail("attribute '" + std::string(name) + "' is not a list of ints");
  return a->ints;
}

const Tensor* GradientContext::constant_input(size_t i) const {
  if (!has_input(i)) return nullptr;
  auto it = builder_.constants_.find(input(i));
  return it == builder_.constants_.end() ? nullptr : it->second;
}

std::optional<std::vector<int64_t>> GradientContext::constant_ints(size_t i) const {
  const Tensor* t = constant_input(i);
  if (t == nullptr || !is_integer(t->dtype())) return std::nullopt;
  return t->to_int64_vector();
}

DType GradientContext::dtype(const std::string& value) const {
  return builder_.types_->dtype(value);
}
std::optional<size_t> GradientContext::rank(const std::string& value) const {
  return builder_.types_->rank(value);
}

std::string GradientContext::grad_of_output(size_t i) {
  return has_output(i) ? builder_.accumulated_grad(output(i)) : "";
}

bool GradientContext::needs_grad(size_t i) const {
  return has_input(i) && builder_.backward_.contains(input(i));
}

void GradientContext::set_input_grad(size_t i, const std::string& grad) {
  if (!needs_grad(i) || grad.empty()) return;
  builder_.types_->set_type_like(grad, input(i));
  builder_.contributions_[input(i)].push_back(grad);
}

bool GradientContext::needs_grad_of(const std::string& value) const {
  return !value.empty() && builder_.backward_.contains(value);
}

void GradientContext::add_grad(const std::string& value, const std::string& grad) {
  if (!needs_grad_of(value) || grad.empty()) return;
  builder_.types_->set_type_like(grad, value);
  builder_.contributions_[value].push_back(grad);
}

std::string GradientContext::fresh_name(const std::string& hint) {
  return builder_.names_.fresh(hint);
}

void GradientContext::use_function(const std::string& name) {
  builder_.use_function(name);
}

void GradientContext::use_function(const ir::Function& function) {
  if (FunctionLibrary::global().contains(function.name)) {
    builder_.use_function(function.name);
  } else {
    builder_.define_function(function);
  }
}

const ir::Model& GradientContext::model() const {
  return builder_.model_;
}

const ir::ValueType* GradientContext::type_of(const std::string& value) const {
  return builder_.types_->find(value);
}

std::string GradientContext::emit(std::string op_type, std::vector<std::string> inputs,
                                  std::vector<ir::Attribute> attributes) {
  return builder_.add_node(std::move(op_type), "", std::move(inputs), std::move(attributes), 1)[0];
}

std::vector<std::string> GradientContext::emit_n(std::string op_type, std::vector<std::string> inputs,
                                                 std::vector<ir::Attribute> attributes, size_t output_count) {
  return builder_.add_node(std::move(op_type), "", std::move(inputs), std::move(attributes), output_count);
}

std::string GradientContext::call(std::string name, std::vector<std::string> inputs,
                                  std::vector<ir::Attribute> attributes) {
  return call_n(std::move(name), std::move(inputs), std::move(attributes), 1)[0];
}

std::vector<std::string> GradientContext::call_n(std::string name, std::vector<std::string> inputs,
                                                 std::vector<ir::Attribute> attributes, size_t output_count,
                                                 const std::vector<bool>& wanted) {
  builder_.use_function(name);
  return add_onnxtrain_node(std::move(name), std::move(inputs), std::move(attributes), output_count, wanted);
}

std::vector<std::string> GradientContext::call_function(ir::Function function, std::vector<std::string> inputs,
                                                        std::vector<ir::Attribute> attributes, size_t output_count,
                                                        const std::vector<bool>& wanted) {
  std::string name = function.name;
  builder_.define_function(std::move(function));
  return add_onnxtrain_node(std::move(name), std::move(inputs), std::move(attributes), output_count, wanted);
}

std::vector<std::string> GradientContext::emit_kernel_op(std::string name, std::vector<std::string> inputs,
                                                         std::vector<ir::Attribute> attributes, size_t output_count,
                                                         const std::vector<bool>& wanted) {
  ir::Model& model = builder_.model_;
  const std::string domain(kOnnxtrainDomain);
  if (!model.opset(domain)) model.opset_imports.push_back({domain, 1});
  return add_onnxtrain_node(std::move(name), std::move(inputs), std::move(attributes), output_count, wanted);
}

std::vector<std::string> GradientContext::add_onnxtrain_node(std::string name, std::vector<std::string> inputs,
                                                             std::vector<ir::Attribute> attributes, size_t output_count,
                                                             const std::vector<bool>& wanted) {
  std::vector<std::string> outputs = builder_.add_node(std::move(name), std::string(kOnnxtrainDomain),
                                                       std::move(inputs), std::move(attributes), output_count);
  for (size_t i = 0; i < wanted.size() && i < outputs.size(); ++i) {
    if (wanted[i]) continue;
    outputs[i].clear();
    builder_.backward_nodes_.back().outputs[i].clear();
  }
  return outputs;
}

std::string GradientContext::shape_of(const std::string& value) {
  return builder_.shape_of(value);
}

std::string GradientContext::ints(const std::vector<int64_t>& values) {
  return builder_.constant(Tensor::from_vector<int64_t>({static_cast<int64_t>(values.size())}, values), "ints");
}

std::string GradientContext::int_scalar(int64_t value) {
  return builder_.constant(Tensor::scalar<int64_t>(value), "int");
}

std::string GradientContext::cast_like(const std::string& value, const std::string& like) {
  const DType target = dtype(like);
  if (target != DType::kUndefined) {
    if (dtype(value) == target) return value;
    return emit("Cast", {value}, {attr("to", static_cast<int64_t>(target))});
  }
  if (builder_.opset_ < 15) {
    fail("the element type of '" + like + "' is unknown, and CastLike needs opset 15; declare the type in value_info");
  }
  return emit("CastLike", {value, like});
}

std::string GradientContext::scalar(double value, const std::string& like) {
  switch (dtype(like)) {
    case DType::kFloat32:
      return builder_.constant(Tensor::scalar<float>(static_cast<float>(value)), "scalar");
    case DType::kFloat64:
      return builder_.constant(Tensor::scalar<double>(value), "scalar");
    case DType::kFloat16:
      return builder_.constant(Tensor::scalar<Float16>(Float16(static_cast<float>(value))), "scalar");
    case DType::kBFloat16:
      return builder_.constant(Tensor::scalar<BFloat16>(BFloat16(static_cast<float>(value))), "scalar");
    default:
      return cast_like(builder_.constant(Tensor::scalar<double>(value), "scalar"), like);
  }
}

std::string GradientContext::reduce_to_shape(const std::string& grad, const std::string& value) {
  if (builder_.types_->same_shape(grad, value)) return grad;
  const std::string reduced = call("ReduceToShape", {grad, shape_of(value)});
  builder_.types_->set_type_like(reduced, value);
  return reduced;
}

std::string GradientContext::zeros(const std::string& shape, const std::string& like) {
  const DType d = dtype(like);
  if (is_floating(d)) {
    Tensor zero = Tensor::zeros(d, {1});
    return emit("ConstantOfShape", {shape}, {attr("value", zero)});
  }
  return cast_like(emit("ConstantOfShape", {shape}), like);
}

std::string GradientContext::rank_of(const std::string& value) {
  return emit("Size", {shape_of(value)});
}

void GradientContext::fail(const std::string& message) const {
  throw Error("gradient of " + node().describe() + ": " + message, ErrorKind::kNotImplemented);
}

RuleTable& RuleTable::global() {
  static RuleTable table;
  return table;
}

void RuleTable::add(std::string_view domain, const RuleEntry& entry) {
  domain = ir::canonical_domain(domain);
  if (find(domain, entry.op_type)) {
    throw Error("gradient rule for " + std::string(entry.op_type) + " registered twice");
  }
  entries_.push_back({std::string(domain), std::string(entry.op_type), entry.rule, entry.straight_through});
}

GradientRule RuleTable::find(std::string_view domain, std::string_view op_type) const {
  domain = ir::canonical_domain(domain);
  for (const Entry& e : entries_) {
    if (e.domain == domain && e.op_type == op_type) return e.rule;
  }
  return nullptr;
}

bool RuleTable::straight_through(std::string_view domain, std::string_view op_type) const {
  domain = ir::canonical_domain(domain);
  for (const Entry& e : entries_) {
    if (e.domain == domain && e.op_type == op_type) return e.straight_through;
  }
  return false;
}

std::vector<std::string> RuleTable::op_types(std::string_view domain) const {
  domain = ir::canonical_domain(domain);
  std::vector<std::string> ops;
  for (const Entry& e : entries_) {
    if (e.domain == domain) ops.push_back(e.op_type);
  }
  return ops;
}

std::vector<std::pair<std::string, std::string>> RuleTable::all() const {
  std::vector<std::pair<std::string, std::string>> ops;
  for (const Entry& e : entries_) ops.emplace_back(e.domain, e.op_type);
  return ops;
}

void piecewise_constant(GradientContext& g) {
  const std::string dy = g.grad_of_output(0);
  if (dy.empty() || !g.needs_grad(0)) return;
  g.set_input_grad(0, g.zeros(g.shape_of(g.input(0)), dy));
}

}  // namespace onnxtrain::autodiff
