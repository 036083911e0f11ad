// generate_artifacts: forward model -> eval model (forward + loss, parameters as inputs)
// -> training model (the eval model's gradient graph, gradients accumulated in place)
// -> optimizer model and checkpoint. Everything is built in memory first and written at
// the end, so a mistake in the request leaves the directory as it was.
#include <onnxtrain/artifacts.h>
#include <onnxtrain/checkpoint.h>
#include <onnxtrain/error.h>
#include <onnxtrain/gradient.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <unordered_map>

#include "autodiff/gradient_builder.h"
#include "ir/functions.h"
#include "ir/onnx_io.h"
#include "ir/shape_inference.h"
#include "passes/fuse_gelu.h"
#include "training/artifacts_graph.h"
#include "training/losses.h"
#include "training/model_interface.h"
#include "training/optimizer_model.h"

namespace onnxtrain {
namespace {

namespace fs = std::filesystem;

// ONNX Runtime's flatbuffer models (.ort) carry the file identifier "ORTM" at byte 4.
bool is_ort_format(std::span<const std::byte> head) {
  return head.size() >= 8 && std::memcmp(head.data() + 4, "ORTM", 4) == 0;
}

[[noreturn]] void reject_ort_format(const std::string& what) {
  throw Error(what +
                  " is an ONNX Runtime flatbuffer (.ort) model; onnxtrain reads ONNX (protobuf) models only: give the "
                  ".onnx model it was converted from",
              ErrorKind::kInvalidArgument);
}

std::string quoted_list(const std::vector<std::string>& names) {
  std::string text;
  for (const std::string& n : names) text += (text.empty() ? "'" : ", '") + n + "'";
  return text;
}

ir::ValueInfo value_info(const std::string& name, DType dtype, std::optional<std::vector<ir::Dim>> shape) {
  ir::ValueInfo v;
  v.name = name;
  v.dtype = dtype;
  v.shape = std::move(shape);
  return v;
}

std::vector<ir::Dim> static_shape(const Shape& shape) {
  std::vector<ir::Dim> dims;
  for (int64_t d : shape) dims.push_back({d, ""});
  return dims;
}

// Everything generate_artifacts writes, built in memory.
struct Artifacts {
  ir::Model training;
  ir::Model eval;
  std::optional<ir::Model> optimizer;
  CheckpointState checkpoint;
};

void write(const Artifacts& artifacts, const fs::path& directory, const ArtifactOptions& options) {
  std::error_code error;
  fs::create_directories(directory, error);
  if (error && !fs::is_directory(directory)) {
    throw Error("cannot create the artifact directory '" + directory.string() + "': " + error.message(),
                ErrorKind::kIO);
  }
  const std::string& prefix = options.prefix;
  ir::save_model(artifacts.training, directory / (prefix + "training_model.onnx"));
  ir::save_model(artifacts.eval, directory / (prefix + "eval_model.onnx"));
  if (artifacts.optimizer) ir::save_model(*artifacts.optimizer, directory / (prefix + "optimizer_model.onnx"));
  save_checkpoint(artifacts.checkpoint, directory / (prefix + "checkpoint"), /*include_optimizer_state=*/true);
  if (options.nominal_checkpoint) {
    save_nominal_checkpoint(artifacts.checkpoint, directory / (prefix + "nominal_checkpoint"));
  }
}

class ArtifactBuilder {
 public:
  ArtifactBuilder(ir::Model model, const ArtifactOptions& options) : forward_(std::move(model)), options_(options) {
    passes::fuse_gelu(forward_);  // both models run the fused op; the training model has one GeluGrad
    for (const auto& [name, tensor] : forward_.graph.initializers) initializers_.emplace(name, &tensor);
  }

  Artifacts build() {
    select_parameters();
    Artifacts result;
    result.eval = eval_model();
    result.training = training_model(result.eval);  // may freeze parameters without gradient
    track_running_statistics(result.training, result.eval);
    result.checkpoint = checkpoint_from_initializers(forward_.graph.initializers, trainable_, frozen_);
    if (options_.optimizer) {
      std::vector<ir::ValueInfo> trainable;
      for (const std::string& name : trainable_) trainable.push_back(parameter_info(name));
      result.optimizer = training::build_optimizer_model(trainable, *options_.optimizer);
      OptimizerState state;
      state.step = 0;
      state.learning_rate = options_.optimizer->learning_rate;
      result.checkpoint.set_optimizer_state(std::move(state));
    }
    return result;
  }

 private:
  void warn(std::string message) const {
    if (options_.warnings)
      options_.warnings->push_back(std::move(message));
    else
      std::fprintf(stderr, "onnxtrain: warning: %s\n", message.c_str());
  }

  const Tensor* initializer(const std::string& name) const {
    const auto it = initializers_.find(name);
    return it == initializers_.end() ? nullptr : it->second;
  }

