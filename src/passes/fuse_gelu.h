// Finds GELU written out as element-wise ops and replaces each by one Gelu node.
//
// Exporters for opsets before 20 (which has no Gelu op) spell it out:
//   exact: x * 0.5 * (1 + erf(x / sqrt 2))                                  5 nodes
//   tanh:  x * 0.5 * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3)))          8-9 nodes
// in any order of the products. One fused node runs in one pass over memory, and its
// gradient is one node (GeluGrad) where the spelled-out form needs a dozen that keep
// three intermediate tensors alive.
//
// The fused node is the standard Gelu from opset 20 on; before, it is org.onnxtrain::Gelu
// or org.onnxtrain::GeluTanh, model-local functions whose bodies are the same standard
// ops, so the model still runs in any ONNX runtime.
#pragma once

#include <cstddef>
#include <span>
#include <string>

#include "ir/graph.h"

namespace onnxtrain::passes {

// Fuses every match whose intermediate values nothing else reads (not another node, a
// subgraph, a graph output, or the caller: the values named in `keep`). Returns the number
// of fused nodes.
size_t fuse_gelu(ir::Model& model, std::span<const std::string> keep = {});

}  // namespace onnxtrain::passes
