#include <onnxtrain/training.h>

#include <algorithm>
#include <cstring>
#include <set>
#include <span>
#include <string_view>

#include "ir/onnx_io.h"
#include "runtime/executor.h"
#include "training/model_interface.h"
#include "training/ort_training_model.h"

namespace onnxtrain {
namespace {

std::string list_names(const std::vector<std::string>& names) {
  std::string text;
  for (const auto& name : names) text += (text.empty() ? "" : ", ") + name;
  return text;
}

// The graph inputs and outputs of a training or eval model, sorted by role.
struct ModelRoles {
  std::vector<std::string> user_inputs;
  std::vector<std::string> parameters;        // inputs that the state holds
  std::vector<std::string> gradient_buffers;  // "<p>_grad.accumulation.buffer"
  std::vector<std::string> trained;           // p, per gradient buffer
  bool has_reset_input = false;
  std::vector<std::string> user_outputs;
  std::vector<std::string> gradient_outputs;  // "<p>_grad.accumulation.out", in `trained` order
  std::vector<std::string> running_outputs;   // "<p>.running.out"
  std::vector<std::string> running;           // p, per running output
};

ModelRoles sort_roles(const runtime::Executor& executor, const CheckpointState& state, const std::string& file) {
  ModelRoles roles;
  for (const ValueMetadata& input : executor.inputs()) {
    const std::string& name = input.name;
    if (name == training::kLazyResetGrad) {
      roles.has_reset_input = true;
    } else if (auto p = training::trained_parameter_of_buffer(name)) {
      roles.gradient_buffers.push_back(name);
      roles.trained.push_back(*p);
    } else if (state.has_parameter(name)) {
      roles.parameters.push_back(name);
    } else {
      roles.user_inputs.push_back(name);
    }
  }
  std::set<std::string> produced;
  for (const ValueMetadata& output : executor.outputs()) {
    if (training::trained_parameter_of_output(output.name)) {
      produced.insert(output.name);
    } else if (auto p = training::running_statistic_of_output(output.name); p && state.has_parameter(*p)) {
      roles.running_outputs.push_back(output.name);
      roles.running.push_back(*p);
    } else {
      roles.user_outputs.push_back(output.name);
    }
  }
  for (const std::string& p : roles.trained) {
    if (!state.has_parameter(p)) {
      throw Error(
          file + " trains parameter '" + p + "', which the checkpoint does not have (a checkpoint of another model?)",
          ErrorKind::kInvalidArgument);
    }
    const std::string out = training::accumulated_gradient_output(p);
    if (!produced.contains(out)) {
      throw Error(file + " takes '" + training::gradient_buffer_input(p) + "' but has no output '" + out + "'",
                  ErrorKind::kInvalidModel);
    }
    roles.gradient_outputs.push_back(out);
  }
  return roles;
}

void check_parameter_type(const ValueMetadata& input, const Parameter& parameter, const std::string& file) {
  bool fits = input.dtype == DType::kUndefined || input.dtype == parameter.data.dtype();
  if (input.has_shape) {
    fits = fits && input.shape.size() == parameter.data.rank();
    for (size_t i = 0; fits && i < input.shape.size(); ++i) {
      fits = input.shape[i] < 0 || input.shape[i] == parameter.data.shape()[i];
    }
  }
  if (!fits) {
    throw Error("parameter '" + parameter.name + "' is " + std::string(dtype_name(parameter.data.dtype())) +
                    shape_string(parameter.data.shape()) + " in the checkpoint, but " + file + " takes " +
                    std::string(dtype_name(input.dtype)) + shape_string(input.shape),
                ErrorKind::kInvalidArgument);
  }
}

// A nominal checkpoint holds no values; onnxruntime-training's holds no shapes either (its
// parameters load as scalars). Each parameter the model reads takes the shape the model
// gives it, as zeros, until copy_buffer_to_parameters brings the values in.
void shape_nominal_parameters(const runtime::Executor& executor, CheckpointState& state, const std::string& file) {
  for (const ValueMetadata& input : executor.inputs()) {
    Parameter* p = state.find_parameter(input.name);
    if (p == nullptr) continue;
    const bool fixed =
        input.has_shape && std::all_of(input.shape.begin(), input.shape.end(), [](int64_t d) { return d >= 0; });
    if (!fixed) {
      throw Error("parameter '" + p->name + "' of the nominal checkpoint has no values, and " + file +
                      " gives it no fixed shape " + shape_string(input.shape) + " to take",
                  ErrorKind::kInvalidArgument);
    }
    const Shape shape(input.shape.begin(), input.shape.end());
    if (p->data.shape() != shape) p->data = Tensor::zeros(p->data.dtype(), shape);
  }
}

void refuse_nominal(const CheckpointState& state, const std::string& what) {
  if (state.is_nominal()) {
    throw Error(what +
                    ": the checkpoint is nominal, its parameters hold no values yet; load them with "
                    "copy_buffer_to_parameters(buffer, trainable_only=False) first",
                ErrorKind::kInvalidArgument);
  }
}

std::vector<const Parameter*> selected_parameters(const CheckpointState& state, bool trainable_only) {
  std::vector<const Parameter*> selected;
  for (const Parameter& p : state.parameters()) {
    if (!trainable_only || p.requires_grad) selected.push_back(&p);
  }
  return selected;
}

}  // namespace

struct Module::Model {
  std::string file;
  std::unique_ptr<runtime::Executor> executor;
  ModelRoles roles;
  std::vector<std::string> output_names;  // user outputs, then gradient outputs
  // The feeds, named once, in a fixed order: user inputs, parameters, gradient buffers, the
  // reset flag. A run points them at the current tensors, which are the same state tensors
  // from one step to the next, so a step builds no name and copies no shape.
  NamedTensors feeds;
  std::vector<size_t> parameter_indices;  // per roles.parameters, into state.parameters()
  std::vector<size_t> trained_indices;    // per roles.trained
  std::vector<size_t> running_indices;    // per roles.running
  std::vector<Tensor> destinations;       // per output: undefined for user outputs, then the gradients
  runtime::Executor::Binding binding;     // of feeds and output_names
  Tensor reset_flags[2] = {Tensor::scalar<bool>(false), Tensor::scalar<bool>(true)};