  ir::ValueInfo parameter_info(const std::string& name) const {
    const Tensor& t = *initializer(name);
    return value_info(name, t.dtype(), static_shape(t.shape()));
  }

  // Validates requires_grad / frozen_params; fills trainable_ and frozen_ in the model's
  // initializer order (the checkpoint's order).
  void select_parameters() {
    std::map<std::string, bool> wanted;  // name -> trainable
    auto check_name = [&](const std::string& name, const char* list) {
      if (!initializer(name)) {
        throw Error(std::string(list) + ": '" + name + "' is not an initializer of the model",
                    ErrorKind::kInvalidArgument);
      }
    };
    for (const std::string& name : options_.frozen_params) {
      check_name(name, "frozen_params");
      if (!wanted.emplace(name, false).second) {
        throw Error("frozen_params: '" + name + "' appears twice", ErrorKind::kInvalidArgument);
      }
    }
    for (const std::string& name : options_.requires_grad) {
      check_name(name, "requires_grad");
      const auto [it, added] = wanted.emplace(name, true);
      if (!added) {
        throw Error(it->second ? "requires_grad: '" + name + "' appears twice"
                               : "'" + name + "' is listed both in requires_grad and in frozen_params",
                    ErrorKind::kInvalidArgument);
      }
      const DType dtype = initializer(name)->dtype();
      if (!is_floating(dtype)) {
        throw Error("requires_grad: parameter '" + name + "' holds " + std::string(dtype_name(dtype)) +
                        " values; only floating-point parameters can be trained (freeze it instead)",
                    ErrorKind::kInvalidArgument);
      }
    }
    explicit_trainable_ = !options_.requires_grad.empty();
    const std::set<std::string> running = running_statistics();
    std::vector<std::string> constants;
    std::set<std::string> seen;
    for (const auto& [name, tensor] : forward_.graph.initializers) {
      if (!seen.insert(name).second) continue;
      const auto it = wanted.find(name);
      if (it != wanted.end()) {
        (it->second ? trainable_ : frozen_).push_back(name);
      } else if (running.contains(name) && is_floating(tensor.dtype())) {
        frozen_.push_back(name);  // state that training updates, not a constant
      } else if (!explicit_trainable_ && is_floating(tensor.dtype())) {
        trainable_.push_back(name);
      } else if (is_floating(tensor.dtype())) {
        constants.push_back(name);
      }
    }
    if (!constants.empty()) {
      warn(
          "initializers neither in requires_grad nor in frozen_params stay constants of the models (not in the "
          "checkpoint): " +
          quoted_list(constants));
    }
    if (trainable_.empty()) {
      throw Error("no parameter to train: the model has no floating-point initializer outside frozen_params",
                  ErrorKind::kInvalidArgument);
    }
  }

  bool is_value(const std::string& name) const {
    const ir::Graph& g = forward_.graph;
    if (std::any_of(g.outputs.begin(), g.outputs.end(), [&](const auto& v) { return v.name == name; })) return true;
    return std::any_of(g.nodes.begin(), g.nodes.end(), [&](const ir::Node& n) {
      return std::find(n.outputs.begin(), n.outputs.end(), name) != n.outputs.end();
    });
  }

