#include "passes/inline_functions.h"

#include <onnxtrain/error.h>

#include <unordered_map>

namespace onnxtrain::passes {
namespace {

constexpr int kMaxInlineDepth = 64;

int64_t node_opset(const ir::Model& model, const ir::Node& node) {
  if (node.opset) return node.opset;
  return model.opset(node.domain).value_or(0);
}

int64_t function_opset(const ir::Function& function, const ir::Model& model, const std::string& domain) {
  for (const ir::OpsetImport& o : function.opset_imports) {
    if (ir::canonical_domain(o.domain) == ir::canonical_domain(domain)) return o.version;
  }
  return model.opset(domain).value_or(0);
}

// The body of `function` as called by `call`, with values renamed into the caller's graph.
std::vector<ir::Node> expand_call(const ir::Model& model, const ir::Function& function, const ir::Node& call,
                                  int instance) {
  std::unordered_map<std::string, std::string> rename;
  for (size_t i = 0; i < function.inputs.size(); ++i) {
    rename[function.inputs[i]] = i < call.inputs.size() ? call.inputs[i] : "";
  }
  for (size_t i = 0; i < function.outputs.size(); ++i) {
    rename[function.outputs[i]] = i < call.outputs.size() ? call.outputs[i] : "";
  }
  const std::string prefix = "_inlined" + std::to_string(instance) + "_" + function.name + "/";
  auto value_name = [&](const std::string& name) {
    if (name.empty()) return name;
    auto it = rename.find(name);
    return it != rename.end() ? it->second : prefix + name;
  };
  std::vector<ir::Node> body;
  for (const ir::Node& inner : function.nodes) {
    ir::Node node = inner;
    node.name = prefix + inner.name;
    for (auto& in : node.inputs) in = value_name(in);
    for (auto& out : node.outputs) out = value_name(out);
    node.opset = function_opset(function, model, inner.domain);
    std::vector<ir::Attribute> attributes;
    for (const ir::Attribute& a : inner.attributes) {
      if (a.ref_attr_name.empty()) {
        attributes.push_back(a);
        continue;
      }
      const ir::Attribute* bound = call.attribute(a.ref_attr_name);
      if (bound == nullptr) {
        for (const ir::Attribute& d : function.attribute_defaults) {
          if (d.name == a.ref_attr_name) bound = &d;
        }
      }
      if (bound == nullptr) continue;  // an optional attribute the caller left out
      ir::Attribute copy = *bound;
      copy.name = a.name;
      attributes.push_back(std::move(copy));
    }
    node.attributes = std::move(attributes);
    body.push_back(std::move(node));
  }
  return body;
}

}  // namespace

void inline_functions(ir::Model& model, const std::function<bool(const ir::Node&, int64_t)>& has_kernel) {
  if (model.functions.empty()) return;
  int instance = 0;
  for (int depth = 0;; ++depth) {
    bool changed = false;
    std::vector<ir::Node> nodes;
    for (ir::Node& node : model.graph.nodes) {
      const ir::Function* function = model.function(node.domain, node.op_type);
      if (function == nullptr || has_kernel(node, node_opset(model, node))) {
        nodes.push_back(std::move(node));
        continue;
      }
      if (depth == kMaxInlineDepth) {
        throw Error("function " + node.domain + "::" + node.op_type + " calls itself (inlining went " +
                        std::to_string(kMaxInlineDepth) + " levels deep)",
                    ErrorKind::kInvalidModel);
      }
      for (ir::Node& inner : expand_call(model, *function, node, instance++)) nodes.push_back(std::move(inner));
      changed = true;
    }
    model.graph.nodes = std::move(nodes);
    if (!changed) return;
  }
}

void constants_to_initializers(ir::Model& model) {
  std::vector<ir::Node> nodes;
  for (ir::Node& node : model.graph.nodes) {
    const bool is_constant = node.op_type == "Constant" && ir::canonical_domain(node.domain).empty() &&
                             node.outputs.size() == 1 && node.attributes.size() == 1;
    std::optional<Tensor> value;
    if (is_constant) {
      const ir::Attribute& a = node.attributes[0];
      if (a.name == "value" && a.t.defined()) value = a.t;
      else if (a.name == "value_float") value = Tensor::scalar<float>(a.f);
      else if (a.name == "value_int") value = Tensor::scalar<int64_t>(a.i);
      else if (a.name == "value_floats") value = Tensor::from_vector<float>({static_cast<int64_t>(a.floats.size())}, a.floats);
      else if (a.name == "value_ints") value = Tensor::from_vector<int64_t>({static_cast<int64_t>(a.ints.size())}, a.ints);
    }
    if (!value) {
      nodes.push_back(std::move(node));
      continue;
    }
    model.graph.initializers.emplace_back(node.outputs[0], *value);
  }
  model.graph.nodes = std::move(nodes);
}

}  // namespace onnxtrain::passes
