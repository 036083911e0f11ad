#include "autodiff/gradient_builder.h"

#include <onnxtrain/error.h>

#include <algorithm>

#include "ir/functions.h"
#include "passes/fuse_gelu.h"
#include "passes/inline_functions.h"

namespace onnxtrain::autodiff {
namespace {

constexpr int64_t kMinOpset = 13;

// Only floating-point values carry gradients; a value whose type is unknown might.
bool differentiable(DType dtype) {
  return dtype == DType::kUndefined || is_floating(dtype);
}

bool is_default_domain(std::string_view domain) {
  return ir::canonical_domain(domain).empty();
}

std::string join_path(const std::vector<std::string>& parts) {
  std::string text;
  for (const std::string& p : parts) text += (text.empty() ? "" : " -> ") + p;
  return text;
}

Tensor scalar_of(DType dtype, double value) {
  switch (dtype) {
    case DType::kFloat32:
      return Tensor::scalar<float>(static_cast<float>(value));
    case DType::kFloat64:
      return Tensor::scalar<double>(value);
    case DType::kFloat16:
      return Tensor::scalar<Float16>(Float16(static_cast<float>(value)));
    case DType::kBFloat16:
      return Tensor::scalar<BFloat16>(BFloat16(static_cast<float>(value)));
    default:
      return {};
  }
}

}  // namespace

ir::Model build_gradient_graph(ir::Model model, const GradientRequest& request) {
  return GradientBuilder(std::move(model), request).build();
}

GradientBuilder::GradientBuilder(ir::Model model, GradientRequest request)
    : model_(std::move(model)), request_(std::move(request)) {}

ir::Model GradientBuilder::build() {
  opset_ = model_.opset("").value_or(0);
  if (opset_ < kMinOpset) {
    throw Error("gradient graphs need the default ONNX opset " + std::to_string(kMinOpset) +
                    " or later; this model imports opset " + std::to_string(opset_) +
                    " (convert it with onnx.version_converter first)",
                ErrorKind::kNotImplemented);
  }
  // GELU spelled out gets one GeluGrad instead of a dozen nodes (unless the request names
  // one of its intermediate values).
  std::vector<std::string> named = request_.wrt;
  named.push_back(request_.loss);
  named.insert(named.end(), request_.outputs.begin(), request_.outputs.end());
  passes::fuse_gelu(model_, named);
  // Calls of model-local functions that have no rule are differentiated through their
  // bodies.
  passes::inline_functions(model_, [](const ir::Node& node, int64_t) {
    return RuleTable::global().find(node.domain, node.op_type) != nullptr;
  });
  index_graph();
  check_request();
  mark_differentiable_paths();
  seed();
  for (auto it = order_.rbegin(); it != order_.rend(); ++it) {
    const ir::Node& node = model_.graph.nodes[*it];
    // A node on a path to the outputs whose outputs got no gradient (read there only by a
    // node without one for that input: CastLike's target, Shape) has nothing to pass back.
    const bool active = std::any_of(node.outputs.begin(), node.outputs.end(), [&](const std::string& o) {
      const auto parts = contributions_.find(o);
      return !o.empty() && backward_.contains(o) && parts != contributions_.end() && !parts->second.empty();
    });
    if (active) differentiate(*it);
  }
  finish();
  return std::move(model_);
}

void GradientBuilder::index_graph() {
  const ir::Graph& graph = model_.graph;
  order_ = ir::topological_order(graph);
  names_.add_graph(graph);
  std::unordered_set<std::string> graph_inputs;
  for (const auto& v : graph.inputs) graph_inputs.insert(v.name);
  for (const auto& [name, tensor] : graph.initializers) {
    if (!graph_inputs.contains(name)) constants_[name] = &tensor;
  }
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    const ir::Node& node = graph.nodes[i];
    for (const std::string& out : node.outputs) {
      if (!out.empty()) producer_[out] = i;
    }
    if (node.op_type == "Constant" && is_default_domain(node.domain) && node.outputs.size() == 1 &&
        node.attributes.size() == 1 && node.attributes[0].name == "value" && node.attributes[0].t.defined()) {
      constants_[node.outputs[0]] = &node.attributes[0].t;
    }
  }
  types_ = std::make_unique<ir::ShapeInference>(graph, opset_, [this](const std::string& name) -> const Tensor* {
    auto it = constants_.find(name);
    return it == constants_.end() ? nullptr : it->second;
  });
  for (size_t i : order_) types_->infer(graph.nodes[i]);
}