  ir::Model eval_model() {
    const LossOptions& loss = options_.loss;
    std::vector<std::string> loss_inputs = options_.loss_input_names;
    if (loss_inputs.empty()) {
      if (forward_.graph.outputs.empty()) throw Error("the model has no outputs", ErrorKind::kInvalidModel);
      loss_inputs = {forward_.graph.outputs[0].name};
    }
    for (const std::string& name : loss_inputs) {
      if (!is_value(name)) {
        throw Error("loss_input_names: '" + name + "' is not an output (or a node output) of the model",
                    ErrorKind::kInvalidArgument);
      }
    }
    if (loss_inputs.size() != 1) {
      throw Error(
          "loss_input_names: the " +
              (loss.kind == LossKind::kNone ? std::string("model's loss is one output")
                                            : std::string(training::loss_name(loss.kind)) + " loss takes one input") +
              ", got " + std::to_string(loss_inputs.size()) + " (" + quoted_list(loss_inputs) + ")",
          ErrorKind::kInvalidArgument);
    }
    const training::ForwardTypes types(forward_);
    const ir::ValueType input_type = types.type_of(loss_inputs[0]);

    ir::Model model = forward_;
    ir::Graph& graph = model.graph;
    std::set<std::string> parameters(trainable_.begin(), trainable_.end());
    parameters.insert(frozen_.begin(), frozen_.end());
    std::vector<ir::ValueInfo> inputs;
    for (const ir::ValueInfo& v : graph.inputs) {
      // Initializers listed as inputs (old exporters) become parameters or constants.
      if (!parameters.contains(v.name) && !graph.initializer(v.name)) inputs.push_back(v);
    }
    std::erase_if(graph.initializers, [&](const auto& entry) { return parameters.contains(entry.first); });

    ir::ValueInfo loss_output;
    std::vector<ir::ValueInfo> labels;
    ir::GraphEditor editor(graph, "loss");
    if (loss.kind == LossKind::kNone) {
      loss_output = value_info(loss_inputs[0], input_type.dtype, input_type.shape);
    } else {
      training::LossGraph added = training::add_loss(editor, loss, {loss_inputs[0], input_type, forward_.opset("")});
      loss_output = value_info(added.output, added.output_type.dtype, added.output_type.shape);
      labels = std::move(added.label_inputs);
    }
    loss_name_ = loss_output.name;

    std::vector<ir::ValueInfo> outputs{loss_output};
    std::set<std::string> output_names{loss_output.name};
    for (const std::string& name : options_.additional_output_names) {
      if (!is_value(name)) {
        throw Error("additional_output_names: '" + name + "' is not an output (or a node output) of the model",
                    ErrorKind::kInvalidArgument);
      }
      if (!output_names.insert(name).second) {
        throw Error("additional_output_names: '" + name + "' is " +
                        (name == loss_output.name ? "the loss output already" : "named twice"),
                    ErrorKind::kInvalidArgument);
      }
      const ir::ValueType type = types.type_of(name);
      outputs.push_back(value_info(name, type.dtype, type.shape));
    }
    eval_outputs_ = outputs;

    inputs.insert(inputs.end(), labels.begin(), labels.end());
    for (const auto& [name, tensor] : forward_.graph.initializers) {
      if (parameters.erase(name)) inputs.push_back(parameter_info(name));  // erase: once per name
    }
    graph.inputs = std::move(inputs);
    graph.outputs = std::move(outputs);
    return model;
  }

  ir::Model training_model(const ir::Model& eval) {
    ir::Model model = eval;
    std::string start = loss_name_;
    const std::optional<std::vector<ir::Dim>>& loss_shape = eval_outputs_.front().shape;
    const bool per_element = options_.loss.kind == LossKind::kNone ? loss_shape && !loss_shape->empty()
                                                                   : options_.loss.reduction == Reduction::kNone;
    if (per_element) {
      // Per-element losses (a builtin loss without reduction, or a model or onnxblock loss
      // output that is not a scalar): differentiate their sum, as torch's
      // loss.backward(torch.ones_like(loss)) does.
      ir::GraphEditor editor(model.graph, "loss");
      start = editor.add("ReduceSum", {loss_name_}, {ir::attr("keepdims", 0)});
    }
    GradientRequest request;
    request.wrt = trainable_;
    request.loss = start;
    model = autodiff::build_gradient_graph(std::move(model), request);

    std::set<std::string> gradients;
    for (const ir::ValueInfo& v : model.graph.outputs) gradients.insert(v.name);
    std::vector<std::string> without_gradient;
    for (const std::string& p : trainable_) {
      if (!gradients.contains(p + "_grad")) without_gradient.push_back(p);
    }
    if (!without_gradient.empty()) {
      if (explicit_trainable_) {
        throw Error("requires_grad: the loss '" + loss_name_ + "' does not depend on " + quoted_list(without_gradient) +
                        " (through floating-point values), so they have no gradient; freeze them instead",
                    ErrorKind::kInvalidArgument);
      }
      warn("the loss '" + loss_name_ + "' does not depend on " + quoted_list(without_gradient) +
           "; they have no gradient and are frozen");
      std::erase_if(trainable_, [&](const std::string& p) {
        return std::find(without_gradient.begin(), without_gradient.end(), p) != without_gradient.end();
      });
      std::set<std::string> frozen(frozen_.begin(), frozen_.end());
      frozen.insert(without_gradient.begin(), without_gradient.end());
      frozen_.clear();
      for (const auto& [name, tensor] : forward_.graph.initializers) {
        if (frozen.erase(name)) frozen_.push_back(name);
      }
      if (trainable_.empty()) {
        throw Error("no parameter to train: the loss '" + loss_name_ + "' depends on no floating-point initializer",
                    ErrorKind::kInvalidArgument);
      }
    }

    ir::Graph& graph = model.graph;
    ir::GraphEditor editor(graph, "accumulation");
    editor.reserve(std::string(training::kLazyResetGrad), "would be the training model's lazy_reset_grad input");
    std::vector<ir::ValueInfo> buffers;
    std::vector<ir::ValueInfo> outputs = eval_outputs_;
    for (const std::string& p : trainable_) {
      const std::string buffer = training::gradient_buffer_input(p);
      const std::string out = training::accumulated_gradient_output(p);
      editor.reserve(buffer, "would be the gradient accumulation buffer of '" + p + "'");
      editor.reserve(out, "would be the accumulated gradient of '" + p + "'");
      editor.add("AccumulateGradient", {p + "_grad", buffer, std::string(training::kLazyResetGrad)}, {}, out,
                 std::string(ir::kOnnxtrainDomain));
      ir::ValueInfo info = parameter_info(p);
      info.name = buffer;
      buffers.push_back(info);
      info.name = out;
      outputs.push_back(info);
    }
    graph.inputs.insert(graph.inputs.end(), buffers.begin(), buffers.end());
    graph.inputs.push_back(value_info(std::string(training::kLazyResetGrad), DType::kBool, std::vector<ir::Dim>{}));
    graph.outputs = std::move(outputs);
    ir::FunctionLibrary::global().add_to(model, "AccumulateGradient");
    return model;
  }

