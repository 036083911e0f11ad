// optimizer_model.onnx: one org.onnxtrain optimizer-step node per trainable parameter (see
// include/onnxtrain/artifacts.h for its interface and src/training/functions.cc for the
// steps).
#pragma once

#include <onnxtrain/artifacts.h>

#include <span>
#include <string>
#include <vector>

#include "ir/graph.h"

namespace onnxtrain::training {

// The names of the moments the optimizer keeps per parameter, in input order.
std::vector<std::string> optimizer_moments(const OptimizerOptions& options);

// `parameters`: name, element type and shape of each trainable parameter.
ir::Model build_optimizer_model(std::span<const ir::ValueInfo> parameters, const OptimizerOptions& options);

}  // namespace onnxtrain::training
