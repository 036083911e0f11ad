#include "training/optimizer_model.h"

#include <onnxtrain/error.h>

#include <algorithm>
#include <cmath>
#include <unordered_set>

#include "ir/functions.h"
#include "ir/onnx_io.h"
#include "training/artifacts_graph.h"
#include "training/model_interface.h"

namespace onnxtrain::training {
namespace {

constexpr int64_t kOptimizerOpset = 17;

ir::Attribute hyperparameter(std::string name, double value) {
  return ir::attr(std::move(name), Tensor::scalar<double>(value));
}

void check_options(const OptimizerOptions& o) {
  auto require = [](bool ok, const std::string& what) {
    if (!ok) throw Error("optimizer: " + what, ErrorKind::kInvalidArgument);
  };
  require(std::isfinite(o.learning_rate) && o.learning_rate >= 0, "the learning rate must be >= 0");
  require(!o.max_grad_norm || (std::isfinite(*o.max_grad_norm) && *o.max_grad_norm > 0),
          "max_grad_norm (gradient clipping) must be finite and > 0");
  if (o.kind == OptimizerKind::kAdamW) {
    require(o.beta1 >= 0 && o.beta1 < 1, "AdamW's beta1 must be in [0, 1)");
    require(o.beta2 >= 0 && o.beta2 < 1, "AdamW's beta2 must be in [0, 1)");
    require(o.epsilon >= 0, "AdamW's epsilon must be >= 0");
    require(o.weight_decay >= 0, "AdamW's weight_decay must be >= 0");
    require(o.adam_mode == AdamWMode::kTorch || o.adam_mode == AdamWMode::kHuggingFace,
            "AdamW's adam_mode must be torch (0) or huggingface (1)");
    return;
  }
  require(o.momentum >= 0, "SGD's momentum must be >= 0");
  require(o.sgd_weight_decay >= 0, "SGD's weight_decay must be >= 0");
  require(!o.nesterov || (o.momentum > 0 && o.dampening == 0),
          "SGD with nesterov needs a momentum > 0 and zero dampening (as torch.optim.SGD)");
}

ir::ValueInfo scalar_input(std::string name, DType dtype) {
  ir::ValueInfo v;
  v.name = std::move(name);
  v.dtype = dtype;
  v.shape = std::vector<ir::Dim>{};
  return v;
}

ir::ValueInfo renamed(const ir::ValueInfo& like, std::string name) {
  ir::ValueInfo v = like;
  v.name = std::move(name);
  v.doc_string.clear();
  return v;
}

// Appends standard-ONNX nodes that scale every gradient by
// min(1, max_norm / (||all gradients||_2 + 1e-6)), the coefficient of
// torch.nn.utils.clip_grad_norm_ and of onnxruntime-training's InplaceClipGradNorm; returns
// the clipped gradient's name per parameter. The norm is summed in `norm_dtype` (float32, or
// float64 when every parameter is), so float16 gradients do not overflow on the way.
std::vector<std::string> clip_gradients(ir::Graph& graph, std::span<const ir::ValueInfo> parameters, double max_norm,
                                        DType norm_dtype) {
  auto node = [&](std::string op_type, std::vector<std::string> inputs, std::string output,
                  std::vector<ir::Attribute> attributes = {}) {
    ir::Node n;
    n.name = "clip_grad_norm/" + output;
    n.op_type = std::move(op_type);
    n.inputs = std::move(inputs);
    n.outputs = {output};
    n.attributes = std::move(attributes);
    graph.nodes.push_back(std::move(n));
    return output;
  };
  auto constant = [&](std::string name, double value) {
    Tensor t = norm_dtype == DType::kFloat64 ? Tensor::scalar<double>(value)
                                             : Tensor::scalar<float>(static_cast<float>(value));
    return node("Constant", {}, std::move(name), {ir::attr("value", std::move(t))});
  };
  auto cast = [&](const std::string& value, DType to, std::string output) {
    return node("Cast", {value}, std::move(output), {ir::attr("to", static_cast<int64_t>(to))});
  };
  std::vector<std::string> square_sums;
  for (const ir::ValueInfo& p : parameters) {
    std::string grad = training::gradient_input(p.name);
    if (p.dtype != norm_dtype) grad = cast(grad, norm_dtype, grad + ".clip_cast");
    square_sums.push_back(node("ReduceSumSquare", {grad}, training::gradient_input(p.name) + ".square_sum",
                               {ir::attr("keepdims", int64_t{0})}));
  }
  const std::string sum = square_sums.size() == 1 ? square_sums[0] : node("Sum", square_sums, "clip_grad_norm.sum");
  const std::string norm = node("Sqrt", {sum}, "clip_grad_norm.norm");
  const std::string denominator =
      node("Add", {norm, constant("clip_grad_norm.epsilon", 1e-6)}, "clip_grad_norm.denominator");
  const std::string ratio =
      node("Div", {constant("clip_grad_norm.max_norm", max_norm), denominator}, "clip_grad_norm.ratio");
  const std::string coefficient =
      node("Min", {ratio, constant("clip_grad_norm.one", 1.0)}, "clip_grad_norm.coefficient");
  std::vector<std::string> clipped;
  for (const ir::ValueInfo& p : parameters) {
    const std::string grad = training::gradient_input(p.name);
    const std::string scale = p.dtype == norm_dtype ? coefficient : cast(coefficient, p.dtype, grad + ".clip_scale");
    clipped.push_back(node("Mul", {grad, scale}, grad + ".clipped"));
  }
  return clipped;
}

}  // namespace

std::vector<std::string> optimizer_moments(const OptimizerOptions& options) {
  if (options.kind == OptimizerKind::kAdamW) return {"exp_avg", "exp_avg_sq"};
  if (options.momentum != 0) return {"momentum_buffer"};
  return {};
}

ir::Model build_optimizer_model(std::span<const ir::ValueInfo> parameters, const OptimizerOptions& options) {
  check_options(options);
  ir::Model model;
  model.ir_version = 8;
  model.opset_imports = {{"", kOptimizerOpset}};
  model.producer_name = "onnxtrain";
  model.graph.name = "optimizer";
  ir::Graph& graph = model.graph;
  // The learning rate comes in double precision when every parameter is double, so that
  // float64 training rounds it no coarser than torch does; float32 otherwise.
  const bool all_double = std::all_of(parameters.begin(), parameters.end(),
                                      [](const ir::ValueInfo& p) { return p.dtype == DType::kFloat64; });
  graph.inputs = {scalar_input(std::string(training::kLearningRate), all_double ? DType::kFloat64 : DType::kFloat32),
                  scalar_input(std::string(training::kStep), DType::kInt64)};

  const std::vector<std::string> moments = optimizer_moments(options);
  std::string op_type;
  std::vector<ir::Attribute> attributes;
  if (options.kind == OptimizerKind::kAdamW) {
    op_type = "AdamWStep";
    attributes = {hyperparameter("beta1", options.beta1),
                  hyperparameter("beta2", options.beta2),
                  hyperparameter("epsilon", options.epsilon),
                  hyperparameter("weight_decay", options.weight_decay),
                  ir::attr("bias_correction", options.bias_correction ? 1 : 0),
                  ir::attr("adam_mode", static_cast<int64_t>(options.adam_mode))};
  } else if (moments.empty()) {
    op_type = "SGDStep";
    attributes = {hyperparameter("weight_decay", options.sgd_weight_decay)};
  } else {
    op_type = "SGDMomentumStep";
    attributes = {hyperparameter("momentum", options.momentum), hyperparameter("dampening", options.dampening),
                  ir::attr("nesterov", options.nesterov ? 1 : 0),
                  hyperparameter("weight_decay", options.sgd_weight_decay)};
  }

  for (const ir::ValueInfo& p : parameters) {
    if (!is_floating(p.dtype)) {
      throw Error("optimizer: parameter '" + p.name + "' holds " + std::string(dtype_name(p.dtype)) +
                      " values; only floating-point parameters can be trained",
                  ErrorKind::kInvalidArgument);
    }
  }
  std::vector<std::string> gradients;
  if (options.max_grad_norm) {
    gradients =
        clip_gradients(graph, parameters, *options.max_grad_norm, all_double ? DType::kFloat64 : DType::kFloat32);
  }
  for (size_t i = 0; i < parameters.size(); ++i) {
    const ir::ValueInfo& p = parameters[i];
    ir::Node node;
    node.name = p.name + "/" + op_type;
    node.op_type = op_type;
    node.domain = std::string(ir::kOnnxtrainDomain);
    node.attributes = attributes;
    const std::string lr(training::kLearningRate);
    const std::string grad = training::gradient_input(p.name);
    const std::string& update_from = gradients.empty() ? grad : gradients[i];
    if (op_type == "SGDStep")
      node.inputs = {lr, p.name, update_from};
    else
      node.inputs = {lr, std::string(training::kStep), p.name, update_from};
    node.outputs = {training::updated_output(p.name)};
    graph.inputs.push_back(renamed(p, p.name));
    graph.inputs.push_back(renamed(p, grad));
    graph.outputs.push_back(renamed(p, training::updated_output(p.name)));
    for (const std::string& moment : moments) {
      const std::string name = training::moment_input(p.name, moment);
      node.inputs.push_back(name);
      node.outputs.push_back(training::updated_output(name));
      graph.inputs.push_back(renamed(p, name));
      graph.outputs.push_back(renamed(p, training::updated_output(name)));
    }
    graph.nodes.push_back(std::move(node));
  }
  // Names must be unique: a parameter called "step" or "w_grad" next to "w" would clash.
  std::unordered_set<std::string> names;
  auto claim = [&](const std::string& name) {
    if (!names.insert(name).second) {
      throw Error("optimizer model: the name '" + name +
                      "' would be used twice (a parameter's name clashes with a value the optimizer adds)",
                  ErrorKind::kInvalidArgument);
    }
  };
  for (const auto* list : {&graph.inputs, &graph.outputs}) {
    for (const ir::ValueInfo& v : *list) claim(v.name);
  }
  for (const ir::Node& node : graph.nodes) {
    if (node.domain.empty()) claim(node.outputs[0]);  // the clipping's intermediate values
  }
  ir::FunctionLibrary::global().add_to(model, op_type);
  std::string moment_list;
  for (const std::string& m : moments) moment_list += (moment_list.empty() ? "" : ",") + m;
  model.metadata_props = {
      {std::string(training::kOptimizerMetadata), options.kind == OptimizerKind::kAdamW ? "AdamW" : "SGD"},
      {std::string(training::kMomentsMetadata), moment_list}};
  return model;
}

}  // namespace onnxtrain::training

namespace onnxtrain {

std::string build_optimizer_model(std::span<const ValueMetadata> parameters, const OptimizerOptions& options) {
  if (parameters.empty()) throw Error("build_optimizer_model: no parameters", ErrorKind::kInvalidArgument);
  std::vector<ir::ValueInfo> infos;
  for (const ValueMetadata& p : parameters) {
    if (!is_floating(p.dtype)) {
      throw Error("build_optimizer_model: parameter '" + p.name + "' is " + std::string(dtype_name(p.dtype)) +
                      "; only floating-point parameters train",
                  ErrorKind::kInvalidArgument);
    }
    const bool fixed = p.has_shape && std::all_of(p.shape.begin(), p.shape.end(), [](int64_t d) { return d >= 0; });
    if (!fixed) {
      throw Error("build_optimizer_model: parameter '" + p.name + "' needs a static shape",
                  ErrorKind::kInvalidArgument);
    }
    ir::ValueInfo info{p.name, p.dtype, std::vector<ir::Dim>{}, {}, {}};
    for (int64_t d : p.shape) info.shape->push_back({d, ""});
    infos.push_back(std::move(info));
  }
  return ir::serialize_model(training::build_optimizer_model(infos, options));
}

}  // namespace onnxtrain
