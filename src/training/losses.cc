// Each loss follows torch.nn.functional's definition for the same options.
#include "training/losses.h"

#include <onnxtrain/error.h>

#include <algorithm>

#include "ir/onnx_io.h"

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
    case Reduction::kBatchMean:
      return "batchmean";
  }
  return "mean";
}

bool is_class_index_loss(LossKind kind) {
  return kind == LossKind::kCrossEntropy || kind == LossKind::kNLL;
}

std::string who(LossKind kind) {
  return kind == LossKind::kCrossEntropy ? "cross-entropy loss" : std::string(loss_name(kind)) + " loss";
}

[[noreturn]] void invalid(const std::string& message) {
  throw Error(message, ErrorKind::kInvalidArgument);
}

// The names a loss appends under.
struct Interface {
  std::string output;
  std::string label;
};

std::string claim(ir::GraphEditor& editor, const std::string& name, TakenName taken, const std::string& why) {
  switch (taken) {
    case TakenName::kError:
      editor.reserve(name, why);
      return name;
    case TakenName::kFresh:
      return editor.fresh_name(name);
    case TakenName::kShare:
      break;
  }
  const auto& inputs = editor.graph().inputs;
  if (std::none_of(inputs.begin(), inputs.end(), [&](const ir::ValueInfo& v) { return v.name == name; })) {
    invalid("the label '" + name + "' to share is no graph input of the model");
  }
  return name;
}

Interface claim_names(ir::GraphEditor& editor, LossKind kind, const LossNames& names) {
  if (names.output_taken == TakenName::kShare) invalid(who(kind) + ": a loss output cannot be shared");
  Interface interface;
  interface.output =
      claim(editor, names.output.empty() ? kLossOutput : names.output, names.output_taken, "would be the loss output");
  const bool class_index = is_class_index_loss(kind);
  const std::string label = !names.label.empty() ? names.label : class_index ? "labels" : "target";
  interface.label = claim(editor, label, names.label_taken,
                          kind == LossKind::kCrossEntropy ? "would be the cross-entropy loss's labels input"
                          : class_index                   ? "would be the loss's labels input"
                                                          : "would be the loss's target input");
  return interface;
}

// Per-element losses -> the loss output.
std::string reduce(ir::GraphEditor& editor, const std::string& elements, Reduction reduction,
                   const std::string& output) {
  // Without axes, both reduce over every axis.
  switch (reduction) {
    case Reduction::kMean:
      return editor.add("ReduceMean", {elements}, {ir::attr("keepdims", 0)}, output);
    case Reduction::kSum:
      return editor.add("ReduceSum", {elements}, {ir::attr("keepdims", 0)}, output);
    case Reduction::kNone:
    case Reduction::kBatchMean:  // KLDiv's own
      break;
  }
  return editor.add("Identity", {elements}, {}, output);
}

ir::ValueInfo label_like(const std::string& name, const ir::ValueType& input_type) {
  ir::ValueInfo label;
  label.name = name;
  label.dtype = input_type.dtype;
  label.shape = input_type.shape;
  return label;
}

// Dimension `axis` of the input as a scalar of its element type: a constant when the shape
// says it, else read from the value when it runs.
std::string dimension(ir::GraphEditor& editor, const LossInput& input, size_t axis) {
  const DType dtype = input.type.dtype;
  const auto& shape = input.type.shape;
  if (shape && axis < shape->size() && (*shape)[axis].value) {
    return editor.constant(float_scalar(dtype, static_cast<double>(*(*shape)[axis].value)));
  }
  const std::string dims = editor.add("Shape", {input.name});
  const std::string index = editor.constant(Tensor::scalar<int64_t>(static_cast<int64_t>(axis)));
  const std::string size = editor.add("Gather", {dims, index}, {ir::attr("axis", int64_t{0})});
  return editor.add("Cast", {size}, {ir::attr("to", static_cast<int64_t>(dtype))});
}

