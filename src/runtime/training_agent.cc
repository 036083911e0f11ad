#include <onnxtrain/training_agent.h>

#include "ir/onnx_io.h"
#include "runtime/executor.h"

namespace onnxtrain {

TrainingAgent::TrainingAgent(std::span<const std::byte> model, std::vector<std::string> forward_outputs,
                             std::vector<std::string> backward_outputs, SessionOptions options,
                             const std::filesystem::path& base_dir)
    : executor_(std::make_shared<runtime::Executor>(ir::load_model(model, base_dir), options)),
      forward_outputs_(std::move(forward_outputs)),
      backward_outputs_(std::move(backward_outputs)) {
  prepare();
}

TrainingAgent::TrainingAgent(const std::filesystem::path& model_path, std::vector<std::string> forward_outputs,
                             std::vector<std::string> backward_outputs, SessionOptions options)
    : executor_(std::make_shared<runtime::Executor>(ir::load_model(model_path), options)),
      forward_outputs_(std::move(forward_outputs)),
      backward_outputs_(std::move(backward_outputs)) {
  prepare();
}

TrainingAgent::TrainingAgent(TrainingAgent&&) noexcept = default;
TrainingAgent& TrainingAgent::operator=(TrainingAgent&&) noexcept = default;
TrainingAgent::~TrainingAgent() = default;

void TrainingAgent::prepare() {
  if (forward_outputs_.empty()) throw Error("TrainingAgent: no forward outputs given", ErrorKind::kInvalidArgument);
  stages_ = std::make_unique<runtime::Stages>(executor_->stages({forward_outputs_, backward_outputs_}));
}

std::pair<std::vector<Tensor>, std::shared_ptr<RunState>> TrainingAgent::run_forward(const NamedTensors& feeds) {
  // The deleter holds the engine: a state may be dropped after the agent.
  std::shared_ptr<RunState> state(executor_->start(*stages_).release(),
                                  [executor = executor_](RunState* s) { delete s; });
  std::vector<Tensor> outputs = executor_->run_stage(*state, feeds);
  return {std::move(outputs), std::move(state)};
}

std::vector<Tensor> TrainingAgent::run_backward(const NamedTensors& output_grads, RunState& state) {
  if (state.next_stage() == 0) {
    throw Error("run_backward: this state's forward has not run", ErrorKind::kInvalidArgument);
  }
  return executor_->run_stage(state, output_grads);
}

bool TrainingAgent::backward_pending(const RunState& state) {
  return state.next_stage() < state.stage_count();
}

const std::vector<ValueMetadata>& TrainingAgent::inputs() const {
  return executor_->inputs();
}
const std::vector<ValueMetadata>& TrainingAgent::outputs() const {
  return executor_->outputs();
}

std::string TrainingAgent::end_profiling() {
  return executor_->end_profiling();
}

}  // namespace onnxtrain
