// The graph rewrites a session applies when it loads a model, chosen by
// SessionOptions::graph_optimization_level (onnxruntime's levels): one table of the passes and
// the level each needs.
#pragma once

#include <onnxtrain/inference_session.h>

#include <functional>

#include "ir/graph.h"

namespace onnxtrain::passes {

// Applies the passes of `level`. `has_kernel(node, opset)` says whether the runtime runs a
// function call itself (others are inlined, at every level).
void optimize(ir::Model& model, GraphOptimizationLevel level,
              const std::function<bool(const ir::Node&, int64_t)>& has_kernel);

}  // namespace onnxtrain::passes
