#include "training/functions.h"

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

}  // namespace

const autodiff::FunctionLibrary& training_functions() {
  static const autodiff::FunctionLibrary library = [] {
    autodiff::FunctionLibrary functions;
    functions.add(kAccumulateGradient, 9);  // Where
    functions.add(kAdamWStep, 15);          // CastLike
    functions.add(kSGDStep, 15);
    functions.add(kSGDMomentumStep, 15);
    return functions;
  }();
  return library;
}

void use_training_function(ir::Model& model, std::string_view name) { training_functions().add_to(model, name); }

}  // namespace onnxtrain::training
