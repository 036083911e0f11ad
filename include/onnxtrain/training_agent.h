// TrainingAgent: a gradient model run as two partial runs of one executor plan — the
// forward pass, then, when the caller has the gradients of its outputs, the backward pass
// — for frontends whose own autograd drives the backward (onnxtrain's ORTModule for
// PyTorch), and for users of ONNX Runtime's TrainingAgent.
//
//   onnxtrain::GradientRequest request{{"fc.weight", "x"}, "", {"y"}};
//   std::string model = onnxtrain::build_gradient_graph("model.onnx", request);
//   onnxtrain::TrainingAgent agent(std::as_bytes(std::span(model)), {"y"}, {"fc.weight_grad", "x_grad"});
//   auto [outputs, state] = agent.run_forward({{"x", x}, {"fc.weight", w}});
//   std::vector<onnxtrain::Tensor> grads = agent.run_backward({{"y_grad", dy}}, *state);
//
// The forward runs the steps its outputs need and stops; `state` keeps exactly the values
// the backward reads (intermediates, and the feeds it reads again, by reference: keep
// those alive and unchanged until the backward has run). The backward resumes from the
// state and runs once. Several forwards may be pending at once, each with its own state
// and its own memory; dropping a state whose backward never ran frees what it holds.
#pragma once

#include <onnxtrain/inference_session.h>
#include <onnxtrain/tensor.h>

#include <cstddef>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace onnxtrain {

namespace runtime {
class Executor;
class RunState;
class Stages;
}  // namespace runtime
using RunState = runtime::RunState;

class TrainingAgent {
 public:
  // `model`: a gradient model, e.g. from build_gradient_graph with GradientRequest::outputs.
  // `forward_outputs` and `backward_outputs` are graph outputs; the backward is fed the
  // graph inputs the forward did not read (the "<output>_grad" inputs).
  TrainingAgent(std::span<const std::byte> model, std::vector<std::string> forward_outputs,
                std::vector<std::string> backward_outputs, SessionOptions options = {},
                const std::filesystem::path& base_dir = {});
  TrainingAgent(const std::filesystem::path& model_path, std::vector<std::string> forward_outputs,
                std::vector<std::string> backward_outputs, SessionOptions options = {});
  TrainingAgent(TrainingAgent&&) noexcept;
  TrainingAgent& operator=(TrainingAgent&&) noexcept;
  ~TrainingAgent();

  // The forward outputs, in forward_outputs() order, and the state the backward resumes
  // from. The state keeps the agent's engine alive.
  std::pair<std::vector<Tensor>, std::shared_ptr<RunState>> run_forward(const NamedTensors& feeds);
  // The backward outputs, in backward_outputs() order. Throws when the state's backward
  // has run already, or when a gradient is missing or has the wrong type or shape.
  std::vector<Tensor> run_backward(const NamedTensors& output_grads, RunState& state);
  // True while `state`'s backward has not run.
  static bool backward_pending(const RunState& state);

  const std::vector<std::string>& forward_outputs() const { return forward_outputs_; }
  const std::vector<std::string>& backward_outputs() const { return backward_outputs_; }
  const std::vector<ValueMetadata>& inputs() const;
  const std::vector<ValueMetadata>& outputs() const;

  // With SessionOptions::enable_profiling: writes the per-kernel profile of the forward and
  // backward runs so far (one Chrome-trace JSON, "<profile_file_prefix>_<date>_<time>.json")
  // and returns its path; "" without profiling.
  std::string end_profiling();

 private:
  void prepare();

  std::shared_ptr<runtime::Executor> executor_;
  std::vector<std::string> forward_outputs_;
  std::vector<std::string> backward_outputs_;
  std::unique_ptr<runtime::Stages> stages_;
};

}  // namespace onnxtrain
