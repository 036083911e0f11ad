#include "passes/fuse_conv_pool.h"

#include <vector>

#include "passes/conv_fusion.h"

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

}  // namespace

size_t fuse_conv_pool(ir::Model& model) {
  return fold_into_conv(model.graph, is_max_pool_2x2, ir::attr("pool", "MaxPool2x2"));
}

}  // namespace onnxtrain::passes
