#include "passes/inline_functions.h"

#include <onnxtrain/error.h>

#include <string>

#include "ir/functions.h"

namespace onnxtrain::passes {
namespace {

constexpr int kMaxInlineDepth = 64;

int64_t node_opset(const ir::Model& model, const ir::Node& node) {
  if (node.opset) return node.opset;
  return model.opset(node.domain).value_or(0);
}

// A call of a function that stands for a kernel (ir::kernel_function_name) becomes a node of
// that kernel where there is one, which keeps the call's inputs and attributes.
bool call_kernel(ir::Node& node, int64_t opset, const std::function<bool(const ir::Node&, int64_t)>& has_kernel) {
  const std::string_view kernel = ir::kernel_of_function(node.op_type);
  if (kernel.empty() || ir::canonical_domain(node.domain) != ir::kOnnxtrainDomain) return false;
  ir::Node as_kernel = node;
  as_kernel.op_type = std::string(kernel);
  if (!has_kernel(as_kernel, opset)) return false;
  node = std::move(as_kernel);
  return true;
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
      const int64_t opset = node_opset(model, node);
      if (function == nullptr || has_kernel(node, opset) || call_kernel(node, opset, has_kernel)) {
        nodes.push_back(std::move(node));
        continue;
      }
      if (depth == kMaxInlineDepth) {
        throw Error("function " + node.domain + "::" + node.op_type + " calls itself (inlining went " +
                        std::to_string(kMaxInlineDepth) + " levels deep)",
                    ErrorKind::kInvalidModel);
      }
      const std::string prefix = "_inlined" + std::to_string(instance++) + "_" + function->name + "/";
      for (ir::Node& inner : ir::expand_call(*function, node, prefix)) {
        if (inner.opset == 0) inner.opset = model.opset(inner.domain).value_or(0);  // the function imports none
        nodes.push_back(std::move(inner));
      }
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
      if (a.name == "value" && a.t.defined())
        value = a.t;
      else if (a.name == "value_float")
        value = Tensor::scalar<float>(a.f);
      else if (a.name == "value_int")
        value = Tensor::scalar<int64_t>(a.i);
      else if (a.name == "value_floats")
        value = Tensor::from_vector<float>({static_cast<int64_t>(a.floats.size())}, a.floats);
      else if (a.name == "value_ints")
        value = Tensor::from_vector<int64_t>({static_cast<int64_t>(a.ints.size())}, a.ints);
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
