// Folds a max pool into the convolution before it, for the executor only.
//
// The pair Conv (or FusedConv) -> MaxPool over 2-D windows without dilation, with floor
// rounding and no Indices output (LeNet, VGG and ResNet stems) becomes
// org.onnxtrain::FusedConv <pool = "MaxPool", pool_kernel_shape, pool_strides, pool_pads>.
// The kernel pools the convolution's result straight from the layout the convolution
// computed it in, so the full-size output is neither reordered back to NCHW nor written and
// read again (the small CNN's first layer at batch 8: 256 KB). Like the Relu fusion, the
// node never leaves the executor.
#pragma once

#include <cstddef>

#include "ir/graph.h"

namespace onnxtrain::passes {

// Fuses each Conv or FusedConv whose output only such a MaxPool reads (not another node, a
// subgraph or a graph output). Returns the number of fused pairs.
size_t fuse_conv_pool(ir::Model& model);

}  // namespace onnxtrain::passes
