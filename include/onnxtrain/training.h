// The training API: Module, Optimizer and LinearLRScheduler over the artifacts that
// generate_artifacts writes (see artifacts.h), with the state in a CheckpointState.
//
//   onnxtrain::CheckpointState state = onnxtrain::load_checkpoint("checkpoint");
//   onnxtrain::Module model("training_model.onnx", state, "eval_model.onnx");
//   onnxtrain::Optimizer optimizer("optimizer_model.onnx", model);
//   for (...) {
//     std::vector<onnxtrain::Tensor> outputs = model.train_step({images, labels});  // loss first
//     optimizer.step();
//     model.lazy_reset_grad();
//   }
//   onnxtrain::save_checkpoint(state, "checkpoint", /*include_optimizer_state=*/true);
//   model.export_model_for_inferencing("inference.onnx", {"output-0"});
//
// The sessions read the parameters straight from the state's buffers (no copies); the
// training step accumulates each gradient into Parameter::grad in place, and the optimizer
// updates Parameter::data and its moments in place. Tensors handed out by the state stay
// the same buffers across steps.
#pragma once

#include <onnxtrain/checkpoint.h>
#include <onnxtrain/inference_session.h>
#include <onnxtrain/tensor.h>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

namespace onnxtrain {

namespace runtime {
class Executor;
}

class Module {
 public:
  // `state` must outlive the Module. Throws an Error naming the file when a model cannot be
  // read, and naming the parameter when the state lacks one the model takes as input or
  // holds one of another shape or element type. A nominal state (a nominal checkpoint: no
  // values; onnxruntime-training's has no shapes either) gets its parameters shaped as the
  // training model's inputs, zeros; the values come in by copy_buffer_to_parameters, and
  // until then the steps, contiguous_parameters and export_model_for_inferencing throw.
  Module(const std::filesystem::path& train_model_path, CheckpointState& state,
         const std::filesystem::path& eval_model_path = {}, SessionOptions options = {});
  Module(Module&&) noexcept;
  Module& operator=(Module&&) noexcept;
  ~Module();

  // Forward and backward on the training model: returns its user-visible outputs (the loss
  // first) and adds the gradients into each trainable parameter's grad — or, after
  // lazy_reset_grad(), overwrites them. `inputs` are the model's user inputs in order
  // (input_names(true)); an Error names the input and what was expected otherwise.
  std::vector<Tensor> train_step(const std::vector<Tensor>& inputs);
  // Forward and loss on the eval model. Throws when the Module has no eval model.
  std::vector<Tensor> eval_step(const std::vector<Tensor>& inputs);

  // The next train_step overwrites the gradients instead of adding to them.
  void lazy_reset_grad() noexcept { reset_grad_ = true; }
  // True once a train_step has computed gradients (since construction).
  bool has_gradients() const noexcept { return gradient_steps_ > 0; }
  // How many train_steps have computed gradients (since construction).
  int64_t gradient_steps() const noexcept { return gradient_steps_; }

  // The user inputs and outputs of the training (true) or eval (false) model.
  std::vector<std::string> input_names(bool training) const;
  std::vector<std::string> output_names(bool training) const;
  bool has_eval_model() const noexcept { return eval_ != nullptr; }

  // Number of elements of the (trainable, or all) parameters.
  int64_t parameters_size(bool trainable_only) const;
  // The parameters, in the model's order, flattened into one float32 buffer. Throws when
  // a parameter is not float32.
  Tensor contiguous_parameters(bool trainable_only) const;
  // Writes a buffer laid out as contiguous_parameters(trainable_only) back. On a nominal
  // state it must hold every parameter (trainable_only false, unless none is frozen); the
  // state is then no longer nominal.
  void copy_buffer_to_parameters(const Tensor& buffer, bool trainable_only);

  // Writes a plain inference model computing `graph_output_names` (outputs of the eval
  // model, or of the training model when there is none): everything else — loss,
  // gradients, accumulators, label inputs that are no longer needed — is pruned, and the
  // current parameter values become initializers. Written atomically.
  void export_model_for_inferencing(const std::filesystem::path& path,
                                    const std::vector<std::string>& graph_output_names) const;

  CheckpointState& state() noexcept { return *state_; }
  const CheckpointState& state() const noexcept { return *state_; }
  const SessionOptions& session_options() const noexcept { return options_; }

 private:
  struct Model;
  std::vector<Tensor> run(Model& model, const std::vector<Tensor>& inputs, bool training);

  CheckpointState* state_ = nullptr;
  SessionOptions options_;
  std::unique_ptr<Model> train_;
  std::unique_ptr<Model> eval_;
  std::filesystem::path eval_model_path_;
  std::filesystem::path train_model_path_;
  bool reset_grad_ = true;
  int64_t gradient_steps_ = 0;
};

class Optimizer {
 public:
  // Reads the optimizer model; creates zero moments for every trainable parameter the
  // state has none for, and an optimizer state (step 0, learning rate 1e-3) when the
  // checkpoint had none. `module` must outlive the Optimizer.
  Optimizer(const std::filesystem::path& optimizer_model_path, Module& module);
  Optimizer(Optimizer&&) noexcept;
  Optimizer& operator=(Optimizer&&) noexcept;
  ~Optimizer();

  // Updates every trainable parameter in place with its gradient. Throws when no
  // gradient has been computed yet, or when no train_step ran since the last step() (the
  // same gradients would be applied twice).
  void step();
  // Throws unless lr is finite and ≥ 0.
  void set_learning_rate(double lr);
  double learning_rate() const;
  // The number of updates made so far (kept in the checkpoint's optimizer state).
  int64_t step_count() const;

 private:
  struct Model;
  Module* module_ = nullptr;
  std::unique_ptr<Model> model_;
  int64_t applied_gradient_steps_ = 0;  // module_->gradient_steps() at the last step()
};

// lr(t) = initial_lr * t / warmup for t < warmup, then initial_lr * (total - t) / (total -
// warmup), clamped at 0, where t is the optimizer's step count — so a resumed run continues
// the schedule. Sets the optimizer's rate on construction and on every step() (call it
// after Optimizer::step()). Past total_step_count the rate stays 0, as in onnxruntime-training.
// With warmup > total the rate rises over the warm-up and is 0 from its end (as in
// onnxruntime-training's C++ scheduler). Throws for a negative or non-finite initial_lr and
// for a negative step count.
class LinearLRScheduler {
 public:
  LinearLRScheduler(Optimizer& optimizer, int64_t warmup_step_count, int64_t total_step_count, double initial_lr);
  void step();
  double learning_rate() const;

 private:
  Optimizer* optimizer_;
  int64_t warmup_;
  int64_t total_;
  double initial_lr_;
};

}  // namespace onnxtrain
