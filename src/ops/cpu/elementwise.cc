// Elementwise kernels: arithmetic, math functions, comparisons, logic.
#include <cmath>

#include "core/dispatch.h"
#include "ops/cpu/broadcast.h"
#include "ops/kernel_registry.h"

namespace onnxtrain {
namespace {

// out[i] = op(a[i], b[i]) with broadcasting; T is the input type, R the output type.
template <typename T, typename R, typename Op>
void binary(KernelContext& ctx, DType out_dtype, Op op) {
  const Tensor& a = ctx.input(0);
  const Tensor& b = ctx.input(1);
  Shape shape = broadcast_shapes(a.shape(), b.shape());
  const bool in_place = std::is_same_v<T, R> && a.shape() == shape;
  Tensor& out = in_place ? ctx.allocate_output_in_place(0, 0, out_dtype, shape)
                         : ctx.allocate_output(0, out_dtype, shape);
  const T* pa = a.data<T>();
  const T* pb = b.data<T>();
  R* po = out.data<R>();
  using C = compute_type_t<T>;
  for_each_broadcast_row<2>(shape, {&a.shape(), &b.shape()},
                            [&](int64_t o, const auto& offsets, const auto& strides, int64_t n) {
                              const T* x = pa + offsets[0];
                              const T* y = pb + offsets[1];
                              R* z = po + o;
                              if (strides[0] == 1 && strides[1] == 1) {
                                for (int64_t i = 0; i < n; ++i) z[i] = static_cast<R>(op(C(x[i]), C(y[i])));
                              } else if (strides[0] == 1) {
                                const C yv = C(*y);
                                for (int64_t i = 0; i < n; ++i) z[i] = static_cast<R>(op(C(x[i]), yv));
                              } else if (strides[1] == 1) {
                                const C xv = C(*x);
                                for (int64_t i = 0; i < n; ++i) z[i] = static_cast<R>(op(xv, C(y[i])));
                              } else {
                                const R v = static_cast<R>(op(C(*x), C(*y)));
                                for (int64_t i = 0; i < n; ++i) z[i] = v;
                              }
                            });
}

void check_same_dtype(KernelContext& ctx) {
  if (ctx.input(0).dtype() != ctx.input(1).dtype()) {
    ctx.fail("inputs have different element types (" + std::string(dtype_name(ctx.input(0).dtype())) + " and " +
             std::string(dtype_name(ctx.input(1).dtype())) + ")");
  }
}

template <typename Op>
KernelFactory arithmetic(Op op) {
  return [op](const KernelInfo&) {
    return make_kernel([op](KernelContext& ctx) {
      check_same_dtype(ctx);
      const DType dtype = ctx.input(0).dtype();
      dispatch<ONNXTRAIN_NUMERIC_TYPES>(dtype, ctx.node().op_type, [&]<typename T>() { binary<T, T>(ctx, dtype, op); });
    });
  };
}

const KernelRegistration kAdd{"", "Add", 7, kLatestOpset, arithmetic([](auto x, auto y) { return x + y; })};

// out[i] = op(x[i]); may run in place.
template <typename T, typename Op>
void unary(KernelContext& ctx, Op op) {
  const Tensor& x = ctx.input(0);
  Tensor& out = ctx.allocate_output_in_place(0, 0, x.dtype(), x.shape());
  const T* px = x.data<T>();
  T* po = out.data<T>();
  using C = compute_type_t<T>;
  parallel_for(x.numel(), 32768, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) po[i] = static_cast<T>(op(C(px[i])));
  });
}

const KernelRegistration kRelu{"", "Relu", 6, kLatestOpset, [](const KernelInfo&) {
                                 return make_kernel([](KernelContext& ctx) {
                                   dispatch<ONNXTRAIN_FLOAT_TYPES, ONNXTRAIN_SIGNED_INT_TYPES>(
                                       ctx.input(0).dtype(), "Relu", [&]<typename T>() {
                                         unary<T>(ctx, [](auto v) { return v > decltype(v)(0) ? v : decltype(v)(0); });
                                       });
                                 });
                               }};

}  // namespace
}  // namespace onnxtrain
