#include "passes/value_reads.h"

namespace onnxtrain::passes {
namespace {

void count_graph(const ir::Graph& graph, std::unordered_map<std::string, size_t>& reads) {
  for (const ir::Node& node : graph.nodes) {
    for (const std::string& in : node.inputs) ++reads[in];
    for (const ir::Attribute& a : node.attributes) {
      if (a.g) count_graph(*a.g, reads);
      for (const auto& g : a.graphs) count_graph(*g, reads);
    }
  }
  for (const ir::ValueInfo& v : graph.outputs) ++reads[v.name];
}

}  // namespace

std::unordered_map<std::string, size_t> count_reads(const ir::Graph& graph, std::span<const std::string> keep) {
  std::unordered_map<std::string, size_t> reads;
  for (const std::string& value : keep) ++reads[value];
  count_graph(graph, reads);
  return reads;
}

void erase_nodes(ir::Graph& graph, const std::vector<bool>& removed) {
  std::vector<ir::Node> nodes;
  nodes.reserve(graph.nodes.size());
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    if (!removed[i]) nodes.push_back(std::move(graph.nodes[i]));
  }
  graph.nodes = std::move(nodes);
}

}  // namespace onnxtrain::passes
