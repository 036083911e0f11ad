// Gradient rules of RNN, GRU and LSTM: backpropagation through time in one node,
// org.onnxtrain::{RNN,GRU,LSTM}Grad (src/ops/cpu/recurrent_grad.cc), which takes the forward
// node's inputs and the gradients of its outputs and gives those of X, W, R, B,
// initial_h (and LSTM's initial_c and P), honouring sequence_lens and every attribute of
// the forward node. Saved so, the forward stays the standard op (the eval model and an
// inference export run anywhere) and the kernel runs the forward again to record each step;
// a session running both nodes hands the gradient the forward's own record instead
// (passes/share_recurrent_record.h).
//
// The node calls a model-local function built for its configuration, "LSTMGrad_<hash>"
// (autodiff/recurrent_body.h): its standard-ONNX body, the forward as Scans differentiated,
// lets any ONNX runtime run the gradient graph; onnxtrain runs the kernel instead. Below
// opset 15 (kRecurrentBodyMinOpset), or where the element type is unknown to the builder, the
// node is the kernel's op without a body, and the gradient graph runs on onnxtrain only.
#include "autodiff/gradient_context.h"
#include "autodiff/recurrent_body.h"

namespace onnxtrain::autodiff {
namespace {

void recurrent(GradientContext& g, size_t forward_inputs, size_t forward_outputs) {
  std::vector<std::string> inputs;
  for (size_t i = 0; i < forward_inputs; ++i) inputs.push_back(g.has_input(i) ? g.input(i) : "");
  bool any = false;
  for (size_t i = 0; i < forward_outputs; ++i) {
    std::string d = g.has_output(i) ? g.grad_of_output(i) : "";
    any = any || !d.empty();
    inputs.push_back(std::move(d));
  }
  if (!any) return;
  while (!inputs.empty() && inputs.back().empty()) inputs.pop_back();
  // Outputs dX, dW, dR, dB, d initial_h[, d initial_c, dP]: of forward inputs 0 1 2 3 5 6 7.
  const std::vector<size_t> of_input = {0, 1, 2, 3, 5, 6, 7};
  const size_t count = forward_outputs == 3 ? 7 : 5;
  std::vector<bool> wanted(count);
  bool needed = false;
  for (size_t k = 0; k < count; ++k) {
    wanted[k] = g.has_input(of_input[k]) && g.needs_grad(of_input[k]);
    needed = needed || wanted[k];
  }
  if (!needed) return;
  DType dtype = g.dtype(g.input(0));
  for (size_t i : {1, 2}) {
    if (dtype == DType::kUndefined) dtype = g.dtype(g.input(i));
  }
  std::vector<std::string> grads;
  if (g.opset() < kRecurrentBodyMinOpset || (dtype != DType::kFloat32 && dtype != DType::kFloat64)) {
    grads = g.emit_kernel_op(g.node().op_type + "Grad", inputs, g.node().attributes, count, wanted);
  } else {
    RecurrentGradientFunction function = recurrent_gradient_function(g.node(), inputs, dtype, g.opset());
    for (const std::string& name : function.library_calls) g.use_function(name);
    grads = g.call_function(std::move(function.function), inputs, g.node().attributes, count, wanted);
  }
  for (size_t k = 0; k < count; ++k) {
    if (wanted[k]) g.set_input_grad(of_input[k], grads[k]);
  }
}

void rnn(GradientContext& g) {
  recurrent(g, 6, 2);
}
void gru(GradientContext& g) {
  recurrent(g, 6, 2);
}
void lstm(GradientContext& g) {
  recurrent(g, 8, 3);
}

const RuleRegistration kRecurrentRules{{{"RNN", rnn}, {"GRU", gru}, {"LSTM", lstm}}};

}  // namespace
}  // namespace onnxtrain::autodiff
