#include "passes/fuse_conv_relu.h"

#include "passes/conv_fusion.h"

namespace onnxtrain::passes {

size_t fuse_conv_relu(ir::Model& model) {
  return fold_into_conv(
      model.graph,
      [](const ir::Node& node) {
        return node.op_type == "Relu" && node.domain.empty() && node.inputs.size() == 1 && node.outputs.size() == 1;
      },
      [](const ir::Node&) { return std::vector<ir::Attribute>{ir::attr("activation", "Relu")}; });
}

}  // namespace onnxtrain::passes
