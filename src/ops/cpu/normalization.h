// What the normalization kernels and their gradients (normalization.cc,
// normalization_grad.cc) share.
#pragma once

#include <onnxtrain/tensor.h>

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/dispatch.h"
#include "ops/cpu/axis.h"
#include "ops/kernel.h"

namespace onnxtrain::normalization {

// The values of a float tensor of any float type, as C.
template <typename C>
std::vector<C> values_as(const Tensor& t, std::string_view what) {
  std::vector<C> out(static_cast<size_t>(t.numel()));
  dispatch<float, double, Float16, BFloat16>(t.dtype(), what, [&]<typename T>() {
    const T* p = t.data<T>();
    for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<C>(static_cast<compute_type_t<T>>(p[i]));
  });
  return out;
}

// Writes C values into a float tensor of any float type.
template <typename C>
void store(const std::vector<C>& values, Tensor& t) {
  dispatch<float, double, Float16, BFloat16>(t.dtype(), "store", [&]<typename T>() {
    T* p = t.data<T>();
    for (size_t i = 0; i < values.size(); ++i) p[i] = static_cast<T>(static_cast<compute_type_t<T>>(values[i]));
  });
}

// Fails unless `t` holds a floating-point type (float, double, float16, bfloat16).
inline void check_float(const KernelContext& ctx, const Tensor& t, const char* name) {
  const DType d = t.dtype();
  if (d != DType::kFloat32 && d != DType::kFloat64 && d != DType::kFloat16 && d != DType::kBFloat16) {
    ctx.fail(std::string(name) + " has element type " + std::string(dtype_name(d)) +
             ", expected float, double, float16 or bfloat16");
  }
}

// The rows of X over axes [axis, rank), and scale, which spans exactly those axes (as ORT's
// kernels require).
struct SimplifiedRows {
  int64_t rows = 0, cols = 0;
  size_t axis = 0;
};

inline SimplifiedRows simplified_rows(const KernelContext& ctx, int64_t axis, const Tensor& x, const Tensor& scale) {
  check_float(ctx, x, "X");
  SimplifiedRows r;
  r.axis = static_cast<size_t>(normalize_axis(ctx, axis, static_cast<int64_t>(x.rank())));
  const Shape normalized(x.shape().begin() + static_cast<int64_t>(r.axis), x.shape().end());
  if (scale.dtype() != x.dtype() || scale.shape() != normalized) {
    ctx.fail("scale is " + std::string(dtype_name(scale.dtype())) + shape_string(scale.shape()) + "; expected " +
             std::string(dtype_name(x.dtype())) + shape_string(normalized) + ", X's axes from " +
             std::to_string(r.axis));
  }
  r.rows = shape_size(std::span(x.shape()).first(r.axis));
  r.cols = shape_size(normalized);
  return r;
}

}  // namespace onnxtrain::normalization
