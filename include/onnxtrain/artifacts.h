// Training artifacts: from a forward ONNX model, the four files on-device training runs on.
//
//   onnxtrain::ArtifactOptions options;
//   options.requires_grad = {"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"};
//   options.loss = {onnxtrain::LossKind::kCrossEntropy};
//   options.optimizer = {onnxtrain::OptimizerKind::kAdamW};
//   onnxtrain::generate_artifacts("model.onnx", "artifacts/", options);
//
// writes artifacts/training_model.onnx, eval_model.onnx, optimizer_model.onnx and
// checkpoint (and nominal_checkpoint when asked), each name prefixed by options.prefix. The
// checkpoint holds the parameters (trainable and frozen) and an optimizer state with step 0,
// the initial learning rate and no moments (the Optimizer starts them at zero).
// Every file is plain ONNX: the ops onnxtrain adds live in the domain "org.onnxtrain" as
// model-local functions with standard-ONNX bodies, so stock onnxruntime runs them too.
//
// The models' interface (what Module and Optimizer bind by name):
//
// eval_model.onnx
//   inputs:  the forward model's inputs, then the loss's label inputs (e.g. "target";
//            CrossEntropy, NLL: "labels"), then every checkpoint parameter (trainable and
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
//   inputs:  "learning_rate" (float scalar; double when every parameter is), "step" (int64 scalar: the number of this
//            update, 1 for the first), then per trainable parameter p: "<p>",
//            "<p>_grad", and one input "<p>.<moment>" per optimizer moment
//            (AdamW: exp_avg, exp_avg_sq; SGD with momentum: momentum_buffer)
//   outputs: per trainable parameter "<p>.out" and "<p>.<moment>.out"
//   nodes:   one org.onnxtrain step per parameter (AdamWStep, SGDStep without momentum,
//            SGDMomentumStep), which onnxtrain runs in place on the parameter and moments;
//            with max_grad_norm, standard ONNX nodes before them that scale every gradient
//            by the clipping coefficient (the "<p>_grad" inputs themselves are not changed)
//   metadata_props: "onnxtrain.optimizer" ("AdamW" | "SGD"),
//                   "onnxtrain.moments" (comma-separated moment names, may be empty)
#pragma once

#include <onnxtrain/inference_session.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace onnxtrain {

enum class LossKind {
  kNone,           // the forward model's first output (or loss_input_names[0]) is the loss
  kMSE,            // mean((input - target)^2); label input "target", input's dtype and shape
  kCrossEntropy,   // SoftmaxCrossEntropyLoss; label input "labels", int64 class indices
  kBCEWithLogits,  // torch.nn.BCEWithLogitsLoss; label input "target"
  kL1,             // mean(|input - target|); label input "target"
  kHuber,          // torch.nn.HuberLoss (delta); label input "target"
  kSmoothL1,       // torch.nn.SmoothL1Loss (beta; 0: L1); label input "target"
  kNLL,            // torch.nn.NLLLoss of log-probabilities [N, C, d...]; label input "labels", int64 [N, d...]
  kKLDiv,          // torch.nn.KLDivLoss of log-probabilities (log_target); label input "target"
};

// kBatchMean: the sum divided by the batch size (axis 0), KLDiv only.
enum class Reduction { kMean, kSum, kNone, kBatchMean };

struct LossOptions {
  LossKind kind = LossKind::kNone;
  Reduction reduction = Reduction::kMean;
  // CrossEntropy, NLL: class weights (one per class); BCEWithLogits: weights of the elements,
  // broadcast against the last axis.
  std::vector<double> weight;
  // CrossEntropy, NLL: the label value that contributes nothing (not even to the mean's
  // denominator).
  std::optional<int64_t> ignore_index;
  // BCEWithLogits: weight of the positive examples, broadcast against the last axis.
  std::vector<double> pos_weight;
  // CrossEntropy: torch's label_smoothing, in [0, 1] (needs opset 13).
  double label_smoothing = 0.0;
  double delta = 1.0;       // Huber: where the quadratic part ends (> 0)
  double beta = 1.0;        // SmoothL1: where the quadratic part ends (>= 0)
  bool log_target = false;  // KLDiv: the target holds log-probabilities
};

// What a loss builder does with a name the model already uses.
enum class TakenName {
  kError,  // throws an Error naming it
  kFresh,  // takes a fresh name made from it ("loss" -> "loss_1")
  kShare,  // labels only: the model's graph input of that name is the label (an earlier
           // loss's); its type is not checked (LossModel's label input has the type wanted)
};

// The names of a loss's interface values. Empty: "loss", and "target" or "labels" (the
// names LossKind lists).
struct LossNames {
  std::string label;
  TakenName label_taken = TakenName::kError;
  std::string output;
  TakenName output_taken = TakenName::kError;
};

enum class OptimizerKind { kAdamW, kSGD };

// AdamW's update rule, numbered as onnxruntime-training's AdamWOptimizer numbers it (its
// adam_mode attribute):
//   kTorch        torch.optim.AdamW: weight decay before the update, epsilon added to the
//                 bias-corrected sqrt(v); scalars in double, as torch computes them.
//   kHuggingFace  Hugging Face's AdamW, which onnxruntime-training 1.19.2's generate_artifacts
//                 writes: epsilon added to sqrt(v) before the bias correction (which scales
//                 the learning rate), weight decay after the update; computed as ORT's CPU
//                 kernel computes it, operation for operation (bitwise equal in float32).
enum class AdamWMode { kTorch = 0, kHuggingFace = 1 };

