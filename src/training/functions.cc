// The org.onnxtrain functions the training artifacts add, registered in
// ir::FunctionLibrary::global(): gradient accumulation
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

// adam_mode 0 (torch.optim.AdamW): the scalar coefficients are computed in double (torch.optim
// computes them in Python floats), then cast to the parameter's type; the element-wise part
// runs in that type in the order torch.optim's single-tensor AdamW uses (lerp for m, addcmul
// for v, addcdiv). adam_mode 1 (Hugging Face's, as onnxruntime-training's CPU kernel): the
// scalars in lr's type ("s_" values; the powers of the rounded betas in double, as
// std::pow(float, int64) computes them), the element-wise part in the parameter's type in the
// order of ORT's Eigen expressions ("hf_" values). Both run; Where picks one.
const char* const kAdamWStep = R"(
AdamWStep <beta1, beta2, epsilon, weight_decay, bias_correction, adam_mode> (lr, step, p, g, m, v) => (p_out, m_out, v_out) {
  b1 = Constant <value: tensor = @beta1> ()
  b2 = Constant <value: tensor = @beta2> ()
  eps_d = Constant <value: tensor = @epsilon> ()
  wd = Constant <value: tensor = @weight_decay> ()
  correct_i = Constant <value_int: int = @bias_correction> ()
  mode_i = Constant <value_int: int = @adam_mode> ()
  one = Constant <value = double {1}> ()
  correct = Cast <to = 9> (correct_i)
  huggingface = Cast <to = 9> (mode_i)
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
  torch_m = Add (m, m_delta)
  v_kept = Mul (v, b2_t)
  g_square = Mul (g, g)
  v_delta = Mul (g_square, keep_g2)
  torch_v = Add (v_kept, v_delta)
  v_sqrt = Sqrt (torch_v)
  v_hat_sqrt = Div (v_sqrt, bc2_sqrt)
  denominator = Add (v_hat_sqrt, eps)
  ratio = Div (torch_m, denominator)
  update = Mul (ratio, step_size)
  p_decayed = Mul (p, decay)
  torch_p = Sub (p_decayed, update)
  s_one = CastLike (one, lr)
  s_b1 = CastLike (b1, lr)
  s_b2 = CastLike (b2, lr)
  s_eps = CastLike (eps_d, lr)
  s_wd = CastLike (wd, lr)
  s_b1_d = Cast <to = 11> (s_b1)
  s_b2_d = Cast <to = 11> (s_b2)
  s_b1_power_d = Pow (s_b1_d, step_d)
  s_b2_power_d = Pow (s_b2_d, step_d)
  s_b1_power = CastLike (s_b1_power_d, lr)
  s_b2_power = CastLike (s_b2_power_d, lr)
  s_bc1_corrected = Sub (s_one, s_b1_power)
  s_bc2_corrected = Sub (s_one, s_b2_power)
  s_bc1 = Where (correct, s_bc1_corrected, s_one)
  s_bc2 = Where (correct, s_bc2_corrected, s_one)
  s_bc2_sqrt = Sqrt (s_bc2)
  s_correction = Div (s_bc2_sqrt, s_bc1)
  s_rate = Mul (lr, s_correction)
  s_keep1 = Sub (s_one, s_b1)
  s_keep2 = Sub (s_one, s_b2)
  s_lr_wd = Mul (lr, s_wd)
  hf_b1 = CastLike (s_b1, p)
  hf_b2 = CastLike (s_b2, p)
  hf_keep1 = CastLike (s_keep1, p)
  hf_keep2 = CastLike (s_keep2, p)
  hf_eps = CastLike (s_eps, p)
  hf_rate = CastLike (s_rate, p)
  hf_lr_wd = CastLike (s_lr_wd, p)
  hf_m_kept = Mul (hf_b1, m)
  hf_m_new = Mul (hf_keep1, g)
  hf_m = Add (hf_m_kept, hf_m_new)
  hf_v_kept = Mul (hf_b2, v)
  hf_g_scaled = Mul (hf_keep2, g)
  hf_v_new = Mul (hf_g_scaled, g)
  hf_v = Add (hf_v_kept, hf_v_new)
  hf_v_sqrt = Sqrt (hf_v)
  hf_denominator = Add (hf_v_sqrt, hf_eps)
  hf_numerator = Mul (hf_rate, hf_m)
  hf_update = Div (hf_numerator, hf_denominator)
  hf_p_updated = Sub (p, hf_update)
  hf_decay = Mul (hf_lr_wd, hf_p_updated)
  hf_p = Sub (hf_p_updated, hf_decay)
  p_out = Where (huggingface, hf_p, torch_p)
  m_out = Where (huggingface, hf_m, torch_m)
  v_out = Where (huggingface, hf_v, torch_v)
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
const ir::FunctionRegistration kAdamWStepFunction{kAdamWStep, 15};                   // CastLike
const ir::FunctionRegistration kSGDStepFunction{kSGDStep, 15};
const ir::FunctionRegistration kSGDMomentumStepFunction{kSGDMomentumStep, 15};

}  // namespace

}  // namespace onnxtrain::training
