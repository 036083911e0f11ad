// The names by which training artifacts and the training API meet (see
// include/onnxtrain/artifacts.h for the whole interface), and the pruning that turns a
// training or eval model into an inference model.
#pragma once

#include <onnxtrain/checkpoint.h>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ir/graph.h"

namespace onnxtrain::training {

inline constexpr std::string_view kLazyResetGrad = "lazy_reset_grad";
inline constexpr std::string_view kGradientBufferSuffix = "_grad.accumulation.buffer";
inline constexpr std::string_view kAccumulatedGradientSuffix = "_grad.accumulation.out";
inline constexpr std::string_view kLearningRate = "learning_rate";
inline constexpr std::string_view kStep = "step";
inline constexpr std::string_view kOptimizerMetadata = "onnxtrain.optimizer";
inline constexpr std::string_view kMomentsMetadata = "onnxtrain.moments";

inline std::string gradient_buffer_input(std::string_view parameter) {
  return std::string(parameter) + std::string(kGradientBufferSuffix);
}
inline std::string accumulated_gradient_output(std::string_view parameter) {
  return std::string(parameter) + std::string(kAccumulatedGradientSuffix);
}
// The optimizer model's names: "<p>_grad", "<p>.<moment>", "<p>.out", "<p>.<moment>.out".
inline std::string gradient_input(std::string_view parameter) {
  return std::string(parameter) + "_grad";
}
inline std::string moment_input(std::string_view parameter, std::string_view moment) {
  return std::string(parameter) + "." + std::string(moment);
}
inline std::string updated_output(std::string_view input) {
  return std::string(input) + ".out";
}
// The training model's output carrying the new value of a running statistic (BatchNorm's
// running mean or variance, a frozen parameter): "<p>.running.out".
inline constexpr std::string_view kRunningStatisticSuffix = ".running.out";
inline std::string running_statistic_output(std::string_view parameter) {
  return std::string(parameter) + std::string(kRunningStatisticSuffix);
}

// Points `slot` at `tensor` unless it already does. The Module and the Optimizer feed the
// same state tensors on every step, and assigning a Tensor allocates a copy of its shape.
inline void point_at(Tensor& slot, const Tensor& tensor) {
  if (slot.storage() != tensor.storage() || slot.byte_offset() != tensor.byte_offset() ||
      slot.dtype() != tensor.dtype() || slot.shape() != tensor.shape()) {
    slot = tensor;
  }
}

// The index of parameter `name` in state.parameters(), which only ever grows at the end.
inline size_t parameter_index(const CheckpointState& state, std::string_view name) {
  return static_cast<size_t>(&state.parameter(name) - state.parameters().data());
}

// p for "<p>_grad.accumulation.buffer", nullopt for any other name.
std::optional<std::string> trained_parameter_of_buffer(std::string_view input);
// p for "<p>_grad.accumulation.out", nullopt for any other name.
std::optional<std::string> trained_parameter_of_output(std::string_view output);
// p for "<p>.running.out", nullopt for any other name.
std::optional<std::string> running_statistic_of_output(std::string_view output);

// Keeps only what computes `outputs`: the nodes they need, the graph inputs those nodes
// read, and the functions they call; graph inputs that are checkpoint parameters become
// initializers holding the state's current values. Throws an Error naming the output when
// one is not an output of the model (`file` names it).
void prune_for_inference(ir::Model& model, const std::vector<std::string>& outputs, const CheckpointState& state,
                         const std::string& file);

}  // namespace onnxtrain::training
