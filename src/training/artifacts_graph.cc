#include "training/artifacts_graph.h"

#include <onnxtrain/error.h>

#include "core/dispatch.h"

namespace onnxtrain::training {

GraphEditor::GraphEditor(ir::Graph& graph, std::string prefix) : graph_(graph), prefix_(std::move(prefix)) {
  collect_names(graph_);
}

void GraphEditor::collect_names(const ir::Graph& graph) {
  for (const auto& v : graph.inputs) names_.insert(v.name);
  for (const auto& v : graph.outputs) names_.insert(v.name);
  for (const auto& v : graph.value_info) names_.insert(v.name);
  for (const auto& [name, tensor] : graph.initializers) names_.insert(name);
  for (const ir::Node& node : graph.nodes) {
    if (!node.name.empty()) names_.insert(node.name);
    for (const std::string& in : node.inputs) names_.insert(in);
    for (const std::string& out : node.outputs) names_.insert(out);
    for (const ir::Attribute& a : node.attributes) {
      if (a.g) collect_names(*a.g);
      for (const auto& g : a.graphs) {
        if (g) collect_names(*g);
      }
    }
  }
}

void GraphEditor::reserve(const std::string& name, const std::string& why) {
  if (!names_.insert(name).second) {
    throw Error("the model already has a value named '" + name + "', which " + why, ErrorKind::kInvalidArgument);
  }
}

std::string GraphEditor::fresh_name(const std::string& base) {
  if (names_.insert(base).second) return base;
  for (int i = 1;; ++i) {
    std::string name = base + "_" + std::to_string(i);
    if (names_.insert(name).second) return name;
  }
}

std::string GraphEditor::add(std::string op_type, std::vector<std::string> inputs,
                             std::vector<ir::Attribute> attributes, const std::string& output, std::string domain) {
  ir::Node node;
  node.domain = std::move(domain);
  node.name = fresh_name(prefix_ + "/" + op_type);
  node.op_type = std::move(op_type);
  node.inputs = std::move(inputs);
  node.attributes = std::move(attributes);
  // Output and node names live apart in ONNX; a fresh output shares the node's name.
  node.outputs = {output.empty() ? node.name : output};
  graph_.nodes.push_back(std::move(node));
  return graph_.nodes.back().outputs[0];
}

std::string GraphEditor::constant(Tensor value) {
  return add("Constant", {}, {ir::attr("value", std::move(value))});
}

Tensor float_scalar(DType dtype, double value) {
  return dispatch<ONNXTRAIN_FLOAT_TYPES>(dtype, "a constant", [&]<typename T>() {
    return Tensor::scalar<T>(static_cast<T>(static_cast<compute_type_t<T>>(value)));
  });
}

Tensor float_vector(DType dtype, std::span<const float> values) {
  return dispatch<ONNXTRAIN_FLOAT_TYPES>(dtype, "a constant", [&]<typename T>() {
    std::vector<T> typed;
    for (float v : values) typed.push_back(static_cast<T>(static_cast<compute_type_t<T>>(v)));
    return Tensor::from_vector<T>({static_cast<int64_t>(values.size())}, typed);
  });
}

}  // namespace onnxtrain::training
