// The loss functions generate_artifacts appends to a forward model (see LossKind in
// include/onnxtrain/artifacts.h), written with standard ONNX ops that have gradient rules.
#pragma once

#include <onnxtrain/artifacts.h>

#include <string>
#include <vector>

#include "ir/shape_inference.h"
#include "training/artifacts_graph.h"

namespace onnxtrain::training {

inline constexpr const char* kLossOutput = "loss";

struct LossGraph {
  std::string output;                       // the loss value, "loss"
  std::vector<ir::ValueInfo> label_inputs;  // new graph inputs ("target" or "labels")
};

// Appends the loss of `input` (a forward value of type `input_type`) to the editor's graph.
// Throws an Error naming `input` when its type does not suit the loss, or when the model
// already uses one of the loss's interface names.
LossGraph add_loss(ir::GraphEditor& editor, const LossOptions& options, const std::string& input,
                   const ir::ValueType& input_type);

std::string_view loss_name(LossKind kind);

}  // namespace onnxtrain::training
