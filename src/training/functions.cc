// The org.onnxtrain functions the training artifacts add, registered in
// ir::FunctionLibrary::global(): gradient accumulation
// (training_model.onnx) and the optimizer steps (optimizer_model.onnx). Like the gradient
// functions of src/autodiff, each is defined once as text whose body uses standard ONNX ops
// only, and is copied into the models that call it, so stock onnxruntime inlines it;
// src/ops/cpu/optimizer_kernels.cc runs them fused and in place.
//
//   AccumulateGradient (grad, buffer, reset) => (out)
//       out = reset ? grad : buffer + grad
//   AdamWStep <beta1, beta2, epsilon, weight_decay, bias_correction>
//             (lr, step, p, g, m, v) => (p_out, m_out, v_out)
//       torch.optim.AdamW: p *= 1 - lr wd; m += (1 - beta1)(g - m);
//       v = beta2 v + (1 - beta2) g^2; p -= lr / bc1 * m / (sqrt(v) / sqrt(bc2) + epsilon),
//       bc_i = 1 - beta_i^step with bias_correction, 1 without
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
// torch.optim; bias_correction and nesterov are ints (0 or 1).
#include "ir/functions.h"

#include <onnxtrain/error.h>

#include <algorithm>
#include <string>

namespace onnxtrain::training {
namespace {

const char* const kAccumulateGradient = R"(
AccumulateGradient (grad, buffer, reset) => (out) {
  sum = Add (buffer, grad)
  out = Where (reset, grad, sum)
}
)";

// The scalar coefficients are computed in double (torch.optim computes them in Python
// floats), then cast to the parameter's type; the element-wise part runs in that type in
// the order torch.optim's single-tensor AdamW uses (lerp for m, addcmul for v, addcdiv).
const char* const kAdamWStep = R"(
AdamWStep <beta1, beta2, epsilon, weight_decay, bias_correction> (lr, step, p, g, m, v) => (p_out, m_out, v_out) {
  b1 = Constant <value: tensor = @beta1> ()
  b2 = Constant <value: tensor = @beta2> ()
  eps_d = Constant <value: tensor = @epsilon> ()
  wd = Constant <value: tensor = @weight_decay> ()
  correct_i = Constant <value_int: int = @bias_correction> ()
  one = Constant <value = double {1}> ()
  correct = Cast <to = 9> (correct_i)
  lr_d = Cast <to = 11> (lr)
  step_d = Cast <to = 11> (step)
  lr_wd = Mul (lr_d, wd)
  decay_d = Sub (one, lr_wd)
  keep_g1_d = Sub (one, b1)
  keep_g2_d = Sub (one, b2)
  b1_power = Pow (b1, step_d)
  b2_power = Pow (b2, step_d)
  bc1_corrected = Sub (one, b1_power)
  bc2_corrected = Sub (one, b2_power)
  bc1 = Where (correct, bc1_corrected, one)
  bc2 = Where (correct, bc2_corrected, one)
  step_size_d = Div (lr_d, bc1)
  bc2_sqrt_d = Sqrt (bc2)
  decay = CastLike (decay_d, p)
  keep_g1 = CastLike (keep_g1_d, p)
  keep_g2 = CastLike (keep_g2_d, p)
  b2_t = CastLike (b2, p)
  eps = CastLike (eps_d, p)
  step_size = CastLike (step_size_d, p)
  bc2_sqrt = CastLike (bc2_sqrt_d, p)
  g_minus_m = Sub (g, m)
  m_delta = Mul (g_minus_m, keep_g1)
  m_out = Add (m, m_delta)
  v_kept = Mul (v, b2_t)
  g_square = Mul (g, g)
  v_delta = Mul (g_square, keep_g2)
  v_out = Add (v_kept, v_delta)
  v_sqrt = Sqrt (v_out)
  v_hat_sqrt = Div (v_sqrt, bc2_sqrt)
  denominator = Add (v_hat_sqrt, eps)
  ratio = Div (m_out, denominator)
  update = Mul (ratio, step_size)
  p_decayed = Mul (p, decay)
  p_out = Sub (p_decayed, update)
}
)";

const char* const kSGDStep = R"(
SGDStep <weight_decay> (lr, p, g) => (p_out) {
  wd_d = Constant <value: tensor = @weight_decay> ()
  wd = CastLike (wd_d, p)
  lr_t = CastLike (lr, p)
  decay_term = Mul (p, wd)
  direction = Add (g, decay_term)
  update = Mul (direction, lr_t)
  p_out = Sub (p, update)
}
)";

const char* const kSGDMomentumStep = R"(
SGDMomentumStep <momentum, dampening, nesterov, weight_decay> (lr, step, p, g, buf) => (p_out, buf_out) {
  mu_d = Constant <value: tensor = @momentum> ()
  dampening_d = Constant <value: tensor = @dampening> ()
  wd_d = Constant <value: tensor = @weight_decay> ()
  nesterov_i = Constant <value_int: int = @nesterov> ()
  one = Constant <value = double {1}> ()
  first_step = Constant <value = int64 {1}> ()
  nesterov = Cast <to = 9> (nesterov_i)
  first = Equal (step, first_step)
  keep_d = Sub (one, dampening_d)
  mu = CastLike (mu_d, p)
  keep = CastLike (keep_d, p)
  wd = CastLike (wd_d, p)
  lr_t = CastLike (lr, p)
  decay_term = Mul (p, wd)
  d = Add (g, decay_term)
  buf_kept = Mul (buf, mu)
  d_kept = Mul (d, keep)
  buf_next = Add (buf_kept, d_kept)
  buf_out = Where (first, d, buf_next)
  look_ahead = Mul (buf_out, mu)
  d_nesterov = Add (d, look_ahead)
  direction = Where (nesterov, d_nesterov, buf_out)
  update = Mul (direction, lr_t)
  p_out = Sub (p, update)
}
)";

const ir::FunctionRegistration kAccumulateGradientFunction{kAccumulateGradient, 9};  // Where
const ir::FunctionRegistration kAdamWStepFunction{kAdamWStep, 15};                    // CastLike
const ir::FunctionRegistration kSGDStepFunction{kSGDStep, 15};
const ir::FunctionRegistration kSGDMomentumStepFunction{kSGDMomentumStep, 15};

}  // namespace

}  // namespace onnxtrain::training