  Model(const std::filesystem::path& path, CheckpointState& state, const SessionOptions& options)
      : file(path.filename().string()),
        executor(
            std::make_unique<runtime::Executor>(training::adopt_ort_training_model(ir::load_model(path)), options)),
        roles(sort_roles(*executor, state, file)) {
    if (state.is_nominal()) shape_nominal_parameters(*executor, state, file);
    for (const ValueMetadata& input : executor->inputs()) {
      if (const Parameter* p = state.find_parameter(input.name)) check_parameter_type(input, *p, file);
    }
    output_names = roles.user_outputs;
    output_names.insert(output_names.end(), roles.gradient_outputs.begin(), roles.gradient_outputs.end());
    output_names.insert(output_names.end(), roles.running_outputs.begin(), roles.running_outputs.end());
    destinations.resize(output_names.size());
    for (const std::string& name : roles.user_inputs) feeds.emplace_back(name, Tensor());
    for (const std::string& name : roles.parameters) {
      feeds.emplace_back(name, Tensor());
      parameter_indices.push_back(training::parameter_index(state, name));
    }
    for (size_t i = 0; i < roles.trained.size(); ++i) {
      feeds.emplace_back(roles.gradient_buffers[i], Tensor());
      trained_indices.push_back(training::parameter_index(state, roles.trained[i]));
    }
    for (const std::string& name : roles.running) running_indices.push_back(training::parameter_index(state, name));
    if (roles.has_reset_input) feeds.emplace_back(std::string(training::kLazyResetGrad), Tensor());
    std::vector<std::string> feed_names;
    for (const auto& [name, tensor] : feeds) feed_names.push_back(name);
    binding = executor->bind(feed_names, output_names);
  }
};

namespace {

// Lets go of the user's input tensors when a run ends, however it ends: they may borrow
// memory (numpy, DLPack) that is only lent for the call.
class UserFeeds {
 public:
  UserFeeds(NamedTensors& feeds, const std::vector<Tensor>& inputs) : feeds_(feeds), count_(inputs.size()) {
    for (size_t i = 0; i < count_; ++i) feeds_[i].second = inputs[i];
  }
  UserFeeds(const UserFeeds&) = delete;
  UserFeeds& operator=(const UserFeeds&) = delete;
  ~UserFeeds() {
    for (size_t i = 0; i < count_; ++i) feeds_[i].second = Tensor();
  }

