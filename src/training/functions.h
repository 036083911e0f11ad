// The org.onnxtrain functions the training artifacts add: gradient accumulation
// (training_model.onnx) and the optimizer steps (optimizer_model.onnx). Like the gradient
// functions of src/autodiff, each is defined once as text whose body uses standard ONNX ops
// only, and is copied into the models that call it, so stock onnxruntime inlines it;
// src/ops/cpu/optimizer_kernels.cc runs them fused and in place.
//
//   AccumulateGradient (grad, buffer, reset) => (out)
//       out = reset ? grad : buffer + grad
//   AdamWStep <beta1, beta2, epsilon, weight_decay, bias_correction, adam_mode>
//             (lr, step, p, g, m, v) => (p_out, m_out, v_out)
//       bc_i = 1 - beta_i^step with bias_correction, 1 without; adam_mode as
//       onnxruntime-training's AdamWOptimizer numbers it (absent: 0):
//       0, torch.optim.AdamW: p *= 1 - lr wd; m += (1 - beta1)(g - m);
//          v = beta2 v + (1 - beta2) g^2; p -= lr / bc1 * m / (sqrt(v) / sqrt(bc2) + epsilon)
//       1, Hugging Face's AdamW as ORT's CPU kernel computes it: m = beta1 m + (1 - beta1) g;
//          v = beta2 v + ((1 - beta2) g) g; p -= (lr sqrt(bc2) / bc1) m / (sqrt(v) + epsilon);
//          p -= (lr wd) p. Its scalars (beta_i, bc_i, the corrected rate, lr wd) are
//          computed in lr's type (float32: ORT's float arithmetic, its powers in double)
//   SGDStep <weight_decay> (lr, p, g) => (p_out)
//       torch.optim.SGD without momentum: p -= lr (g + wd p)
//   SGDMomentumStep <momentum, dampening, nesterov, weight_decay>
//             (lr, step, p, g, buf) => (p_out, buf_out)
//       torch.optim.SGD: d = g + wd p; buf = d on step 1, else momentum buf + (1 - dampening) d;
//       p -= lr (nesterov ? d + momentum buf : buf)
//
// lr is a float scalar, step an int64 scalar (1 for the first update). The float
// hyperparameters are double scalar tensors, so that float64 parameters get them at full
// precision and the scalar arithmetic (1 - beta2, lr / bc1) happens in double, as in
// torch.optim; bias_correction, nesterov and adam_mode are ints (0 or 1).
#pragma once

#include <string_view>

#include "autodiff/functions.h"
#include "ir/graph.h"

namespace onnxtrain::training {

// The library of these functions (separate from the gradient functions, which are what
// autodiff emits).
const autodiff::FunctionLibrary& training_functions();

// Adds the definition of org.onnxtrain::`name` to `model` unless it is there, with the
// model's default-domain opset, and imports the domain (IR version 8 at least). Throws an
// Error when the model's opset is too old for the body.
void use_training_function(ir::Model& model, std::string_view name);

}  // namespace onnxtrain::training