struct OptimizerOptions {
  OptimizerKind kind = OptimizerKind::kAdamW;
  double learning_rate = 1e-3;  // the initial one, stored in the checkpoint
  // AdamW (weight decay decoupled). The defaults are onnxruntime-training 1.19.2's (its
  // rule, eps 1e-6, no weight decay); torch.optim.AdamW's rule is adam_mode kTorch (torch's
  // own defaults are eps 1e-8, weight decay 0.01).
  AdamWMode adam_mode = AdamWMode::kHuggingFace;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double epsilon = 1e-6;
  double weight_decay = 0.0;  // AdamW's; SGD uses sgd_weight_decay
  bool bias_correction = true;
  // SGD (torch.optim.SGD semantics).
  double momentum = 0.0;
  double dampening = 0.0;
  bool nesterov = false;
  double sgd_weight_decay = 0.0;
  // Gradient clipping by global L2 norm before the update, as torch.nn.utils.clip_grad_norm_
  // and onnxruntime-training's ClipGradNorm: every gradient is scaled by
  // min(1, max_grad_norm / (norm + 1e-6)), where norm is the L2 norm of all gradients together.
  // nullopt: no clipping. Must be > 0.
  std::optional<double> max_grad_norm;
};

struct ArtifactOptions {
  // The initializers to train. Empty: every floating-point initializer that is not in
  // frozen_params and that the loss depends on (the others become frozen, with a warning).
  std::vector<std::string> requires_grad;
  // Initializers kept fixed: parameters of the checkpoint and inputs of the models, but
  // without gradients. Initializers in neither list stay constants of the models (a
  // warning names the floating-point ones).
  std::vector<std::string> frozen_params;
  LossOptions loss;
  // nullopt: no optimizer_model.onnx, and no optimizer state in the checkpoint.
  std::optional<OptimizerOptions> optimizer = OptimizerOptions{};
  // Which forward outputs feed the loss (default: the first). Builtin losses take one; with
  // LossKind::kNone, the one named is the loss.
  std::vector<std::string> loss_input_names;
  // Extra forward values (graph outputs or intermediate values) kept as outputs of the
  // training and eval models, after the loss.
  std::vector<std::string> additional_output_names;
  std::string prefix;
  bool nominal_checkpoint = false;
  // When set, receives the warnings (initializers neither trainable nor frozen, which stay
  // constants of the models); otherwise they are printed to stderr.
  std::vector<std::string>* warnings = nullptr;
};

// Writes the artifacts (creating `artifact_directory` if needed; each file atomically).
// Throws onnxtrain::Error naming the parameter, output or op when a name is unknown or in
// both lists, a trainable parameter is not floating-point or does not reach the loss, the
// loss input has the wrong type for the loss, or a trainable parameter reaches an op
// without a gradient. Nothing is written when it throws before writing.
//
// With Reduction::kNone the loss output holds the per-element losses and the gradients
// are those of their sum (what `loss.sum().backward()` gives in PyTorch).
void generate_artifacts(const std::filesystem::path& model_path, const std::filesystem::path& artifact_directory,
                        const ArtifactOptions& options);
// The same for a serialized model; external data, if any, is looked up under `base_dir`.
void generate_artifacts(std::span<const std::byte> model_bytes, const std::filesystem::path& artifact_directory,
                        const ArtifactOptions& options, const std::filesystem::path& base_dir = {});

// optimizer_model.onnx alone, serialized: `options`' update of the parameters given by name,
// floating-point element type and static shape (what onnxblock's optimizer blocks build).
// Throws onnxtrain::Error when there is none, or one is not floating-point or has no shape.
std::string build_optimizer_model(std::span<const ValueMetadata> parameters, const OptimizerOptions& options);

// One loss built apart from a model, for builders that append it themselves (onnxblock's loss
// blocks): `model` is a serialized ONNX model whose graph inputs are the loss input and the
// label, whose nodes are the loss's (standard ONNX ops, constants as Constant nodes) and whose
// output is the loss. Its names do not clash with the model's (see LossNames); its opsets are
// the model's.
struct LossModel {
  std::string model;
  std::string output;  // the loss output's name
  std::string label;   // the label input's name
};

// The loss `options` of the value `input` of the model (a graph input, an initializer or a
// node output). Its type is what shape inference proves, completed by the model's
// declarations; dimension names are not passed on to the label (exporters name output axes
// freely, and a label must not be tied to an unrelated input axis). Throws onnxtrain::Error
// when `input` is no value of the model, its type is unknown or does not suit the loss, an
// option does not suit the loss, or a name is taken (TakenName::kError).
LossModel build_loss_model(const std::filesystem::path& model_path, const std::string& input,
                           const LossOptions& options, const LossNames& names = {});
// The same for a serialized model; external data, if any, is looked up under `base_dir`.
LossModel build_loss_model(std::span<const std::byte> model_bytes, const std::string& input, const LossOptions& options,
                           const LossNames& names = {}, const std::filesystem::path& base_dir = {});

}  // namespace onnxtrain
