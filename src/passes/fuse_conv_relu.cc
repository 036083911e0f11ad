#include "passes/fuse_conv_relu.h"

#include <unordered_map>
#include <vector>

#include "passes/value_reads.h"

namespace onnxtrain::passes {

size_t fuse_conv_relu(ir::Model& model) {
  ir::Graph& graph = model.graph;
  const std::unordered_map<std::string, size_t> reads = count_reads(graph);
  std::unordered_map<std::string, size_t> relu_reading;  // value -> the Relu node reading it
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    const ir::Node& node = graph.nodes[i];
    if (node.op_type == "Relu" && node.domain.empty() && node.inputs.size() == 1 && node.outputs.size() == 1) {
      relu_reading[node.inputs[0]] = i;
    }
  }
  std::vector<bool> removed(graph.nodes.size(), false);
  size_t fused = 0;
  for (ir::Node& conv : graph.nodes) {
    if (conv.op_type != "Conv" || !conv.domain.empty() || conv.outputs.size() != 1) continue;
    const auto relu = relu_reading.find(conv.outputs[0]);
    if (relu == relu_reading.end() || reads.at(conv.outputs[0]) != 1) continue;
    conv.domain = "org.onnxtrain";
    conv.op_type = "FusedConv";
    conv.opset = 1;  // the model need not import the domain
    conv.attributes.push_back(ir::attr("activation", "Relu"));
    conv.outputs[0] = graph.nodes[relu->second].outputs[0];
    removed[relu->second] = true;
    ++fused;
  }
  if (fused > 0) erase_nodes(graph, removed);
  return fused;
}

}  // namespace onnxtrain::passes