  // The running means and variances of BatchNormalization nodes in training mode.
  std::set<std::string> running_statistics() const {
    std::set<std::string> names;
    for (const ir::Node& node : forward_.graph.nodes) {
      const ir::Attribute* mode = node.attribute("training_mode");
      if (node.op_type != "BatchNormalization" || !node.domain.empty() || !mode || mode->i == 0) continue;
      if (node.inputs.size() == 5) names.insert({node.inputs[3], node.inputs[4]});
    }
    return names;
  }

  // BatchNormalization in training mode whose running mean and variance are frozen
  // parameters: the training model outputs their updates as "<p>.running.out", which
  // Module writes back into the state (what torch does in train mode), and the eval model
  // normalizes with them (what torch does in eval mode). Running statistics left as
  // constants cannot be updated, so those nodes keep the batch statistics in both models.
  void track_running_statistics(ir::Model& training, ir::Model& eval) const {
    const std::set<std::string> frozen(frozen_.begin(), frozen_.end());
    auto tracked = [&](const ir::Node& node) {
      const ir::Attribute* mode = node.attribute("training_mode");
      return node.op_type == "BatchNormalization" && node.domain.empty() && mode && mode->i != 0 &&
             node.inputs.size() == 5 && frozen.contains(node.inputs[3]) && frozen.contains(node.inputs[4]);
    };
    ir::GraphEditor editor(training.graph, "running_statistics");
    std::vector<ir::Node> copies;
    for (ir::Node& node : training.graph.nodes) {
      if (!tracked(node)) continue;
      node.outputs.resize(3);
      for (size_t k = 1; k <= 2; ++k) {
        const std::string& parameter = node.inputs[k + 2];
        const std::string output = training::running_statistic_output(parameter);
        editor.reserve(output, "would be the updated running statistic '" + parameter + "'");
        if (node.outputs[k].empty()) node.outputs[k] = editor.fresh_name(parameter + "/running");
        ir::Node copy;
        copy.name = output + "/Identity";
        copy.op_type = "Identity";
        copy.inputs = {node.outputs[k]};
        copy.outputs = {output};
        copies.push_back(std::move(copy));
        ir::ValueInfo info = parameter_info(parameter);
        info.name = output;
        training.graph.outputs.push_back(std::move(info));
      }
    }
    for (ir::Node& copy : copies) training.graph.nodes.push_back(std::move(copy));
    for (ir::Node& node : eval.graph.nodes) {
      if (!tracked(node)) continue;
      std::erase_if(node.attributes, [](const ir::Attribute& a) { return a.name == "training_mode"; });
      node.outputs.resize(1);
    }
  }

  ir::Model forward_;
  std::unordered_map<std::string, const Tensor*> initializers_;  // the first of each name
  const ArtifactOptions& options_;
  bool explicit_trainable_ = false;
  std::vector<std::string> trainable_;
  std::vector<std::string> frozen_;
  std::string loss_name_;
  std::vector<ir::ValueInfo> eval_outputs_;
};

}  // namespace

void generate_artifacts(const fs::path& model_path, const fs::path& artifact_directory,
                        const ArtifactOptions& options) {
  {
    std::ifstream file(model_path, std::ios::binary);
    char head[8] = {};
    if (file && file.read(head, sizeof head)) {
      if (is_ort_format(std::as_bytes(std::span(head)))) reject_ort_format("'" + model_path.string() + "'");
    }
  }
  write(ArtifactBuilder(ir::load_model(model_path), options).build(), artifact_directory, options);
}

void generate_artifacts(std::span<const std::byte> model_bytes, const fs::path& artifact_directory,
                        const ArtifactOptions& options, const fs::path& base_dir) {
  if (is_ort_format(model_bytes)) reject_ort_format("the model");
  write(ArtifactBuilder(ir::load_model(model_bytes, base_dir), options).build(), artifact_directory, options);
}

}  // namespace onnxtrain
