// Each loss follows torch.nn.functional's definition for the same options.
#include "training/losses.h"

#include <onnxtrain/error.h>

namespace onnxtrain::training {
namespace {

std::string_view reduction_name(Reduction reduction) {
  switch (reduction) {
    case Reduction::kMean:
      return "mean";
    case Reduction::kSum:
      return "sum";
    case Reduction::kNone:
      return "none";
  }
  return "mean";
}

// Per-element losses -> the loss output.
std::string reduce(ir::GraphEditor& editor, const std::string& elements, Reduction reduction) {
  // Without axes, both reduce over every axis.
  switch (reduction) {
    case Reduction::kMean:
      return editor.add("ReduceMean", {elements}, {ir::attr("keepdims", 0)}, kLossOutput);
    case Reduction::kSum:
      return editor.add("ReduceSum", {elements}, {ir::attr("keepdims", 0)}, kLossOutput);
    case Reduction::kNone:
      break;
  }
  return editor.add("Identity", {elements}, {}, kLossOutput);
}

ir::ValueInfo label_like(const std::string& name, const ir::ValueType& input_type) {
  ir::ValueInfo label;
  label.name = name;
  label.dtype = input_type.dtype;
  label.shape = input_type.shape;
  return label;
}

// mean((x - t)^2) or mean(|x - t|).
LossGraph pointwise_loss(ir::GraphEditor& editor, const LossOptions& options, const std::string& input,
                         const ir::ValueType& type) {
  const std::string target = "target";
  editor.reserve(target, "would be the loss's target input");
  const std::string difference = editor.add("Sub", {input, target});
  const std::string elements =
      options.kind == LossKind::kMSE ? editor.add("Mul", {difference, difference}) : editor.add("Abs", {difference});
  return {reduce(editor, elements, options.reduction), {label_like(target, type)}};
}

// torch's form: l = (1 - t) x + (1 + (pos_weight - 1) t) softplus(-x), times weight.
// Softplus is stable in onnxtrain and onnxruntime, and its gradient (sigmoid) is exact at
// x = 0, where log(1 + exp(-|x|)) + max(-x, 0) would take the subgradients 0 of Abs and Relu.
LossGraph bce_with_logits_loss(ir::GraphEditor& editor, const LossOptions& options, const std::string& input,
                               const ir::ValueType& type) {
  const std::string target = "target";
  editor.reserve(target, "would be the loss's target input");
  const DType dtype = type.dtype;
  const std::string one = editor.constant(float_scalar(dtype, 1.0));
  std::string softplus = editor.add("Softplus", {editor.add("Neg", {input})});  // log(1 + exp(-x))
  if (!options.pos_weight.empty()) {
    std::vector<float> minus_one(options.pos_weight);
    for (float& w : minus_one) w -= 1.0f;
    const std::string scaled = editor.add("Mul", {target, editor.constant(float_vector(dtype, minus_one))});
    softplus = editor.add("Mul", {editor.add("Add", {scaled, one}), softplus});
  }
  const std::string linear = editor.add("Mul", {editor.add("Sub", {one, target}), input});
  std::string elements = editor.add("Add", {linear, softplus});
  if (!options.weight.empty()) {
    elements = editor.add("Mul", {elements, editor.constant(float_vector(dtype, options.weight))});
  }
  return {reduce(editor, elements, options.reduction), {label_like(target, type)}};
}

// SoftmaxCrossEntropyLoss over axis 1 of scores [N, C, d...] and labels [N, d...].
LossGraph cross_entropy_loss(ir::GraphEditor& editor, const LossOptions& options, const std::string& input,
                             const ir::ValueType& type) {
  if (type.shape && type.shape->size() < 2) {
    throw Error("cross-entropy loss: the scores '" + input + "' have rank " + std::to_string(type.shape->size()) +
                    "; expected [batch, classes, ...] (rank 2 or more)",
                ErrorKind::kInvalidArgument);
  }
  const std::string labels = "labels";
  editor.reserve(labels, "would be the cross-entropy loss's labels input");
  ir::ValueInfo label;
  label.name = labels;
  label.dtype = DType::kInt64;
  if (type.shape) {
    label.shape = type.shape;
    label.shape->erase(label.shape->begin() + 1);
  }
  std::vector<std::string> inputs{input, labels};
  if (!options.weight.empty()) {
    if (type.shape && (*type.shape)[1].value &&
        *(*type.shape)[1].value != static_cast<int64_t>(options.weight.size())) {
      throw Error("cross-entropy loss: " + std::to_string(options.weight.size()) + " class weights for the " +
                      std::to_string(*(*type.shape)[1].value) + " classes of '" + input + "'",
                  ErrorKind::kInvalidArgument);
    }
    inputs.push_back(editor.constant(float_vector(type.dtype, options.weight)));
  }
  std::vector<ir::Attribute> attributes{ir::attr("reduction", std::string(reduction_name(options.reduction)))};
  if (options.ignore_index) attributes.push_back(ir::attr("ignore_index", int64_t{*options.ignore_index}));
  const std::string loss = editor.add("SoftmaxCrossEntropyLoss", std::move(inputs), std::move(attributes), kLossOutput);
  return {loss, {label}};
}

}  // namespace

std::string_view loss_name(LossKind kind) {
  switch (kind) {
    case LossKind::kNone:
      return "none";
    case LossKind::kMSE:
      return "MSE";
    case LossKind::kCrossEntropy:
      return "CrossEntropy";
    case LossKind::kBCEWithLogits:
      return "BCEWithLogits";
    case LossKind::kL1:
      return "L1";
  }
  return "?";
}

LossGraph add_loss(ir::GraphEditor& editor, const LossOptions& options, const std::string& input,
                   const ir::ValueType& input_type) {
  if (!is_floating(input_type.dtype)) {
    throw Error(std::string(loss_name(options.kind)) + " loss: its input '" + input + "' holds " +
                    std::string(dtype_name(input_type.dtype)) + " values; expected a floating-point output",
                ErrorKind::kInvalidArgument);
  }
  if (options.kind != LossKind::kCrossEntropy && options.ignore_index) {
    throw Error(std::string(loss_name(options.kind)) + " loss has no ignore_index (only cross-entropy has)",
                ErrorKind::kInvalidArgument);
  }
  if (options.kind != LossKind::kBCEWithLogits && !options.pos_weight.empty()) {
    throw Error(std::string(loss_name(options.kind)) + " loss has no pos_weight (only BCEWithLogits has)",
                ErrorKind::kInvalidArgument);
  }
  editor.reserve(kLossOutput, "would be the loss output");
  switch (options.kind) {
    case LossKind::kMSE:
    case LossKind::kL1:
      if (!options.weight.empty()) {
        throw Error(std::string(loss_name(options.kind)) + " loss takes no weight", ErrorKind::kInvalidArgument);
      }
      return pointwise_loss(editor, options, input, input_type);
    case LossKind::kBCEWithLogits:
      return bce_with_logits_loss(editor, options, input, input_type);
    case LossKind::kCrossEntropy:
      return cross_entropy_loss(editor, options, input, input_type);
    case LossKind::kNone:
      break;
  }
  throw Error("add_loss: no loss to add", ErrorKind::kInvalidArgument);
}

}  // namespace onnxtrain::training
