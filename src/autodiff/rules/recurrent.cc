// Gradient rules of RNN, GRU and LSTM: backpropagation through time in one node,
// org.onnxtrain::{RNN,GRU,LSTM}Grad (src/ops/cpu/recurrent_grad.cc), which takes the forward
// node's inputs and the gradients of its outputs and gives those of X, W, R, B,
// initial_h (and LSTM's initial_c and P), honouring sequence_lens and every attribute of
// the forward node. Saved so, the forward stays the standard op (the eval model and an
// inference export run anywhere) and the kernel runs the forward again to record each step;
// a session running both nodes hands the gradient the forward's own record instead
// (passes/share_recurrent_record.h).
//
// These ops have no standard-ONNX body: the backward walks the steps in reverse with a
// state, which standard ONNX can only state with Loop. A gradient graph with one runs on
// onnxtrain only.
#include "autodiff/gradient_context.h"

namespace onnxtrain::autodiff {
namespace {

void recurrent(GradientContext& g, const char* grad_op, size_t forward_inputs, size_t forward_outputs) {
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
  const std::vector<std::string> grads = g.emit_kernel_op(grad_op, inputs, g.node().attributes, count, wanted);
  for (size_t k = 0; k < count; ++k) {
    if (wanted[k]) g.set_input_grad(of_input[k], grads[k]);
  }
}

void rnn(GradientContext& g) {
  recurrent(g, "RNNGrad", 6, 2);
}
void gru(GradientContext& g) {
  recurrent(g, "GRUGrad", 6, 2);
}
void lstm(GradientContext& g) {
  recurrent(g, "LSTMGrad", 8, 3);
}

const RuleRegistration kRecurrentRules{{{"RNN", rnn}, {"GRU", gru}, {"LSTM", lstm}}};

}  // namespace
}  // namespace onnxtrain::autodiff
