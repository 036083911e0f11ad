// Folds an inference-mode BatchNormalization into the convolution before it, for the
// executor only.
//
// y = scale * (conv(x, W) + B - mean) / sqrt(var + epsilon) + bias is conv(x, W') + B' with
// W' = W * k and B' = (B - mean) * k + bias per output channel, k = scale / sqrt(var +
// epsilon): one pass over the output instead of two. Exporters leave BatchNormalization in
// place when they do not fold it themselves (torch.onnx's dynamo exporter, for one).
#pragma once

#include <cstddef>

#include "ir/graph.h"

namespace onnxtrain::passes {

// Folds each BatchNormalization in inference mode whose input is the output of a Conv that
// nothing else reads, when the Conv's weights and bias and the normalization's scale,
// bias, mean and variance are constants (initializers no feed overrides) that no other
// node reads, all float32 or float64. Returns the number of folded nodes.
size_t fold_batch_norm_into_conv(ir::Model& model);

}  // namespace onnxtrain::passes
