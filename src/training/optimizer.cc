#include <onnxtrain/training.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <span>

#include "core/dispatch.h"
#include "ir/onnx_io.h"
#include "runtime/executor.h"
#include "training/model_interface.h"
#include "training/ort_training_model.h"

namespace onnxtrain {
namespace {

std::vector<std::string> split_list(std::string_view text) {
  std::vector<std::string> items;
  while (!text.empty()) {
    const size_t comma = text.find(',');
    if (std::string_view item = text.substr(0, comma); !item.empty()) items.emplace_back(item);
    if (comma == std::string_view::npos) break;
    text.remove_prefix(comma + 1);
  }
  return items;
}

std::string metadata(const ir::Model& model, std::string_view key) {
  for (const auto& [k, v] : model.metadata_props) {
    if (k == key) return v;
  }
  return {};
}

// A scalar of `dtype` (float32 or float64) holding `value`.
// `scalar` holding `value` as `dtype`: written in place once it has that type (a step
// allocates nothing for its scalars).
void set_scalar(Tensor& scalar, DType dtype, double value) {
  if (!scalar.defined() || scalar.dtype() != dtype) scalar = Tensor::zeros(dtype, {});
  dispatch<float, double, int64_t>(dtype, "optimizer scalar",
                                   [&]<typename T>() { scalar.data<T>()[0] = static_cast<T>(value); });
}

}  // namespace

struct Optimizer::Model {
  std::string file;
  std::unique_ptr<runtime::Executor> executor;
  std::vector<std::string> parameters;    // trained, in the model's input order
  std::vector<size_t> parameter_indices;  // per parameter, into state.parameters()
  std::vector<std::string> moments;       // per parameter, e.g. exp_avg, exp_avg_sq
  DType learning_rate_dtype = DType::kFloat32;
  std::vector<std::string> output_names;
  // Named once, in a fixed order: learning rate, step, then per parameter the parameter,
  // its gradient and its moments. A step points them at the state's tensors (the same ones
  // from step to step), so it builds no name and copies no shape.
  NamedTensors feeds;
  std::vector<Tensor> destinations;    // per output: the parameter, then its moments
  runtime::Executor::Binding binding;  // of feeds and output_names
  // Set for onnxruntime-training's optimizer_model.onnx, which runs as this rule instead.
  std::optional<training::OrtOptimizerRule> ort_rule;
};

namespace {

// Zeros for each moment the state lacks; a moment of another shape or type is an error.
void prepare_moments(CheckpointState& state, const std::vector<std::string>& parameters,
                     const std::vector<std::string>& moments) {
  if (!state.has_optimizer_state()) state.set_optimizer_state(OptimizerState{0, 1e-3, {}});
  OptimizerState& optimizer = state.optimizer_state();
  for (const std::string& name : parameters) {
    const Tensor& data = state.parameter(name).data;
    auto& slots = optimizer.moments[name];
    for (const std::string& moment : moments) {
      auto [it, fresh] = slots.try_emplace(moment);
      if (fresh) it->second = Tensor::zeros(data.dtype(), data.shape());
      if (it->second.dtype() != data.dtype() || it->second.shape() != data.shape()) {
        throw Error("optimizer state '" + name + "/" + moment + "' is " + std::string(dtype_name(it->second.dtype())) +
                        shape_string(it->second.shape()) + ", but the parameter is " +
                        std::string(dtype_name(data.dtype())) + shape_string(data.shape()),
                    ErrorKind::kInvalidArgument);
      }
    }
  }
}

}  // namespace

Optimizer::Optimizer(const std::filesystem::path& optimizer_model_path, Module& module)
    : module_(&module), model_(std::make_unique<Model>()) {
  Model& m = *model_;
  m.file = optimizer_model_path.filename().string();
  ir::Model ir_model = ir::load_model(optimizer_model_path);
  if (const auto rule = training::ort_optimizer_rule(ir_model, m.file)) {
    // onnxruntime-training's optimizer model updates every trainable parameter.
    m.ort_rule = *rule;
    m.moments = training::ort_optimizer_moments(*rule);
    CheckpointState& state = module.state();
    for (const Parameter& p : state.parameters()) {
      if (!p.requires_grad) continue;
      m.parameters.push_back(p.name);
      m.parameter_indices.push_back(training::parameter_index(state, p.name));
    }
    if (m.parameters.empty())
      throw Error(m.file + " updates no parameter: none requires a gradient", ErrorKind::kInvalidModel);
    prepare_moments(state, m.parameters, m.moments);
    return;
  }
  if (metadata(ir_model, training::kOptimizerMetadata).empty()) {
    throw Error(m.file + " is not an optimizer model: it lacks the metadata '" +
                    std::string(training::kOptimizerMetadata) + "' that generate_artifacts writes",
                ErrorKind::kInvalidModel);
  }
  m.moments = split_list(metadata(ir_model, training::kMomentsMetadata));
  m.executor = std::make_unique<runtime::Executor>(std::move(ir_model), module.session_options());

  std::set<std::string> inputs;
  for (const ValueMetadata& input : m.executor->inputs()) inputs.insert(input.name);
  for (const std::string_view required : {training::kLearningRate, training::kStep}) {
    if (!inputs.contains(std::string(required))) {
      throw Error(m.file + " has no input '" + std::string(required) + "'", ErrorKind::kInvalidModel);
    }
  }
  CheckpointState& state = module.state();
  for (const ValueMetadata& input : m.executor->inputs()) {
    if (input.name == training::kLearningRate) m.learning_rate_dtype = input.dtype;
    if (!inputs.contains(training::gradient_input(input.name))) continue;
    Parameter* p = state.find_parameter(input.name);
    if (p == nullptr) {
      throw Error(m.file + " updates parameter '" + input.name + "', which the checkpoint does not have",
                  ErrorKind::kInvalidArgument);
    }
    m.parameters.push_back(input.name);
    m.output_names.push_back(training::updated_output(input.name));
    for (const std::string& moment : m.moments) {
      m.output_names.push_back(training::updated_output(training::moment_input(input.name, moment)));
    }
  }
  if (m.parameters.empty()) throw Error(m.file + " updates no parameter", ErrorKind::kInvalidModel);
  m.feeds.emplace_back(std::string(training::kLearningRate), Tensor());
  m.feeds.emplace_back(std::string(training::kStep), Tensor());
  for (const std::string& name : m.parameters) {
    m.parameter_indices.push_back(training::parameter_index(state, name));
    m.feeds.emplace_back(name, Tensor());
    m.feeds.emplace_back(training::gradient_input(name), Tensor());
    for (const std::string& moment : m.moments) m.feeds.emplace_back(training::moment_input(name, moment), Tensor());
  }
  m.destinations.resize(m.output_names.size());
  std::vector<std::string> feed_names;
  for (const auto& [name, tensor] : m.feeds) feed_names.push_back(name);
  m.binding = m.executor->bind(feed_names, m.output_names);

  prepare_moments(state, m.parameters, m.moments);
}

Optimizer::Optimizer(Optimizer&&) noexcept = default;
Optimizer& Optimizer::operator=(Optimizer&&) noexcept = default;
Optimizer::~Optimizer() = default;

void Optimizer::step() {
  if (!module_->has_gradients()) {
    throw Error(
        "Optimizer.step(): no gradients have been computed yet; run a training step first "
        "(module.train(); module(*inputs))",
        ErrorKind::kInvalidArgument);
  }
  if (module_->gradient_steps() == applied_gradient_steps_) {
    throw Error(
        "Optimizer.step(): these gradients were applied by the previous step(); run a training step "
        "(module(*inputs)) before the next one",
        ErrorKind::kInvalidArgument);
  }
  Model& m = *model_;
  CheckpointState& state = module_->state();
  OptimizerState& optimizer = state.optimizer_state();
  const int64_t step = optimizer.step + 1;
  const std::span<Parameter> parameters = state.parameters();
  if (m.ort_rule) {
    std::vector<Tensor*> moments(m.moments.size());
    for (size_t index : m.parameter_indices) {
      Parameter& p = parameters[index];
      if (!p.grad.defined()) {
        throw Error(
            "Optimizer.step(): parameter '" + p.name + "' has no gradient; the training model does not train it",
            ErrorKind::kInvalidArgument);
      }
      auto& slots = optimizer.moments.at(p.name);
      for (size_t k = 0; k < m.moments.size(); ++k) moments[k] = &slots.at(m.moments[k]);
      training::ort_optimizer_step(*m.ort_rule, static_cast<float>(optimizer.learning_rate), step, p, moments);
    }
    optimizer.step = step;
    applied_gradient_steps_ = module_->gradient_steps();
    return;
  }

  set_scalar(m.feeds[0].second, m.learning_rate_dtype == DType::kFloat64 ? DType::kFloat64 : DType::kFloat32,
             optimizer.learning_rate);
  set_scalar(m.feeds[1].second, DType::kInt64, static_cast<double>(step));
  size_t slot = 2;
  size_t destination = 0;
  for (size_t i = 0; i < m.parameters.size(); ++i) {
    Parameter& p = parameters[m.parameter_indices[i]];
    if (!p.grad.defined()) {
      throw Error("Optimizer.step(): parameter '" + p.name + "' has no gradient; the training model does not train it",
                  ErrorKind::kInvalidArgument);
    }
    training::point_at(m.feeds[slot++].second, p.data);
    training::point_at(m.feeds[slot++].second, p.grad);
    training::point_at(m.destinations[destination++], p.data);
    const auto& slots = optimizer.moments.at(p.name);  // the state's optimizer state may have been replaced
    for (const std::string& moment : m.moments) {
      const Tensor& value = slots.at(moment);
      training::point_at(m.feeds[slot++].second, value);
      training::point_at(m.destinations[destination++], value);
    }
  }
  m.executor->run(m.binding, m.feeds, m.destinations);
  optimizer.step = step;
  applied_gradient_steps_ = module_->gradient_steps();
}

void Optimizer::set_learning_rate(double lr) {
  if (!(lr >= 0.0 && std::isfinite(lr))) {
    throw Error("learning rate must be finite and ≥ 0, got " + std::to_string(lr), ErrorKind::kInvalidArgument);
  }
  module_->state().optimizer_state().learning_rate = lr;
}

double Optimizer::learning_rate() const {
  return module_->state().optimizer_state().learning_rate;
}

int64_t Optimizer::step_count() const {
  return module_->state().optimizer_state().step;
}

LinearLRScheduler::LinearLRScheduler(Optimizer& optimizer, int64_t warmup_step_count, int64_t total_step_count,
                                     double initial_lr)
    : optimizer_(&optimizer), warmup_(warmup_step_count), total_(total_step_count), initial_lr_(initial_lr) {
  if (!(initial_lr >= 0.0 && std::isfinite(initial_lr))) {
    throw Error("LinearLRScheduler: initial_lr must be finite and ≥ 0, got " + std::to_string(initial_lr),
                ErrorKind::kInvalidArgument);
  }
  // warmup > total is allowed, as onnxruntime-training allows it (the rate rises over the
  // warm-up and is 0 from its end): code written for ORT 1.19.2's Python class, which swaps
  // the two counts, passes them that way round. The Python layer warns about it.
  if (warmup_ < 0 || total_ < 0) {
    throw Error("LinearLRScheduler: warmup_step_count and total_step_count must be ≥ 0, got " +
                    std::to_string(warmup_) + " and " + std::to_string(total_),
                ErrorKind::kInvalidArgument);
  }
  optimizer_->set_learning_rate(learning_rate());
}

double LinearLRScheduler::learning_rate() const {
  const auto t = static_cast<double>(optimizer_->step_count());
  if (t < static_cast<double>(warmup_)) return initial_lr_ * t / static_cast<double>(std::max<int64_t>(1, warmup_));
  const double remaining = static_cast<double>(total_) - t;
  return initial_lr_ * std::max(0.0, remaining / static_cast<double>(std::max<int64_t>(1, total_ - warmup_)));
}

void LinearLRScheduler::step() {
  optimizer_->set_learning_rate(learning_rate());
}

}  // namespace onnxtrain
