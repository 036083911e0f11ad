// The training and optimizer models that onnxruntime-training 1.19.2's generate_artifacts
// writes, made runnable by onnxtrain as they are.
//
// training_model.onnx has onnxtrain's interface already (parameters and
// "<p>_grad.accumulation.buffer" as inputs, "lazy_reset_grad", "<p>_grad.accumulation.out"
// as outputs) but accumulates with com.microsoft::InPlaceAccumulatorV2 (buffer, grad,
// overwrite) => (updated_flag): it writes into its input and returns a bool flag. onnxtrain
// graphs are functional, so each such node becomes org.onnxtrain::AccumulateGradient
// (grad, buffer, reset) => (accumulated), whose fused kernel writes into the buffer's
// memory too; the output, same name, then carries the gradient (as onnxtrain's artifacts).
// Three more ops become their org.onnxtrain equals: com.microsoft::GatherGrad (same op, inputs
// in another order) and ORT's MaxPoolGrad (dY, Indices) and AveragePoolGrad (dY), which know
// dX's shape from ORT's static shape inference (org.onnxtrain's take a Shape of the pooled
// input). ORT's
// BatchNormInternal updates the running statistics in place: its two outputs become
// "<p>.running.out" graph outputs, which the Module writes back into the parameters. The other
// com.microsoft ops of that model have kernels (src/ops/cpu/*).
//
// optimizer_model.onnx is one com.microsoft::AdamWOptimizer or SGDOptimizerV2 over
// sequences of all trainable tensors. Instead of running it, the Optimizer reads its
// attributes and applies the same update to each parameter (ort_optimizer_step below).
#pragma once

#include <onnxtrain/checkpoint.h>

#include <optional>
#include <span>
#include <string>
#include <vector>

#include "ir/graph.h"

namespace onnxtrain::training {

inline constexpr std::string_view kOrtDomain = "com.microsoft";

// True when `model` contains a com.microsoft::InPlaceAccumulatorV2 (an ORT training model).
bool is_ort_training_model(const ir::Model& model);

// Rewrites the accumulators of an ORT training model as described above; other models are
// returned unchanged. Throws an Error naming the node when one does not have the shape
// generate_artifacts gives it.
ir::Model adopt_ort_training_model(ir::Model model);

// The update rule of an ORT optimizer model, from its node's attributes (defaults as in
// ORT's contrib op schemas).
struct OrtOptimizerRule {
  enum class Kind { kAdamW, kSGD } kind = Kind::kAdamW;
  float alpha = 0.9f;   // beta1
  float beta = 0.999f;  // beta2
  float epsilon = 1e-8f;
  float weight_decay = 1e-2f;
  int64_t adam_mode = 0;  // 0: torch AdamW; 1: Hugging Face AdamW
  int64_t correct_bias = 1;
};

// The rule of an ORT optimizer model, nullopt for any other model. Throws an Error naming
// `file` for an ORT optimizer model it cannot run (an unknown mode, several nodes).
std::optional<OrtOptimizerRule> ort_optimizer_rule(const ir::Model& model, const std::string& file);

// The moments the rule keeps per parameter, in ORT's names (as its checkpoints hold them).
std::vector<std::string> ort_optimizer_moments(const OrtOptimizerRule& rule);

// One update of `parameter` in place, as ORT's CPU kernel computes it in float: `moments`
// as ort_optimizer_moments names them; `step` counts from 1.
void ort_optimizer_step(const OrtOptimizerRule& rule, float learning_rate, int64_t step, Parameter& parameter,
                        std::span<Tensor* const> moments);

}  // namespace onnxtrain::training
