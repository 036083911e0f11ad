#include "passes/conv_fusion.h"

#include <unordered_map>
#include <vector>

#include "passes/value_reads.h"

namespace onnxtrain::passes {

size_t fold_into_conv(ir::Graph& graph, const std::function<bool(const ir::Node&)>& follower,
                      const std::function<std::vector<ir::Attribute>(const ir::Node&)>& attributes) {
  const std::unordered_map<std::string, size_t> reads = count_reads(graph);
  std::unordered_map<std::string, size_t> reader;  // value -> the follower node reading it
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    const ir::Node& node = graph.nodes[i];
    if (!node.inputs.empty() && follower(node)) reader[node.inputs[0]] = i;
  }
  std::vector<bool> removed(graph.nodes.size(), false);
  size_t folded = 0;
  for (ir::Node& conv : graph.nodes) {
    const bool plain = conv.op_type == "Conv" && conv.domain.empty();
    const bool fused = conv.op_type == "FusedConv" && conv.domain == "org.onnxtrain";
    if (!(plain || fused) || conv.outputs.size() != 1) continue;
    const auto next = reader.find(conv.outputs[0]);
    if (next == reader.end() || reads.at(conv.outputs[0]) != 1) continue;
    std::vector<ir::Attribute> added = attributes(graph.nodes[next->second]);
    if (conv.attribute(added.front().name)) continue;
    if (plain) {
      conv.domain = "org.onnxtrain";
      conv.op_type = "FusedConv";
      conv.opset = 1;  // the model need not import the domain
    }
    for (ir::Attribute& a : added) conv.attributes.push_back(std::move(a));
    conv.outputs[0] = graph.nodes[next->second].outputs[0];
    removed[next->second] = true;
    ++folded;
  }
  if (folded > 0) erase_nodes(graph, removed);
  return folded;
}

}  // namespace onnxtrain::passes