void GradientBuilder::check_request() {
  auto exists = [&](const std::string& name) {
    if (producer_.contains(name) || model_.graph.initializer(name)) return true;
    return std::any_of(model_.graph.inputs.begin(), model_.graph.inputs.end(),
                       [&](const ir::ValueInfo& v) { return v.name == name; });
  };
  if (request_.wrt.empty()) {
    throw Error("build_gradient_graph: no values to differentiate (wrt is empty)", ErrorKind::kInvalidArgument);
  }
  std::set<std::string> seen;
  for (const std::string& w : request_.wrt) {
    if (!exists(w)) {
      throw Error("build_gradient_graph: '" + w +
                      "' (in wrt) is neither a graph input, an initializer nor a node output of the model",
                  ErrorKind::kInvalidArgument);
    }
    if (!seen.insert(w).second) {
      throw Error("build_gradient_graph: '" + w + "' appears twice in wrt", ErrorKind::kInvalidArgument);
    }
    if (!differentiable(types_->dtype(w))) {
      throw Error("build_gradient_graph: '" + w + "' (in wrt) has element type " +
                      std::string(dtype_name(types_->dtype(w))) + "; only floating-point values have gradients",
                  ErrorKind::kInvalidArgument);
    }
  }
  if (!request_.loss.empty() && !request_.outputs.empty()) {
    throw Error("build_gradient_graph: give either a loss or outputs with incoming gradients, not both",
                ErrorKind::kInvalidArgument);
  }
  std::string loss = request_.loss;
  if (loss.empty() && request_.outputs.empty()) {
    if (model_.graph.outputs.size() != 1) {
      throw Error("build_gradient_graph: the model has " + std::to_string(model_.graph.outputs.size()) +
                      " outputs; name the loss, or the outputs to start from",
                  ErrorKind::kInvalidArgument);
    }
    loss = model_.graph.outputs[0].name;
  }
  if (!loss.empty()) {
    if (!exists(loss)) {
      throw Error("build_gradient_graph: the loss '" + loss + "' is not a value of the model",
                  ErrorKind::kInvalidArgument);
    }
    if (const auto& shape = types_->shape(loss); shape) {
      for (const ir::Dim& d : *shape) {
        if (d.value == 1) continue;
        throw Error("build_gradient_graph: the loss '" + loss + "' must be a scalar, but its declared shape has " +
                        std::to_string(shape->size()) +
                        " dimensions not all 1; start from outputs with incoming gradients instead",
                    ErrorKind::kInvalidArgument);
      }
    }
    if (!differentiable(types_->dtype(loss))) {
      throw Error("build_gradient_graph: the loss '" + loss + "' is not of a floating-point type",
                  ErrorKind::kInvalidArgument);
    }
    starts_.push_back({loss, ""});
  }
  std::set<std::string> seen_outputs;
  for (const std::string& o : request_.outputs) {
    if (!exists(o)) {
      throw Error("build_gradient_graph: the output '" + o + "' is not a value of the model",
                  ErrorKind::kInvalidArgument);
    }
    if (!seen_outputs.insert(o).second) {
      throw Error("build_gradient_graph: '" + o + "' appears twice in outputs", ErrorKind::kInvalidArgument);
    }
    if (!differentiable(types_->dtype(o))) {
      throw Error("build_gradient_graph: the output '" + o + "' has element type " +
                      std::string(dtype_name(types_->dtype(o))) + "; only floating-point outputs carry gradients",
                  ErrorKind::kInvalidArgument);
    }
    starts_.push_back({o, o + "_grad"});
  }
  // The names the result must have are reserved before anything else is named.
  std::set<std::string> reserved;
  auto reserve = [&](const std::string& name, const std::string& why) {
    if (names_.contains(name) || !reserved.insert(name).second) {
      throw Error("build_gradient_graph: the model already has a value named '" + name + "', which " + why,
                  ErrorKind::kInvalidArgument);
    }
  };
  for (const Start& s : starts_) {
    if (!s.seed.empty()) reserve(s.seed, "would be the incoming gradient of output '" + s.output + "'");
  }
  for (const std::string& w : request_.wrt) reserve(w + "_grad", "would be the gradient of '" + w + "'");
  for (const std::string& name : reserved) names_.claim(name);
}