// The per-element losses of the regression losses, from input x and target t.
std::string regression_elements(ir::GraphEditor& editor, const LossOptions& options, const std::string& x,
                                const std::string& t, DType dtype) {
  const std::string difference = editor.add("Sub", {x, t});
  if (options.kind == LossKind::kMSE) return editor.add("Mul", {difference, difference});
  const std::string magnitude = editor.add("Abs", {difference});
  if (options.kind == LossKind::kL1 || (options.kind == LossKind::kSmoothL1 && options.beta == 0)) return magnitude;
  // Huber: 0.5 d^2 where |d| < delta, else delta (|d| - 0.5 delta); with q = min(|d|, delta),
  // 0.5 q^2 + delta (|d| - q) is both branches, with their gradients. SmoothL1 is Huber / beta.
  const double threshold = options.kind == LossKind::kHuber ? options.delta : options.beta;
  const std::string delta = editor.constant(float_scalar(dtype, threshold));
  const std::string quadratic = editor.add("Min", {magnitude, delta});
  const std::string square =
      editor.add("Mul", {editor.constant(float_scalar(dtype, 0.5)), editor.add("Mul", {quadratic, quadratic})});
  const std::string linear = editor.add("Mul", {delta, editor.add("Sub", {magnitude, quadratic})});
  const std::string huber = editor.add("Add", {square, linear});
  if (options.kind == LossKind::kHuber) return huber;
  return editor.add("Div", {huber, editor.constant(float_scalar(dtype, options.beta))});
}

// torch's form: l = (1 - t) x + (1 + (pos_weight - 1) t) softplus(-x), times weight.
// Softplus is stable in onnxtrain and onnxruntime, and its gradient (sigmoid) is exact at
// x = 0, where log(1 + exp(-|x|)) + max(-x, 0) would take the subgradients 0 of Abs and Relu.
std::string bce_with_logits_elements(ir::GraphEditor& editor, const LossOptions& options, const std::string& input,
                                     const std::string& target, DType dtype) {
  const std::string one = editor.constant(float_scalar(dtype, 1.0));
  std::string softplus = editor.add("Softplus", {editor.add("Neg", {input})});  // log(1 + exp(-x))
  if (!options.pos_weight.empty()) {
    std::vector<double> minus_one(options.pos_weight);
    for (double& w : minus_one) w -= 1.0;
    const std::string scaled = editor.add("Mul", {target, editor.constant(float_vector(dtype, minus_one))});
    softplus = editor.add("Mul", {editor.add("Add", {scaled, one}), softplus});
  }
  const std::string linear = editor.add("Mul", {editor.add("Sub", {one, target}), input});
  std::string elements = editor.add("Add", {linear, softplus});
  if (!options.weight.empty()) {
    elements = editor.add("Mul", {elements, editor.constant(float_vector(dtype, options.weight))});
  }
  return elements;
}

// torch's kl_div of log-probabilities x: t (log t - x), or with log_target exp(t) (t - x).
std::string kl_div_elements(ir::GraphEditor& editor, const LossOptions& options, const std::string& x,
                            const std::string& t, DType dtype) {
  if (options.log_target) return editor.add("Mul", {editor.add("Exp", {t}), editor.add("Sub", {t, x})});
  // xlogy(t, t) - t x, with 0 log 0 = 0: log(1) where t = 0 (t < 0 is no distribution).
  const std::string positive = editor.add("Greater", {t, editor.constant(float_scalar(dtype, 0.0))});
  const std::string safe = editor.add("Where", {positive, t, editor.constant(float_scalar(dtype, 1.0))});
  return editor.add("Mul", {t, editor.add("Sub", {editor.add("Log", {safe}), x})});
}

// The losses whose label has the input's type: the per-element losses, reduced.
LossGraph elementwise_loss(ir::GraphEditor& editor, const LossOptions& options, const LossInput& input,
                           const Interface& names) {
  const DType dtype = input.type.dtype;
  std::string elements;
  switch (options.kind) {
    case LossKind::kBCEWithLogits:
      elements = bce_with_logits_elements(editor, options, input.name, names.label, dtype);
      break;
    case LossKind::kKLDiv:
      elements = kl_div_elements(editor, options, input.name, names.label, dtype);
      break;
    default:
      elements = regression_elements(editor, options, input.name, names.label, dtype);
  }
  LossGraph loss;
  if (options.reduction == Reduction::kBatchMean) {
    const std::string total = editor.add("ReduceSum", {elements}, {ir::attr("keepdims", 0)});
    loss.output = editor.add("Div", {total, dimension(editor, input, 0)}, {}, names.output);
  } else {
    loss.output = reduce(editor, elements, options.reduction, names.output);
  }
  loss.output_type.dtype = dtype;
  loss.output_type.shape = options.reduction == Reduction::kNone ? input.type.shape : ir::SymbolicShape{};
  loss.label_inputs = {label_like(names.label, input.type)};
  return loss;
}

