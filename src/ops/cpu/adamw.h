// Hugging Face's AdamW update (org.onnxtrain::AdamWStep with adam_mode 1), as
// onnxruntime-training's AdamWOptimizer CPU kernel computes it in its adam_mode 1, shared by
// that kernel (optimizer_kernels.cc) and the Optimizer running ORT's own optimizer models
// (training/ort_training_model.cc).
//
// The scalars are computed in `scalar_type` (float32, as ORT, or float64): the betas, epsilon
// and weight decay rounded to it, bc_i = 1 - beta_i^step (the power of the rounded beta taken
// in double, as std::pow(float, int64_t) does, then rounded), the corrected rate
// lr sqrt(bc2) / bc1 and lr wd. Per element, in the parameter's type (float for the 16-bit
// floats, every result rounded to the parameter's type), in the order of ORT's Eigen
// expressions:
//   m = beta1 m + (1 - beta1) g;  v = beta2 v + ((1 - beta2) g) g;
//   p = p - (rate m) / (sqrt(v) + epsilon);  p = p - (lr wd) p.
// No fused multiply-add: optimizer_kernels.cc is compiled with -ffp-contract=off.
#pragma once

#include <onnxtrain/dtype.h>

#include <cstdint>

namespace onnxtrain {

struct AdamWHyperparameters {
  double beta1 = 0.9;
  double beta2 = 0.999;
  double epsilon = 1e-8;
  double weight_decay = 0.0;
  bool bias_correction = true;
};

// One update of n elements of `dtype` (float, double, float16, bfloat16); `lr` is a value of
// `scalar_type` (float32 or float64), `step` counts from 1. The outputs p1, m1, v1 may be
// the inputs p, m, v (in place), element for element.
void adamw_huggingface_update(const AdamWHyperparameters& h, DType scalar_type, double lr, int64_t step, DType dtype,
                              const void* p, const void* g, const void* m, const void* v, void* p1, void* m1, void* v1,
                              int64_t n);

// onnxruntime-training's AdamWOptimizer in adam_mode 0 (torch's rule, computed in float in
// ORT's order: decay first, then the moments, then the step; bc_i = 1 - beta_i^step when
// bias_correction), over n elements of float or double updated in place.
void adamw_ort_torch_update(const AdamWHyperparameters& h, float lr, int64_t step, DType dtype, void* p, const void* g,
                            void* m, void* v, int64_t n);

}  // namespace onnxtrain
