#include "training/ort_training_model.h"

#include <onnxtrain/error.h>

#include <algorithm>
#include <cmath>

#include "core/dispatch.h"
#include "ir/functions.h"
#include "ops/cpu/adamw.h"
#include "training/model_interface.h"

namespace onnxtrain::training {
namespace {

bool is_ort_node(const ir::Node& node, std::string_view op_type) {
  return node.domain == kOrtDomain && node.op_type == op_type;
}

const ir::ValueInfo* find_value(const std::vector<ir::ValueInfo>& values, std::string_view name) {
  for (const ir::ValueInfo& v : values) {
    if (v.name == name) return &v;
  }
  return nullptr;
}

// InPlaceAccumulatorV2 (buffer, grad, overwrite) => (flag) becomes
// AccumulateGradient (grad, buffer, reset) => (accumulated) under the flag's name.
void adopt_accumulator(ir::Model& model, ir::Node& node) {
  const std::string where = node.describe();
  if (node.inputs.size() != 3 || node.inputs[2].empty() || node.outputs.size() != 1) {
    throw Error(where +
                    ": expected the accumulator generate_artifacts writes (buffer, gradient, lazy_reset_grad) "
                    "=> (flag); this one has " +
                    std::to_string(node.inputs.size()) + " inputs and " + std::to_string(node.outputs.size()) +
                    " outputs",
                ErrorKind::kInvalidModel);
  }
  const ir::ValueInfo* buffer = find_value(model.graph.inputs, node.inputs[0]);
  if (buffer == nullptr) {
    throw Error(where + ": its buffer '" + node.inputs[0] + "' is not a graph input", ErrorKind::kInvalidModel);
  }
  ir::ValueInfo accumulated = *buffer;
  accumulated.name = node.outputs[0];
  bool is_output = false;
  for (ir::ValueInfo& output : model.graph.outputs) {
    if (output.name == accumulated.name) {
      output = accumulated;
      is_output = true;
    }
  }
  // The flag's value info (bool[1]) would contradict the gradient it now carries.
  std::erase_if(model.graph.value_info, [&](const ir::ValueInfo& v) { return v.name == accumulated.name; });
  if (!is_output) {
    throw Error(where + ": its output '" + accumulated.name + "' is not a graph output", ErrorKind::kInvalidModel);
  }
  node.domain = "org.onnxtrain";
  node.op_type = "AccumulateGradient";
  node.inputs = {node.inputs[1], node.inputs[0], node.inputs[2]};
  node.attributes.clear();
  node.opset = 0;
}

// com.microsoft::GatherGrad (shape, indices, dY) is org.onnxtrain::GatherGrad (dY, shape,
// indices): the same op with its inputs in another order.
void adopt_gather_grad(ir::Node& node) {
  if (node.inputs.size() != 3) {
    throw Error(node.describe() + ": expected 3 inputs (shape, indices, dY), got " + std::to_string(node.inputs.size()),
                ErrorKind::kInvalidModel);
  }
  node.domain = "org.onnxtrain";
  node.inputs = {node.inputs[2], node.inputs[0], node.inputs[1]};
  node.opset = 0;
}

// Gives `node` (a window op over `spatial` axes) its strides, dilations and pads where ORT
// leaves them to their defaults (ones, ones, zeros): org.onnxtrain's kernels take them written out.
void write_out_window(ir::Node& node, size_t spatial) {
  for (const char* name : {"strides", "dilations"}) {
    if (node.attribute(name) == nullptr) node.attributes.push_back(ir::attr(name, std::vector<int64_t>(spatial, 1)));
  }
  if (node.attribute("pads") == nullptr)
    node.attributes.push_back(ir::attr("pads", std::vector<int64_t>(2 * spatial, 0)));
}

// Makes ORT's pooling gradient `index` the org.onnxtrain op of the same name, whose last input
// is the shape of the pooled input `pooled` (a Shape node appended to the graph).
void take_pooled_shape(ir::Model& model, size_t index, const std::string& pooled) {
  ir::Node& node = model.graph.nodes[index];
  const std::string shape = node.outputs[0] + "/input_shape";
  node.domain = "org.onnxtrain";
  node.inputs.push_back(shape);
  node.opset = 0;
  ir::Node shape_node;
  shape_node.name = shape;
  shape_node.op_type = "Shape";
  shape_node.inputs = {pooled};
  shape_node.outputs = {shape};
  model.graph.nodes.push_back(std::move(shape_node));  // invalidates `node`
}

// ORT's MaxPoolGrad (dY, Indices) takes dX's shape from its static shape inference;
// org.onnxtrain::MaxPoolGrad (dY, indices, shape) takes it as an input: the shape of the
// input of the MaxPool whose Indices it reads.
void adopt_max_pool_grad(ir::Model& model, size_t index) {
  ir::Node& node = model.graph.nodes[index];
  const std::string where = node.describe();
  if (node.inputs.size() != 2) {
    throw Error(where + ": expected 2 inputs (dY, Indices), got " + std::to_string(node.inputs.size()),
                ErrorKind::kInvalidModel);
  }
  std::string pooled;
  for (const ir::Node& n : model.graph.nodes) {
    if (n.op_type == "MaxPool" && n.outputs.size() == 2 && n.outputs[1] == node.inputs[1]) pooled = n.inputs[0];
  }
  if (pooled.empty()) {
    throw Error(where + ": no MaxPool produces its Indices '" + node.inputs[1] + "'", ErrorKind::kInvalidModel);
  }
  node.attributes.clear();
  take_pooled_shape(model, index, pooled);
}

// ORT's AveragePoolGrad (dY) also takes dX's shape from static shape inference;
// org.onnxtrain::AveragePoolGrad (dY, shape) takes it as an input: the shape of the input of
// the AveragePool whose gradient this is (ORT's gradient builder names them "<output>_grad"
// and "<input>_grad"). ORT's node carries AveragePool's attributes; org.onnxtrain's takes
// explicit pads, strides and dilations (and works out ceil rounding from dY's shape).
void adopt_average_pool_grad(ir::Model& model, size_t index) {
  ir::Node& node = model.graph.nodes[index];
  if (node.inputs.size() != 1 || node.outputs.size() != 1) {
    throw Error(node.describe() + ": expected 1 input (dY) and 1 output (dX), got " +
                    std::to_string(node.inputs.size()) + " and " + std::to_string(node.outputs.size()),
                ErrorKind::kInvalidModel);
  }
  const ir::Attribute* kernel = node.attribute("kernel_shape");
  if (kernel == nullptr || kernel->ints.empty()) {
    throw Error(node.describe() + ": it has no kernel_shape", ErrorKind::kInvalidModel);
  }
  const size_t spatial = kernel->ints.size();
  std::string auto_pad = "NOTSET";
  if (const ir::Attribute* a = node.attribute("auto_pad")) auto_pad = a->s;
  if (auto_pad != "NOTSET" && auto_pad != "VALID") {
    throw Error(node.describe() + ": auto_pad " + auto_pad +
                    " is not supported; onnxtrain takes explicit pads (NOTSET) or VALID",
                ErrorKind::kInvalidModel);
  }
  std::erase_if(node.attributes, [&](const ir::Attribute& a) {
    return a.name == "auto_pad" || a.name == "ceil_mode" || (a.name == "pads" && auto_pad == "VALID");
  });
  write_out_window(node, spatial);
  std::string pooled;
  for (const ir::Node& n : model.graph.nodes) {
    if (n.op_type != "AveragePool" || n.inputs.empty() || n.outputs.empty()) continue;
    if (n.outputs[0] + "_grad" == node.inputs[0] || n.inputs[0] + "_grad" == node.outputs[0]) pooled = n.inputs[0];
  }
  if (pooled.empty()) {
    throw Error(node.describe() + ": no AveragePool has the gradient '" + node.inputs[0] + "' of its output or '" +
                    node.outputs[0] + "' of its input, so dX's shape is unknown",
                ErrorKind::kInvalidModel);
  }
  take_pooled_shape(model, index, pooled);
}

// ORT's ConvGrad takes Conv's attributes as Conv does, strides and dilations defaulting to
// ones; org.onnxtrain's kernel expects them written out.
void complete_conv_grad(const ir::Model& model, ir::Node& node) {
  size_t spatial = 0;
  if (const ir::Attribute* pads = node.attribute("pads")) spatial = pads->ints.size() / 2;
  if (const ir::Attribute* kernel = node.attribute("kernel_shape")) spatial = kernel->ints.size();
  if (const ir::ValueInfo* w = node.inputs.size() > 2 ? find_value(model.graph.inputs, node.inputs[2]) : nullptr;
      spatial == 0 && w != nullptr && w->shape && w->shape->size() > 2) {
    spatial = w->shape->size() - 2;
  }
  if (spatial == 0) {
    throw Error(node.describe() + ": cannot tell the number of spatial axes (no pads, kernel_shape or weight shape)",
                ErrorKind::kInvalidModel);
  }
  write_out_window(node, spatial);
}

// ORT's BatchNormInternal updates the running mean and variance in place (its kernel aliases
// outputs 1 and 2 to inputs 3 and 4, frozen parameters). onnxtrain's Module writes an output
// named "<p>.running.out" back into parameter p, so the two outputs take those names.
void adopt_batch_norm(ir::Model& model, ir::Node& node) {
  if (node.inputs.size() != 5 || node.outputs.size() < 3) return;
  for (size_t i = 1; i <= 2; ++i) {
    const ir::ValueInfo* statistic = find_value(model.graph.inputs, node.inputs[i + 2]);
    if (statistic == nullptr || node.outputs[i].empty()) continue;  // a constant: nothing to keep
    const std::string old_name = node.outputs[i];
    const std::string name = running_statistic_output(statistic->name);
    for (ir::Node& consumer : model.graph.nodes) {
      std::replace(consumer.inputs.begin(), consumer.inputs.end(), old_name, name);
    }
    for (ir::ValueInfo& output : model.graph.outputs) {
      if (output.name == old_name) output.name = name;
    }
    node.outputs[i] = name;
    if (find_value(model.graph.outputs, name) == nullptr) {
      ir::ValueInfo out = *statistic;
      out.name = name;
      model.graph.outputs.push_back(std::move(out));
    }
  }
}

float float_attribute(const ir::Node& node, const char* name, float fallback) {
  const ir::Attribute* a = node.attribute(name);
  return a != nullptr && a->type == ir::AttributeType::kFloat ? a->f : fallback;
}

int64_t int_attribute(const ir::Node& node, const char* name, int64_t fallback) {
  const ir::Attribute* a = node.attribute(name);
  return a != nullptr && a->type == ir::AttributeType::kInt ? a->i : fallback;
}

}  // namespace

bool is_ort_training_model(const ir::Model& model) {
  for (const ir::Node& node : model.graph.nodes) {
    if (is_ort_node(node, "InPlaceAccumulatorV2")) return true;
  }
  return false;
}

ir::Model adopt_ort_training_model(ir::Model model) {
  if (!is_ort_training_model(model)) return model;
  const size_t count = model.graph.nodes.size();  // the pool gradients append Shape nodes
  for (size_t i = 0; i < count; ++i) {
    ir::Node& node = model.graph.nodes[i];
    if (is_ort_node(node, "InPlaceAccumulatorV2"))
      adopt_accumulator(model, node);
    else if (is_ort_node(node, "GatherGrad"))
      adopt_gather_grad(node);
    else if (node.domain.empty() && node.op_type == "MaxPoolGrad")
      adopt_max_pool_grad(model, i);
    else if (node.domain.empty() && node.op_type == "AveragePoolGrad")
      adopt_average_pool_grad(model, i);
    else if (is_ort_node(node, "ConvGrad"))
      complete_conv_grad(model, node);
    else if (is_ort_node(node, "BatchNormInternal"))
      adopt_batch_norm(model, node);
  }
  // ORT feeds lazy_reset_grad as bool[1]; the Module feeds a scalar, as to its own artifacts.
  for (ir::ValueInfo& input : model.graph.inputs) {
    if (input.name == kLazyResetGrad) input.shape = std::vector<ir::Dim>{};
  }
  ir::FunctionLibrary::global().add_to(model, "AccumulateGradient");
  return model;
}

std::optional<OrtOptimizerRule> ort_optimizer_rule(const ir::Model& model, const std::string& file) {
  const ir::Node* optimizer = nullptr;
  for (const ir::Node& node : model.graph.nodes) {
    if (is_ort_node(node, "AdamWOptimizer") || is_ort_node(node, "SGDOptimizerV2")) optimizer = &node;
  }
  if (optimizer == nullptr) return std::nullopt;
  if (model.graph.nodes.size() != 1) {
    throw Error(file + ": an onnxruntime-training optimizer model with " + std::to_string(model.graph.nodes.size()) +
                    " nodes; onnxtrain runs the one-node models generate_artifacts writes",
                ErrorKind::kInvalidModel);
  }
  OrtOptimizerRule rule;
  if (optimizer->op_type == "SGDOptimizerV2") {
    rule.kind = OrtOptimizerRule::Kind::kSGD;
    return rule;
  }
  rule.alpha = float_attribute(*optimizer, "alpha", rule.alpha);
  rule.beta = float_attribute(*optimizer, "beta", rule.beta);
  rule.epsilon = float_attribute(*optimizer, "epsilon", rule.epsilon);
  rule.weight_decay = float_attribute(*optimizer, "weight_decay", rule.weight_decay);
  rule.adam_mode = int_attribute(*optimizer, "adam_mode", rule.adam_mode);
  rule.correct_bias = int_attribute(*optimizer, "correct_bias", rule.correct_bias);
  if (rule.adam_mode != 0 && rule.adam_mode != 1) {
    throw Error(file + ": " + optimizer->describe() + " has adam_mode " + std::to_string(rule.adam_mode) +
                    "; ORT defines 0 (torch) and 1 (Hugging Face)",
                ErrorKind::kInvalidModel);
  }
  return rule;
}

std::vector<std::string> ort_optimizer_moments(const OrtOptimizerRule& rule) {
  if (rule.kind == OrtOptimizerRule::Kind::kAdamW) return {"momentum0", "momentum1"};
  return {"momentum0"};  // ORT's SGD keeps one, unused
}

void ort_optimizer_step(const OrtOptimizerRule& rule, float learning_rate, int64_t step, Parameter& parameter,
                        std::span<Tensor* const> moments) {
  Tensor& w = parameter.data;
  const Tensor& g = parameter.grad;
  dispatch<float, double>(w.dtype(), "the ORT optimizer", [&]<typename T>() {
    if (rule.kind == OrtOptimizerRule::Kind::kSGD) {
      T* p = w.data<T>();
      const T* d = g.data<T>();
      for (int64_t i = 0; i < w.numel(); ++i) p[i] = p[i] - T(learning_rate) * d[i];
      return;
    }
    const AdamWHyperparameters h{rule.alpha, rule.beta, rule.epsilon, rule.weight_decay, rule.correct_bias == 1};
    if (rule.adam_mode == 0) {
      adamw_ort_torch_update(h, learning_rate, step, w.dtype(), w.raw_data(), g.raw_data(), moments[0]->raw_data(),
                             moments[1]->raw_data(), w.numel());
      return;
    }
    adamw_huggingface_update(h, DType::kFloat32, learning_rate, step, w.dtype(), w.raw_data(), g.raw_data(),
                             moments[0]->raw_data(), moments[1]->raw_data(), w.raw_data(), moments[0]->raw_data(),
                             moments[1]->raw_data(), w.numel());
  });
}

}  // namespace onnxtrain::training