std::vector<ir::Attribute> class_index_attributes(const LossOptions& options) {
  std::vector<ir::Attribute> attributes{ir::attr("reduction", std::string(reduction_name(options.reduction)))};
  if (options.ignore_index) attributes.push_back(ir::attr("ignore_index", int64_t{*options.ignore_index}));
  return attributes;
}

// nll's mean denominator: the summed weights of the counted labels (or their count).
std::string counted_labels(ir::GraphEditor& editor, const LossOptions& options, const std::string& labels,
                           const std::string& valid, DType dtype) {
  if (!options.weight.empty()) {
    const std::string index =
        valid.empty() ? labels : editor.add("Where", {valid, labels, editor.constant(Tensor::scalar<int64_t>(0))});
    std::string weights = editor.add("Gather", {editor.constant(float_vector(dtype, options.weight)), index},
                                     {ir::attr("axis", int64_t{0})});
    if (!valid.empty()) weights = editor.add("Where", {valid, weights, editor.constant(float_scalar(dtype, 0.0))});
    return editor.add("ReduceSum", {weights}, {ir::attr("keepdims", 0)});
  }
  const std::vector<double> one{1.0};
  const std::string counted = !valid.empty()
                                  ? editor.add("Cast", {valid}, {ir::attr("to", static_cast<int64_t>(dtype))})
                                  : editor.add("ConstantOfShape", {editor.add("Shape", {labels})},
                                               {ir::attr("value", float_vector(dtype, one))});
  return editor.add("ReduceSum", {counted}, {ir::attr("keepdims", 0)});
}

// torch's cross_entropy with label_smoothing e: (1 - e) nll + e / C * smooth, smooth =
// -sum_c w_c log p_c per element, masked and reduced with nll's denominator.
std::string smoothed_cross_entropy(ir::GraphEditor& editor, const LossOptions& options, const LossInput& scores,
                                   const std::string& labels, const std::vector<std::string>& weight,
                                   const std::string& output) {
  const DType dtype = scores.type.dtype;
  const std::string log_probabilities = editor.add("LogSoftmax", {scores.name}, {ir::attr("axis", int64_t{1})});
  std::vector<std::string> nll_inputs{log_probabilities, labels};
  nll_inputs.insert(nll_inputs.end(), weight.begin(), weight.end());
  const std::string nll = editor.add("NegativeLogLikelihoodLoss", nll_inputs, class_index_attributes(options));
  std::string weighted = log_probabilities;
  if (!weight.empty()) {
    if (!scores.type.shape) {
      invalid("cross-entropy loss: the rank of the scores '" + scores.name +
              "' is unknown; label smoothing with class weights needs it");
    }
    Shape shape(scores.type.shape->size(), 1);
    shape[1] = static_cast<int64_t>(options.weight.size());
    weighted = editor.add("Mul", {log_probabilities, editor.constant(float_tensor(dtype, shape, options.weight))});
  }
  const std::string axes = editor.constant(Tensor::from_vector<int64_t>({1}, {1}));
  std::string smooth =
      editor.add("Neg", {editor.add("ReduceSum", {weighted, axes}, {ir::attr("keepdims", 0)})});  // [N, d...]
  std::string valid;
  if (options.ignore_index) {
    const std::string ignored =
        editor.add("Equal", {labels, editor.constant(Tensor::scalar<int64_t>(*options.ignore_index))});
    valid = editor.add("Not", {ignored});
    smooth = editor.add("Where", {valid, smooth, editor.constant(float_scalar(dtype, 0.0))});
  }
  if (options.reduction == Reduction::kSum) {
    smooth = editor.add("ReduceSum", {smooth}, {ir::attr("keepdims", 0)});
  } else if (options.reduction == Reduction::kMean) {
    const std::string total = editor.add("ReduceSum", {smooth}, {ir::attr("keepdims", 0)});
    smooth = editor.add("Div", {total, counted_labels(editor, options, labels, valid, dtype)});
  }
  const std::string share =
      editor.add("Div", {editor.constant(float_scalar(dtype, options.label_smoothing)), dimension(editor, scores, 1)});
  const std::string kept =
      editor.add("Mul", {editor.constant(float_scalar(dtype, 1.0 - options.label_smoothing)), nll});
  return editor.add("Add", {kept, editor.add("Mul", {smooth, share})}, {}, output);
}