 private:
  NamedTensors& feeds_;
  size_t count_;
};

}  // namespace

Module::Module(const std::filesystem::path& train_model_path, CheckpointState& state,
               const std::filesystem::path& eval_model_path, SessionOptions options)
    : state_(&state), options_(options), train_model_path_(train_model_path) {
  train_ = std::make_unique<Model>(train_model_path, state, options);
  if (!eval_model_path.empty()) {
    eval_ = std::make_unique<Model>(eval_model_path, state, options);
    eval_model_path_ = eval_model_path;
    if (!eval_->roles.trained.empty()) {
      throw Error(eval_->file + " computes gradients: pass the eval model (forward and loss only) as the eval model",
                  ErrorKind::kInvalidArgument);
    }
  }
  // A parameter the checkpoint holds that no model reads belongs to another model.
  std::set<std::string> read(train_->roles.parameters.begin(), train_->roles.parameters.end());
  for (const Parameter& p : state.parameters()) {
    if (!read.contains(p.name)) {
      // No gradient at all: most likely the inference model, given where the training model goes.
      const std::string why = train_->roles.trained.empty()
                                  ? ", which computes no gradients (not a training model? generate_artifacts "
                                    "writes training_model.onnx)"
                                  : " (a checkpoint of another model?)";
      throw Error("checkpoint parameter '" + p.name + "' is not an input of " + train_->file + why,
                  ErrorKind::kInvalidArgument);
    }
  }
}

Module::Module(Module&&) noexcept = default;
Module& Module::operator=(Module&&) noexcept = default;
Module::~Module() = default;

std::vector<Tensor> Module::run(Model& model, const std::vector<Tensor>& inputs, bool training) {
  refuse_nominal(*state_, training ? "train_step" : "eval_step");
  const ModelRoles& roles = model.roles;
  if (inputs.size() != roles.user_inputs.size()) {
    throw Error(model.file + " takes " + std::to_string(roles.user_inputs.size()) + " inputs (" +
                    list_names(roles.user_inputs) + "), got " + std::to_string(inputs.size()),
                ErrorKind::kInvalidArgument);
  }
  const std::span<Parameter> parameters = state_->parameters();
  size_t slot = inputs.size();
  for (size_t index : model.parameter_indices) training::point_at(model.feeds[slot++].second, parameters[index].data);
  for (size_t i = 0; i < model.trained_indices.size(); ++i) {
    Parameter& p = parameters[model.trained_indices[i]];
    if (!p.grad.defined()) p.grad = Tensor::zeros(p.data.dtype(), p.data.shape());
    training::point_at(model.feeds[slot++].second, p.grad);
    training::point_at(model.destinations[roles.user_outputs.size() + i], p.grad);
  }
  // Running statistics (BatchNorm in training mode) are updated in place in the state.
  const size_t first_running = roles.user_outputs.size() + roles.trained.size();
  for (size_t i = 0; i < model.running_indices.size(); ++i) {
    training::point_at(model.destinations[first_running + i], parameters[model.running_indices[i]].data);
  }
  if (roles.has_reset_input) model.feeds[slot].second = model.reset_flags[reset_grad_ ? 1 : 0];

  const UserFeeds user_feeds(model.feeds, inputs);
  std::vector<Tensor> outputs = model.executor->run(model.binding, model.feeds, model.destinations);
  if (training && !roles.trained.empty()) {
    reset_grad_ = false;
    ++gradient_steps_;
  }
  outputs.resize(roles.user_outputs.size());
  return outputs;
}

std::vector<Tensor> Module::train_step(const std::vector<Tensor>& inputs) {
  return run(*train_, inputs, true);
}

std::vector<Tensor> Module::eval_step(const std::vector<Tensor>& inputs) {
  if (!eval_) {
    throw Error("this Module has no eval model: pass eval_model_uri when creating it", ErrorKind::kInvalidArgument);
  }
  return run(*eval_, inputs, false);
}

std::vector<std::string> Module::input_names(bool training) const {
  if (!training && !eval_) throw Error("this Module has no eval model", ErrorKind::kInvalidArgument);
  return (training ? train_ : eval_)->roles.user_inputs;
}

std::vector<std::string> Module::output_names(bool training) const {
  if (!training && !eval_) throw Error("this Module has no eval model", ErrorKind::kInvalidArgument);
  return (training ? train_ : eval_)->roles.user_outputs;
}

int64_t Module::parameters_size(bool trainable_only) const {
  int64_t size = 0;
  for (const Parameter* p : selected_parameters(*state_, trainable_only)) size += p->data.numel();
  return size;
}

Tensor Module::contiguous_parameters(bool trainable_only) const {
  refuse_nominal(*state_, "get_contiguous_parameters");
  const auto selected = selected_parameters(*state_, trainable_only);
  const DType dtype = selected.empty() ? DType::kFloat32 : selected.front()->data.dtype();
  for (const Parameter* p : selected) {
    if (p->data.dtype() != dtype) {
      throw Error("get_contiguous_parameters: parameter '" + p->name + "' is " +
                      std::string(dtype_name(p->data.dtype())) + " but '" + selected.front()->name + "' is " +
                      std::string(dtype_name(dtype)) + "; one buffer holds one element type",
                  ErrorKind::kInvalidArgument);
    }
  }
  Tensor buffer = Tensor::empty(dtype, {parameters_size(trainable_only)});
  auto* out = static_cast<std::byte*>(buffer.raw_data());
  for (const Parameter* p : selected) {
    std::memcpy(out, p->data.raw_data(), p->data.nbytes());
    out += p->data.nbytes();
  }
  return buffer;
}

void Module::copy_buffer_to_parameters(const Tensor& buffer, bool trainable_only) {
  if (state_->is_nominal() && trainable_only &&
      std::any_of(state_->parameters().begin(), state_->parameters().end(),
                  [](const Parameter& p) { return !p.requires_grad; })) {
    throw Error(
        "copy_buffer_to_parameters: the checkpoint is nominal, so every parameter needs its values, the "
        "frozen ones too: pass trainable_only=False (and a buffer of get_parameters_size(trainable_only=False) "
        "elements)",
        ErrorKind::kInvalidArgument);
  }
  const auto selected = selected_parameters(*state_, trainable_only);
  const int64_t expected = parameters_size(trainable_only);
  if (buffer.numel() != expected) {
    throw Error("copy_buffer_to_parameters: the buffer holds " + std::to_string(buffer.numel()) + " elements, the " +
                    (trainable_only ? "trainable " : "") + "parameters " + std::to_string(expected),
                ErrorKind::kInvalidArgument);
  }
  const auto* in = static_cast<const std::byte*>(buffer.raw_data());
  for (const Parameter* p : selected) {
    if (p->data.dtype() != buffer.dtype()) {
      throw Error("copy_buffer_to_parameters: the buffer is " + std::string(dtype_name(buffer.dtype())) +
                      ", parameter '" + p->name + "' is " + std::string(dtype_name(p->data.dtype())),
                  ErrorKind::kInvalidArgument);
    }
  }
  for (const Parameter* p : selected) {
    Tensor target = p->data;
    std::memcpy(target.raw_data(), in, p->data.nbytes());
    in += p->data.nbytes();
  }
  state_->set_nominal(false);  // every parameter holds values now
}

void Module::export_model_for_inferencing(const std::filesystem::path& path,
                                          const std::vector<std::string>& graph_output_names) const {
  refuse_nominal(*state_, "export_model_for_inferencing");
  const std::filesystem::path& source = eval_ ? eval_model_path_ : train_model_path_;
  ir::Model model = ir::load_model(source);
  training::prune_for_inference(model, graph_output_names, *state_, source.filename().string());
  ir::save_model(model, path);
}

}  // namespace onnxtrain
