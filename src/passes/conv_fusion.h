// What the executor's convolution fusions (fuse_conv_relu, fuse_conv_pool) share: folding the
// one node that reads a convolution's output into an org.onnxtrain::FusedConv.
#pragma once

#include <cstddef>
#include <functional>

#include "ir/graph.h"

namespace onnxtrain::passes {

// Turns each Conv or FusedConv (2-D or not: `follower` decides) whose output only one node
// matching `follower` reads (not another node, a subgraph or a graph output) into a
// FusedConv carrying `attribute` and writing the follower's output; the follower goes. A
// FusedConv that already has the attribute is left alone. Returns the number of folds.
size_t fold_into_conv(ir::Graph& graph, const std::function<bool(const ir::Node&)>& follower,
                      const ir::Attribute& attribute);

}  // namespace onnxtrain::passes
