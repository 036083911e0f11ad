// Folds a Relu into the convolution before it, for the executor only.
//
// org.onnxtrain::FusedConv <activation = "Relu"> is a Conv (same inputs and attributes)
// that runs oneDNN's ReLU post-op, so its output is written once instead of written, read
// and written again by a separate Relu. The node exists only inside the executor: it is
// never saved, so it needs no function body for other runtimes.
#pragma once

#include <cstddef>

#include "ir/graph.h"

namespace onnxtrain::passes {

// Fuses each Conv (or FusedConv without an activation) whose output only one Relu reads
// (not another node, a subgraph or a graph output). Returns the number of fused pairs.
size_t fuse_conv_relu(ir::Model& model);

}  // namespace onnxtrain::passes
