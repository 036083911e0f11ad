#include "passes/fuse_conv_pool.h"

#include <vector>

#include "passes/conv_fusion.h"

namespace onnxtrain::passes {
namespace {

std::vector<int64_t> ints_or(const ir::Node& node, const char* name, std::vector<int64_t> absent) {
  const ir::Attribute* a = node.attribute(name);
  return a ? a->ints : absent;
}

// MaxPool over 2-D windows without dilation, with floor rounding, explicit or no padding,
// and no Indices output.
bool is_fusable_max_pool(const ir::Node& node) {
  if (node.op_type != "MaxPool" || !node.domain.empty() || node.inputs.size() != 1) return false;
  if (node.outputs.empty() || (node.outputs.size() > 1 && !node.outputs[1].empty())) return false;
  const ir::Attribute* auto_pad = node.attribute("auto_pad");
  if (auto_pad && !auto_pad->s.empty() && auto_pad->s != "NOTSET") return false;
  const ir::Attribute* ceil_mode = node.attribute("ceil_mode");
  if (ceil_mode && ceil_mode->i != 0) return false;
  return ints_or(node, "kernel_shape", {}).size() == 2 &&
         ints_or(node, "dilations", {1, 1}) == std::vector<int64_t>{1, 1} &&
         ints_or(node, "strides", {1, 1}).size() == 2 && ints_or(node, "pads", {0, 0, 0, 0}).size() == 4;
}

// The pool's window, spelled out on the FusedConv.
std::vector<ir::Attribute> pool_attributes(const ir::Node& pool) {
  return {ir::attr("pool", "MaxPool"), ir::attr("pool_kernel_shape", ints_or(pool, "kernel_shape", {})),
          ir::attr("pool_strides", ints_or(pool, "strides", {1, 1})),
          ir::attr("pool_pads", ints_or(pool, "pads", {0, 0, 0, 0}))};
}

}  // namespace

size_t fuse_conv_pool(ir::Model& model) {
  return fold_into_conv(model.graph, is_fusable_max_pool, pool_attributes);
}

}  // namespace onnxtrain::passes
