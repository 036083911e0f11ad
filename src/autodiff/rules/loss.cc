// Gradient rules of the loss ops: SoftmaxCrossEntropyLoss, NegativeLogLikelihoodLoss.
//
// Both reduce per-element losses l[n, d...] (scores have the class axis 1) with optional
// class weights, ignore_index and reduction none/sum/mean. The rules first compute the
// gradient of the loss with respect to each per-element term, g[n, d...] (zero where
// ignored), then the scores' gradient from it.
#include "autodiff/gradient_context.h"
#include "ir/functions.h"

namespace onnxtrain::autodiff {
namespace {

// d loss / d scores = (softmax(scores) - onehot(label)) * g, from the forward pass's
// log-probabilities. g is dY broadcast to the labels' shape (dY is per element, or one
// value for all of them), divided by the number of labels when `mean` is 1. Labels out of
// range (an ignore_index such as -100) give a zero one-hot row; their g is zero anyway.
// (OneHot reads int64 labels: onnxruntime has no OneHot for int32 indices and float values.)
const FunctionRegistration kSoftmaxCrossEntropyLossGrad{R"(
SoftmaxCrossEntropyLossGrad <mean> (dY, log_prob, label) => (d_scores) {
  one = Constant <value_int = 1> ()
  axis_1d = Constant <value = int64[1] {1}> ()
  off_on_f = Constant <value = float[2] {0, 1}> ()
  one_f = Constant <value_float = 1.0> ()
  mean_i = Constant <value_int: int = @mean> ()
  probability = Exp (log_prob)
  shape = Shape (log_prob)
  depth = Gather (shape, one)
  off_on = CastLike (off_on_f, log_prob)
  label_64 = Cast <to = 7> (label)
  onehot = OneHot <axis = 1> (label_64, depth, off_on)
  difference = Sub (probability, onehot)
  label_shape = Shape (label)
  dY_full = Expand (dY, label_shape)
  count = ReduceProd <keepdims = 0> (label_shape)
  count_t = CastLike (count, log_prob)
  one_t = CastLike (one_f, log_prob)
  is_mean = Cast <to = 9> (mean_i)
  divisor = Where (is_mean, count_t, one_t)
  per_label = Div (dY_full, divisor)
  per_element = Unsqueeze (per_label, axis_1d)
  d_scores = Mul (difference, per_element)
}
)"};

// g[n, d...]: the gradient of the reduced loss with respect to each element's loss.
std::string per_element_grad(GradientContext& g, const std::string& dloss, const std::string& scores) {
  const std::string label = g.input(1);
  const std::string reduction = g.attr_string("reduction", "mean");
  if (reduction != "none" && reduction != "sum" && reduction != "mean") g.fail("unknown reduction '" + reduction + "'");
  std::string weight;  // per element: class weight, zero where ignored; "" means all ones
  std::string safe_label = label;
  if (g.has_attribute("ignore_index")) {
    const std::string ignore = g.cast_like(g.int_scalar(g.attr_int("ignore_index", 0)), label);
    const std::string valid = g.emit("Not", {g.emit("Equal", {label, ignore})});
    weight = g.cast_like(valid, scores);
    safe_label = g.emit("Where", {valid, label, g.cast_like(g.int_scalar(0), label)});
  }
  if (g.has_input(2)) {
    const std::string class_weight = g.emit("Gather", {g.input(2), safe_label});
    weight = weight.empty() ? class_weight : g.emit("Mul", {weight, class_weight});
  }
  const std::string label_shape = g.shape_of(label);
  std::string per_element = reduction == "none" ? dloss : g.emit("Expand", {dloss, label_shape});
  if (reduction == "mean") {
    const std::string count = weight.empty()
                                  ? g.cast_like(g.emit("ReduceProd", {label_shape}, {attr("keepdims", 0)}), scores)
                                  : g.emit("ReduceSum", {weight}, {attr("keepdims", 0)});
    per_element = g.emit("Div", {per_element, count});
  }
  return weight.empty() ? per_element : g.emit("Mul", {per_element, weight});
}

void softmax_cross_entropy_loss(GradientContext& g) {
  if (!g.needs_grad(0)) return;
  const std::string scores = g.input(0);
  const std::string log_prob = g.require_output(1, "log_prob");
  const std::string dloss = g.grad_of_output(0);
  if (!dloss.empty()) {
    // Without class weights or ignore_index, a reduced loss's gradient is the same for
    // every label: the fused op takes it as is (and the mean's count) instead of a tensor.
    const std::string reduction = g.attr_string("reduction", "mean");
    if (!g.has_input(2) && !g.has_attribute("ignore_index") && (reduction == "mean" || reduction == "sum")) {
      g.set_input_grad(0, g.call("SoftmaxCrossEntropyLossGrad", {dloss, log_prob, g.input(1)},
                                 {attr("mean", int64_t{reduction == "mean"})}));
    } else {
      g.set_input_grad(0,
                       g.call("SoftmaxCrossEntropyLossGrad", {per_element_grad(g, dloss, scores), log_prob, g.input(1)},
                              {attr("mean", int64_t{0})}));
    }
  }
  // The log-probabilities may be used on their own: LogSoftmax's gradient along axis 1.
  const std::string dlog_prob = g.grad_of_output(1);
  if (!dlog_prob.empty())
    g.set_input_grad(0, g.call("LogSoftmaxGrad", {dlog_prob, log_prob}, {attr("axis", int64_t{1})}));
}

// NegativeLogLikelihoodLoss: l = -input[n, label[n], d...] * weight; d input = -onehot * g.
void negative_log_likelihood_loss(GradientContext& g) {
  if (!g.needs_grad(0)) return;
  const std::string input = g.input(0);
  const std::string per_element = per_element_grad(g, g.grad_of_output(0), input);
  const std::string depth = g.emit("Gather", {g.shape_of(input), g.int_scalar(1)});
  const std::string off_on =
      g.cast_like(g.emit("Constant", {}, {attr("value", Tensor::from_vector<float>({2}, {0, -1}))}), input);
  const std::string onehot = g.emit("OneHot", {g.input(1), depth, off_on}, {attr("axis", int64_t{1})});
  g.set_input_grad(0, g.emit("Mul", {onehot, g.emit("Unsqueeze", {per_element, g.ints({1})})}));
}

const RuleRegistration kLossRules{
    {"SoftmaxCrossEntropyLoss", softmax_cross_entropy_loss},
    {"NegativeLogLikelihoodLoss", negative_log_likelihood_loss},
};

}  // namespace
}  // namespace onnxtrain::autodiff