// SoftmaxCrossEntropyLoss or NegativeLogLikelihoodLoss over axis 1 of scores [N, C, d...]
// and labels [N, d...].
LossGraph class_index_loss(ir::GraphEditor& editor, const LossOptions& options, const LossInput& scores,
                           const Interface& names) {
  const ir::ValueType& type = scores.type;
  if (type.shape && type.shape->size() < 2) {
    invalid(who(options.kind) + ": the scores '" + scores.name + "' have rank " + std::to_string(type.shape->size()) +
            "; expected [batch, classes, ...] (rank 2 or more)");
  }
  const bool smoothed = options.kind == LossKind::kCrossEntropy && options.label_smoothing != 0;
  const int64_t needed = smoothed ? 13 : 12;  // ReduceSum's axes input; the loss ops
  if (scores.opset && *scores.opset < needed) {
    invalid(who(options.kind) + (smoothed ? " with label smoothing" : "") + " needs opset " + std::to_string(needed) +
            " or later in the model, which imports opset " + std::to_string(*scores.opset));
  }
  ir::ValueInfo label;
  label.name = names.label;
  label.dtype = DType::kInt64;
  if (type.shape) {
    label.shape = type.shape;
    label.shape->erase(label.shape->begin() + 1);
  }
  std::vector<std::string> weight;
  if (!options.weight.empty()) {
    if (type.shape && (*type.shape)[1].value &&
        *(*type.shape)[1].value != static_cast<int64_t>(options.weight.size())) {
      invalid(who(options.kind) + ": " + std::to_string(options.weight.size()) + " class weights for the " +
              std::to_string(*(*type.shape)[1].value) + " classes of '" + scores.name + "'");
    }
    weight.push_back(editor.constant(float_vector(type.dtype, options.weight)));
  }
  LossGraph loss;
  if (smoothed) {
    loss.output = smoothed_cross_entropy(editor, options, scores, names.label, weight, names.output);
  } else {
    std::vector<std::string> inputs{scores.name, names.label};
    inputs.insert(inputs.end(), weight.begin(), weight.end());
    const char* op = options.kind == LossKind::kNLL ? "NegativeLogLikelihoodLoss" : "SoftmaxCrossEntropyLoss";
    loss.output = editor.add(op, std::move(inputs), class_index_attributes(options), names.output);
  }
  loss.output_type.dtype = type.dtype;
  loss.output_type.shape = options.reduction == Reduction::kNone ? label.shape : ir::SymbolicShape{};
  loss.label_inputs = {std::move(label)};
  return loss;
}

// The options that do not suit the loss.
void check_options(const LossOptions& options) {
  const LossKind kind = options.kind;
  const bool class_index = is_class_index_loss(kind);
  if (!class_index && options.ignore_index) {
    invalid(who(kind) + " has no ignore_index (only cross-entropy and NLL have)");
  }
  if (kind != LossKind::kBCEWithLogits && !options.pos_weight.empty()) {
    invalid(who(kind) + " has no pos_weight (only BCEWithLogits has)");
  }
  if (!class_index && kind != LossKind::kBCEWithLogits && !options.weight.empty()) {
    invalid(who(kind) + " takes no weight");
  }
  if (kind != LossKind::kCrossEntropy && options.label_smoothing != 0) {
    invalid(who(kind) + " has no label_smoothing (only cross-entropy has)");
  }
  if (!(options.label_smoothing >= 0 && options.label_smoothing <= 1)) {
    invalid(who(kind) + ": label_smoothing must lie in [0, 1], got " + std::to_string(options.label_smoothing));
  }
  if (kind == LossKind::kHuber && !(options.delta > 0)) {
    invalid(who(kind) + ": delta must be positive, got " + std::to_string(options.delta));
  }
  if (kind == LossKind::kSmoothL1 && !(options.beta >= 0)) {
    invalid(who(kind) + ": beta must not be negative, got " + std::to_string(options.beta));
  }
  if (kind != LossKind::kKLDiv && options.log_target) invalid(who(kind) + " has no log_target (only KLDiv has)");
  if (kind != LossKind::kKLDiv && options.reduction == Reduction::kBatchMean) {
    invalid(who(kind) + " has no reduction 'batchmean' (only KLDiv has)");
  }
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
    case LossKind::kHuber:
      return "Huber";
    case LossKind::kSmoothL1:
      return "SmoothL1";
    case LossKind::kNLL:
      return "NLL";
    case LossKind::kKLDiv:
      return "KLDiv";
  }
  return "?";
}