void GradientBuilder::mark_differentiable_paths() {
  const ir::Graph& graph = model_.graph;
  forward_.insert(request_.wrt.begin(), request_.wrt.end());
  for (size_t i : order_) {
    const ir::Node& node = graph.nodes[i];
    // A control-flow node reads the values its subgraphs read too.
    std::vector<std::string> reads = node.inputs;
    for (std::string& in : ir::outer_scope_reads(node)) reads.push_back(std::move(in));
    const auto from = std::find_if(reads.begin(), reads.end(),
                                   [&](const std::string& in) { return !in.empty() && forward_.contains(in); });
    if (from == reads.end()) continue;
    const bool straight_through = RuleTable::global().straight_through(node.domain, node.op_type);
    for (const std::string& out : node.outputs) {
      if (out.empty() || forward_.contains(out) || !(straight_through || differentiable(types_->dtype(out)))) continue;
      forward_.insert(out);
      forward_parent_[out] = {*from, i};
    }
  }
  for (const Start& s : starts_) {
    if (forward_.contains(s.output)) backward_.insert(s.output);
  }
  for (auto it = order_.rbegin(); it != order_.rend(); ++it) {
    const ir::Node& node = graph.nodes[*it];
    const auto to = std::find_if(node.outputs.begin(), node.outputs.end(),
                                 [&](const std::string& out) { return !out.empty() && backward_.contains(out); });
    if (to == node.outputs.end()) continue;
    std::vector<std::string> reads = node.inputs;
    for (std::string& in : ir::outer_scope_reads(node)) reads.push_back(std::move(in));
    for (const std::string& in : reads) {
      if (in.empty() || !forward_.contains(in) || backward_.contains(in)) continue;
      backward_.insert(in);
      backward_child_[in] = {*it, *to};
    }
  }
}

void GradientBuilder::seed() {
  for (const Start& s : starts_) {
    name_prefix_ = s.output + "_grad";
    const ir::ValueInfo* declared = nullptr;
    for (const auto& v : model_.graph.outputs) {
      if (v.name == s.output) declared = &v;
    }
    if (!s.seed.empty()) {
      ir::ValueInfo input;
      input.name = s.seed;
      input.dtype = types_->dtype(s.output);
      if (declared)
        input.shape = declared->shape;
      else if (types_->shape(s.output))
        input.shape = types_->shape(s.output);
      model_.graph.inputs.push_back(input);
      types_->set_type_like(s.seed, s.output);
      if (backward_.contains(s.output)) contributions_[s.output].push_back(s.seed);
      continue;
    }
    if (!backward_.contains(s.output)) continue;
    const DType dtype = types_->dtype(s.output);
    std::string one = dtype == DType::kUndefined
                          ? add_node("CastLike", "", {constant(Tensor::scalar<float>(1), "one"), s.output}, {}, 1)[0]
                          : constant(scalar_of(dtype, 1.0), "one");
    const auto& shape = types_->shape(s.output);
    if (!shape || !shape->empty()) one = add_node("Expand", "", {one, shape_of(s.output)}, {}, 1)[0];
    types_->set_type_like(one, s.output);
    contributions_[s.output].push_back(one);
  }
}

void GradientBuilder::differentiate(size_t node_index) {
  const ir::Node& node = model_.graph.nodes[node_index];
  const GradientRule rule = RuleTable::global().find(node.domain, node.op_type);
  if (rule == nullptr) {
    throw Error("no gradient rule for op " + (is_default_domain(node.domain) ? "" : node.domain + "::") + node.op_type +
                    ", which " + node.describe() +
                    " runs on the path from a differentiated value to the output: " + path_through(node_index),
                ErrorKind::kNotImplemented);
  }
  current_node_ = node_index;
  name_prefix_ = (node.name.empty() ? node.outputs.at(0) : node.name) + "_grad";
  GradientContext context(*this, node_index);
  rule(context);
}

