// The loss functions: the one builder of every loss onnxtrain offers, for generate_artifacts
// (see LossKind in include/onnxtrain/artifacts.h) and for onnxblock's loss blocks (through
// build_loss_model), written with standard ONNX ops that have gradient rules.
#pragma once

#include <onnxtrain/artifacts.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ir/shape_inference.h"
#include "training/artifacts_graph.h"

namespace onnxtrain::training {

inline constexpr const char* kLossOutput = "loss";

// The value a loss is computed from.
struct LossInput {
  std::string name;
  ir::ValueType type;
  std::optional<int64_t> opset;  // of the default ONNX domain in the model
};

struct LossGraph {
  std::string output;                       // the loss value ("loss" unless named otherwise)
  ir::ValueType output_type;                // a scalar, or the per-element losses' shape
  std::vector<ir::ValueInfo> label_inputs;  // the label ("target" or "labels" unless named otherwise)
};

// Appends the loss of `input` to the editor's graph. The label is not added to the graph's
// inputs (the caller places it). Throws an Error naming `input` when its type does not suit
// the loss, when an option does not suit the loss, or when a name is taken and `names` says
// kError.
LossGraph add_loss(ir::GraphEditor& editor, const LossOptions& options, const LossInput& input,
                   const LossNames& names = {});

std::string_view loss_name(LossKind kind);

}  // namespace onnxtrain::training
