// Small tools the artifact builders share: typed constants (and ir::GraphEditor, which
// appends nodes under names nothing else uses).
#pragma once

#include <onnxtrain/tensor.h>

#include <span>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "ir/graph_editor.h"

namespace onnxtrain::training {

// A scalar, or a 1-D tensor of `values`, of the floating-point type `dtype`.
Tensor float_scalar(DType dtype, double value);
Tensor float_vector(DType dtype, std::span<const float> values);

}  // namespace onnxtrain::training