std::string GradientBuilder::path_through(size_t node_index) const {
  const ir::Node& node = model_.graph.nodes[node_index];
  std::vector<std::string> before;
  for (const std::string& in : node.inputs) {
    if (in.empty() || !backward_.contains(in)) continue;
    for (std::string v = in;;) {
      before.push_back("'" + v + "'");
      auto it = forward_parent_.find(v);
      if (it == forward_parent_.end()) break;
      before.push_back(model_.graph.nodes[it->second.second].describe());
      v = it->second.first;
    }
    break;
  }
  std::reverse(before.begin(), before.end());
  before.push_back(node.describe());
  for (const std::string& out : node.outputs) {
    if (out.empty() || !backward_.contains(out)) continue;
    for (std::string v = out;;) {
      before.push_back("'" + v + "'");
      auto it = backward_child_.find(v);
      if (it == backward_child_.end()) break;
      before.push_back(model_.graph.nodes[it->second.first].describe());
      v = it->second.second;
    }
    break;
  }
  return join_path(before);
}

std::vector<std::string> GradientBuilder::add_node(std::string op_type, std::string domain,
                                                   std::vector<std::string> inputs,
                                                   std::vector<ir::Attribute> attributes, size_t output_count) {
  ir::Node node;
  node.op_type = std::move(op_type);
  node.domain = std::move(domain);
  node.name = names_.fresh(name_prefix_ + "/" + node.op_type);
  node.inputs = std::move(inputs);
  node.attributes = std::move(attributes);
  for (size_t i = 0; i < output_count; ++i) {
    // Output 0 shares the node's (unique) name; value and node names are separate in ONNX.
    node.outputs.push_back(i == 0 ? node.name : names_.fresh(node.name + ":" + std::to_string(i)));
  }
  types_->infer(node);
  std::vector<std::string> outputs = node.outputs;
  backward_nodes_.push_back(std::move(node));
  return outputs;
}

std::string GradientBuilder::constant(Tensor value, const std::string& base) {
  std::string key = std::string(dtype_name(value.dtype())) + shape_string(value.shape()) + ":";
  const auto* bytes = static_cast<const unsigned char*>(value.raw_data());
  for (size_t i = 0; i < value.nbytes(); ++i) key += std::to_string(bytes[i]) + ",";
  if (auto it = constant_cache_.find(key); it != constant_cache_.end()) return it->second;
  const std::string saved_prefix = name_prefix_;
  name_prefix_ = "grad_constants/" + base;
  ir::Attribute a;
  a.name = "value";
  a.type = ir::AttributeType::kTensor;
  a.t = std::move(value);
  std::string name = add_node("Constant", "", {}, {std::move(a)}, 1)[0];
  name_prefix_ = saved_prefix;
  constant_cache_[key] = name;
  return name;
}

std::optional<Shape> GradientBuilder::fixed_shape(const std::string& value) const {
  const ir::Graph& graph = model_.graph;
  const auto input =
      std::find_if(graph.inputs.begin(), graph.inputs.end(), [&](const ir::ValueInfo& v) { return v.name == value; });
  if (input == graph.inputs.end()) {
    const Tensor* initializer = graph.initializer(value);
    return initializer ? std::optional(initializer->shape()) : std::nullopt;
  }
  if (!input->shape) return std::nullopt;
  Shape shape;
  for (const ir::Dim& d : *input->shape) {
    if (!d.value) return std::nullopt;
    shape.push_back(*d.value);
  }
  return shape;
}

std::string GradientBuilder::shape_of(const std::string& value) {
  if (auto it = shape_cache_.find(value); it != shape_cache_.end()) return it->second;
  if (const std::optional<Shape> fixed = fixed_shape(value)) {
    // Nothing to compute at run time (the executor refuses feeds of another shape).
    const std::string name =
        constant(Tensor::from_vector<int64_t>({static_cast<int64_t>(fixed->size())}, *fixed), "shape");
    shape_cache_[value] = name;
    return name;
  }
  ir::Node node;
  node.op_type = "Shape";
  node.name = names_.fresh(value + "_shape");
  node.inputs = {value};
  node.outputs = {node.name};
  types_->infer(node);
  const std::string name = node.outputs[0];
  // Beside the forward pass, so the forward value need not live until the backward pass.
  const bool is_graph_value =
      model_.graph.initializer(value) || std::any_of(model_.graph.inputs.begin(), model_.graph.inputs.end(),
                                                     [&](const ir::ValueInfo& v) { return v.name == value; });
  if (auto p = producer_.find(value); p != producer_.end())
    after_forward_[p->second].push_back(std::move(node));
  else if (is_graph_value)
    before_forward_.push_back(std::move(node));
  else
    backward_nodes_.push_back(std::move(node));
  shape_cache_[value] = name;
  return name;
}

