// Training artifacts: from a forward ONNX model, the four files on-device training runs on.
//
//   onnxtrain::ArtifactOptions options;
//   options.requires_grad = {"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"};
//   options.loss = {onnxtrain::LossKind::kCrossEntropy};
//   options.optimizer = {onnxtrain::OptimizerKind::kAdamW};
//   onnxtrain::generate_artifacts("model.onnx", "artifacts/", options);
//
// writes artifacts/training_model.onnx, eval_model.onnx, optimizer_model.onnx and
// checkpoint (and nominal_checkpoint when asked), each name prefixed by options.prefix.
// Every file is plain ONNX: the ops onnxtrain adds live in the domain "org.onnxtrain" as
// model-local functions with standard-ONNX bodies, so stock onnxruntime runs them too.
//
// The models' interface (what Module and Optimizer bind by name):
//
// eval_model.onnx
//   inputs:  the forward model's inputs, then the loss's label inputs (e.g. "target";
//            CrossEntropy: "labels"), then every checkpoint parameter (trainable and
//            frozen) under its own name
//   outputs: "loss" (when there is a loss; otherwise the forward model's first output is
//            the loss and keeps its name), then the additional outputs
// training_model.onnx
//   inputs:  as eval_model, then per trainable parameter p "<p>_grad.accumulation.buffer",
//            then "lazy_reset_grad" (bool scalar)
//   outputs: as eval_model, then per trainable parameter "<p>_grad.accumulation.out"
//            = lazy_reset_grad ? grad : buffer + grad  (org.onnxtrain::AccumulateGradient,
//            which onnxtrain runs in place on the buffer)
// optimizer_model.onnx
//   inputs:  "learning_rate" (float scalar), "step" (int64 scalar: the number of this
//            update, 1 for the first), then per trainable parameter p: "<p>",
//            "<p>_grad", and one input "<p>.<moment>" per optimizer moment
//            (AdamW: exp_avg, exp_avg_sq; SGD with momentum: momentum_buffer)
//   outputs: per trainable parameter "<p>.out" and "<p>.<moment>.out"
//   metadata_props: "onnxtrain.optimizer" ("AdamW" | "SGD"),
//                   "onnxtrain.moments" (comma-separated moment names, may be empty)
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace onnxtrain {

enum class LossKind {
  kNone,          // the forward model's first output already is the loss
  kMSE,           // mean((input - target)^2); label input "target", input's dtype and shape
  kCrossEntropy,  // SoftmaxCrossEntropyLoss; label input "labels", int64 class indices
  kBCEWithLogits, // torch.nn.BCEWithLogitsLoss; label input "target"
  kL1,            // mean(|input - target|); label input "target"
};

enum class Reduction { kMean, kSum, kNone };

struct LossOptions {
  LossKind kind = LossKind::kNone;
  Reduction reduction = Reduction::kMean;
  // CrossEntropy: class weights (one per class), ignore_index.
  std::vector<float> weight;
  std::optional<int64_t> ignore_index;
  // BCEWithLogits: weight of the positive examples, broadcast against the last axis.
  std::vector<float> pos_weight;
};

enum class OptimizerKind { kAdamW, kSGD };

struct OptimizerOptions {
  OptimizerKind kind = OptimizerKind::kAdamW;
  double learning_rate = 1e-3;  // the initial one, stored in the checkpoint
  // AdamW (torch.optim.AdamW semantics; weight decay decoupled).
  double beta1 = 0.9;
  double beta2 = 0.999;
  double epsilon = 1e-8;
  double weight_decay = 1e-2;  // AdamW's default; SGD uses sgd_weight_decay
  bool bias_correction = true;
  // SGD (torch.optim.SGD semantics).
  double momentum = 0.0;
  double dampening = 0.0;
  bool nesterov = false;
  double sgd_weight_decay = 0.0;
};

struct ArtifactOptions {
  std::vector<std::string> requires_grad;
  std::vector<std::string> frozen_params;
  LossOptions loss;
  OptimizerOptions optimizer;
  // Which forward outputs feed the loss (default: the first).
  std::vector<std::string> loss_input_names;
  // Extra forward outputs kept in the training and eval models, after the loss.
  std::vector<std::string> additional_output_names;
  std::string prefix;
  bool nominal_checkpoint = false;
  // When set, receives the warnings (initializers neither trainable nor frozen, which stay
  // constants of the models).
  std::vector<std::string>* warnings = nullptr;
};

// Writes the artifacts. Throws onnxtrain::Error naming the parameter, output or op when a
// name is unknown, a trainable parameter is not floating-point, the loss input has the
// wrong type for the loss, or a trainable parameter reaches an op without a gradient.
void generate_artifacts(const std::filesystem::path& model_path, const std::filesystem::path& artifact_directory,
                        const ArtifactOptions& options);

}  // namespace onnxtrain
