// The standard-ONNX bodies of the recurrent nets' gradients, org.onnxtrain::{RNN,GRU,LSTM}Grad.
//
// A body cannot be one text: its structure follows the forward node's attributes (direction,
// layout, activations, clip, input_forget, linear_before_reset) and which optional inputs are
// there. So it is built per node: the forward op spelled out in standard ops (per direction a
// Scan whose body is one cell step; sequence_lens as a mask that keeps the state and zeroes Y
// past a row's length; a reverse direction as a reverse Scan; layout 1 through Transposes),
// then differentiated by the gradient builder itself (the Scan rule's backward is a reverse
// Scan of standard ops). The result is a model-local function named for its configuration
// (ir::kernel_function_name, "LSTMGrad_<16 hex digits>"): any ONNX runtime inlines it,
// onnxtrain runs the {RNN,GRU,LSTM}Grad kernel for it.
#pragma once

#include <onnxtrain/dtype.h>

#include <string>
#include <vector>

#include "ir/graph.h"

namespace onnxtrain::autodiff {

// The default-domain opset the bodies need: the library functions their gradients call
// (TanhGrad, SigmoidGrad, ...) need CastLike. Below it a gradient node has no body and runs on
// onnxtrain only (GradientContext::emit_kernel_op).
inline constexpr int64_t kRecurrentBodyMinOpset = 15;

struct RecurrentGradientFunction {
  ir::Function function;
  // The org.onnxtrain library functions its body calls, which the model must define too.
  std::vector<std::string> library_calls;
};

// The gradient function of `forward` (an RNN, GRU or LSTM node) called with `inputs`: the
// forward's inputs, then the gradients of its outputs ("" where absent, trailing ones may be
// left out). Its inputs are named X W R B sequence_lens initial_h [initial_c P] Y_grad Y_h_grad
// [Y_c_grad], its outputs X_grad W_grad R_grad B_grad initial_h_grad [initial_c_grad P_grad]
// (zeros where the input is absent). `dtype` is X's element type (float or double), `opset`
// the model's default-domain opset. Throws an Error naming the node for attributes the
// forward op does not allow.
RecurrentGradientFunction recurrent_gradient_function(const ir::Node& forward, const std::vector<std::string>& inputs,
                                                      DType dtype, int64_t opset);

}  // namespace onnxtrain::autodiff
