#include "ir/graph_editor.h"

#include <onnxtrain/error.h>

namespace onnxtrain::ir {

void NameSet::add_graph(const Graph& graph) {
  for (const auto& v : graph.inputs) names_.insert(v.name);
  for (const auto& v : graph.outputs) names_.insert(v.name);
  for (const auto& v : graph.value_info) names_.insert(v.name);
  for (const auto& [name, tensor] : graph.initializers) names_.insert(name);
  for (const Node& node : graph.nodes) {
    if (!node.name.empty()) names_.insert(node.name);
    for (const std::string& in : node.inputs) names_.insert(in);
    for (const std::string& out : node.outputs) names_.insert(out);
    for (const Attribute& a : node.attributes) {
      if (a.g) add_graph(*a.g);
      for (const auto& g : a.graphs) {
        if (g) add_graph(*g);
      }
    }
  }
}

void NameSet::reserve(const std::string& name, const std::string& why) {
  if (!claim(name)) {
    throw Error("the model already has a value named '" + name + "', which " + why, ErrorKind::kInvalidArgument);
  }
}

std::string NameSet::fresh(const std::string& base) {
  if (claim(base)) return base;
  for (int i = 1;; ++i) {
    std::string name = base + "_" + std::to_string(i);
    if (claim(name)) return name;
  }
}

std::string GraphEditor::add(std::string op_type, std::vector<std::string> inputs, std::vector<Attribute> attributes,
                             const std::string& output, std::string domain) {
  Node node;
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
  return add("Constant", {}, {attr("value", std::move(value))});
}

}  // namespace onnxtrain::ir