LossGraph add_loss(ir::GraphEditor& editor, const LossOptions& options, const LossInput& input,
                   const LossNames& names) {
  if (options.kind == LossKind::kNone) invalid("add_loss: no loss to add");
  if (input.type.dtype == DType::kUndefined) {
    invalid(who(options.kind) + ": the type of its input '" + input.name +
            "' is unknown (shape inference does not find it); declare it in the model's value_info or outputs");
  }
  if (!is_floating(input.type.dtype)) {
    invalid(who(options.kind) + ": its input '" + input.name + "' holds " + std::string(dtype_name(input.type.dtype)) +
            " values; expected a floating-point output");
  }
  check_options(options);
  const Interface interface = claim_names(editor, options.kind, names);
  if (is_class_index_loss(options.kind)) return class_index_loss(editor, options, input, interface);
  return elementwise_loss(editor, options, input, interface);
}

namespace {

bool is_value(const ir::Graph& graph, const std::string& name) {
  if (graph.initializer(name)) return true;
  if (std::any_of(graph.inputs.begin(), graph.inputs.end(), [&](const auto& v) { return v.name == name; })) {
    return true;
  }
  return std::any_of(graph.nodes.begin(), graph.nodes.end(), [&](const ir::Node& n) {
    return std::find(n.outputs.begin(), n.outputs.end(), name) != n.outputs.end();
  });
}

LossModel loss_model(ir::Model model, const std::string& input, const LossOptions& options, const LossNames& names) {
  if (!is_value(model.graph, input)) {
    invalid(who(options.kind) + ": '" + input +
            "' is not a value of the model (not a graph input, initializer or node output)");
  }
  LossInput loss_input{input, ForwardTypes(model).type_of(input), model.opset("")};
  if (loss_input.type.shape) {
    for (ir::Dim& dim : *loss_input.type.shape) dim.param.clear();
  }
  const size_t forward_nodes = model.graph.nodes.size();
  ir::GraphEditor editor(model.graph, "loss");
  const LossGraph added = add_loss(editor, options, loss_input, names);

  ir::Model loss;
  loss.ir_version = model.ir_version;
  loss.opset_imports = model.opset_imports;
  loss.producer_name = "onnxtrain";
  ir::Graph& graph = loss.graph;
  graph.name = "loss";
  ir::ValueInfo source;
  source.name = input;
  source.dtype = loss_input.type.dtype;
  source.shape = loss_input.type.shape;
  graph.inputs.push_back(std::move(source));
  graph.inputs.insert(graph.inputs.end(), added.label_inputs.begin(), added.label_inputs.end());
  graph.nodes.assign(std::make_move_iterator(model.graph.nodes.begin() + static_cast<ptrdiff_t>(forward_nodes)),
                     std::make_move_iterator(model.graph.nodes.end()));
  ir::ValueInfo output;
  output.name = added.output;
  output.dtype = added.output_type.dtype;
  output.shape = added.output_type.shape;
  graph.outputs.push_back(std::move(output));
  return {ir::serialize_model(loss), added.output, added.label_inputs.front().name};
}

}  // namespace

}  // namespace onnxtrain::training

namespace onnxtrain {

LossModel build_loss_model(const std::filesystem::path& model_path, const std::string& input,
                           const LossOptions& options, const LossNames& names) {
  return training::loss_model(ir::load_model(model_path), input, options, names);
}

LossModel build_loss_model(std::span<const std::byte> model_bytes, const std::string& input, const LossOptions& options,
                           const LossNames& names, const std::filesystem::path& base_dir) {
  return training::loss_model(ir::load_model(model_bytes, base_dir), input, options, names);
}

}  // namespace onnxtrain