void GradientBuilder::use_function(const std::string& name) {
  const FunctionLibrary& library = FunctionLibrary::global();
  if (library.min_opset(name) > opset_) {
    throw Error("the gradient needs org.onnxtrain::" + name + ", whose body needs opset " +
                    std::to_string(library.min_opset(name)) + "; the model imports opset " + std::to_string(opset_),
                ErrorKind::kNotImplemented);
  }
  used_functions_.insert(name);
}

void GradientBuilder::define_function(ir::Function function) {
  const std::string domain(kOnnxtrainDomain);
  if (!model_.opset(domain)) model_.opset_imports.push_back({domain, 1});
  model_.ir_version = std::max<int64_t>(model_.ir_version, 8);  // model-local functions
  if (model_.function(domain, function.name)) return;
  model_.functions.push_back(std::move(function));
}

std::string GradientBuilder::accumulated_grad(const std::string& value) {
  auto it = contributions_.find(value);
  if (it == contributions_.end() || it->second.empty()) return "";
  std::vector<std::string>& parts = it->second;
  if (parts.size() > 1) {
    const std::string saved_prefix = name_prefix_;
    name_prefix_ = value + "_grad";
    const std::string sum = add_node(parts.size() == 2 ? "Add" : "Sum", "", parts, {}, 1)[0];
    name_prefix_ = saved_prefix;
    types_->set_type_like(sum, value);
    parts = {sum};
  }
  return parts[0];
}

void GradientBuilder::finish() {
  std::unordered_map<std::string, size_t> emitted;  // value -> index in backward_nodes_
  for (size_t i = 0; i < backward_nodes_.size(); ++i) {
    for (const std::string& out : backward_nodes_[i].outputs) emitted[out] = i;
  }
  std::unordered_set<std::string> graph_values;
  for (const auto& v : model_.graph.inputs) graph_values.insert(v.name);
  for (const auto& v : model_.graph.outputs) graph_values.insert(v.name);
  std::map<std::string, std::string> renamed;
  std::unordered_set<std::string> final_names;
  auto resolve = [&](std::string name) {
    for (auto it = renamed.find(name); it != renamed.end(); it = renamed.find(name)) name = it->second;
    return name;
  };
  for (const std::string& w : request_.wrt) {
    name_prefix_ = w + "_grad";
    std::string grad = accumulated_grad(w);
    if (grad.empty()) continue;  // absent: w does not reach the outputs
    grad = resolve(grad);
    const std::string target = w + "_grad";
    const bool renamable = emitted.contains(grad) && !graph_values.contains(grad) && !final_names.contains(grad);
    if (renamable) {
      for (ir::Node& node : backward_nodes_) {
        for (std::string& in : node.inputs) {
          if (in == grad) in = target;
        }
        for (std::string& out : node.outputs) {
          if (out == grad) out = target;
        }
      }
      renamed[grad] = target;
      emitted[target] = emitted[grad];
    } else {
      ir::Node identity;
      identity.op_type = "Identity";
      identity.name = names_.fresh(target + "/Identity");
      identity.inputs = {grad};
      identity.outputs = {target};
      backward_nodes_.push_back(std::move(identity));
    }
    final_names.insert(target);
    ir::ValueInfo info;
    info.name = target;
    info.dtype = types_->dtype(w);
    info.shape = types_->shape(w);
    for (const auto& v : model_.graph.inputs) {
      if (v.name == w && v.shape) info.shape = v.shape;
    }
    model_.graph.outputs.push_back(std::move(info));
  }

  // Nodes: constants and shapes of graph inputs, the forward pass with the shapes of its
  // values beside it, then the backward pass.
  std::vector<ir::Node> nodes = std::move(before_forward_);
  for (size_t i = 0; i < model_.graph.nodes.size(); ++i) {
    nodes.push_back(std::move(model_.graph.nodes[i]));
    if (auto it = after_forward_.find(i); it != after_forward_.end()) {
      for (ir::Node& n : it->second) nodes.push_back(std::move(n));
    }
  }
  for (ir::Node& n : backward_nodes_) nodes.push_back(std::move(n));
  model_.graph.nodes = std::move(nodes);

  for (const std::string& name : used_functions_) FunctionLibrary::global().add_to(model_, name);
}

}  // namespace onnxtrain::autodiff
