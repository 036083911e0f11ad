#include "passes/fuse_conv_pool.h"

#include <unordered_map>
#include <vector>

#include "passes/value_reads.h"

namespace onnxtrain::passes {
namespace {

bool ints_are(const ir::Node& node, const char* name, const std::vector<int64_t>& expected, bool absent_ok) {
  const ir::Attribute* a = node.attribute(name);
  return a ? a->ints == expected : absent_ok;
}

bool int_is(const ir::Node& node, const char* name, int64_t expected) {
  const ir::Attribute* a = node.attribute(name);
  return !a || a->i == expected;
}

// MaxPool over 2 x 2 windows at stride 2 of a 4-D input, without padding or Indices.
bool is_max_pool_2x2(const ir::Node& node) {
  if (node.op_type != "MaxPool" || !node.domain.empty() || node.inputs.size() != 1) return false;
  if (node.outputs.empty() || (node.outputs.size() > 1 && !node.outputs[1].empty())) return false;
  const ir::Attribute* auto_pad = node.attribute("auto_pad");
  if (auto_pad && !auto_pad->s.empty() && auto_pad->s != "NOTSET") return false;
  return ints_are(node, "kernel_shape", {2, 2}, false) && ints_are(node, "strides", {2, 2}, false) &&
         ints_are(node, "pads", {0, 0, 0, 0}, true) && ints_are(node, "dilations", {1, 1}, true) &&
         int_is(node, "ceil_mode", 0);
}

bool is_conv(const ir::Node& node) {
  return node.outputs.size() == 1 && ((node.op_type == "Conv" && node.domain.empty()) ||
                                      (node.op_type == "FusedConv" && node.domain == "org.onnxtrain"));
}

}  // namespace

size_t fuse_conv_pool(ir::Model& model) {
  ir::Graph& graph = model.graph;
  const std::unordered_map<std::string, size_t> reads = count_reads(graph);
  std::unordered_map<std::string, size_t> pool_reading;  // value -> the MaxPool node reading it
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    if (is_max_pool_2x2(graph.nodes[i])) pool_reading[graph.nodes[i].inputs[0]] = i;
  }
  std::vector<bool> removed(graph.nodes.size(), false);
  size_t fused = 0;
  for (ir::Node& conv : graph.nodes) {
    if (!is_conv(conv) || conv.attribute("pool")) continue;
    const auto pool = pool_reading.find(conv.outputs[0]);
    if (pool == pool_reading.end() || reads.at(conv.outputs[0]) != 1) continue;
    if (conv.op_type == "Conv") {
      conv.domain = "org.onnxtrain";
      conv.op_type = "FusedConv";
      conv.opset = 1;  // the model need not import the domain
    }
    conv.attributes.push_back(ir::attr("pool", "MaxPool2x2"));
    conv.outputs[0] = graph.nodes[pool->second].outputs[0];
    removed[pool->second] = true;
    ++fused;
  }
  if (fused > 0) erase_nodes(graph, removed);
  return fused;
}

}  // namespace onnxtrain::passes
