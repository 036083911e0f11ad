// What the executor's convolution fusions (fuse_conv_relu, fuse_conv_pool) share: folding the
// one node that reads a convolution's output into an org.onnxtrain::FusedConv.
#pragma once

#include <cstddef>
#include <functional>
#include <vector>

#include "ir/graph.h"

namespace onnxtrain::passes {

// Turns each Conv or FusedConv whose output only one node matching `follower` reads (not
// another node, a subgraph or a graph output) into a FusedConv carrying attributes(follower)
// and writing the follower's output; the follower goes. The first attribute names the
// fusion: a FusedConv that has it already is left alone. Returns the number of folds.
size_t fold_into_conv(ir::Graph& graph, const std::function<bool(const ir::Node&)>& follower,
                      const std::function<std::vector<ir::Attribute>(const ir::Node&)>& attributes);

}  // namespace onnxtrain::passes
