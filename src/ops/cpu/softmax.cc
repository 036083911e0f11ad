// Softmax, LogSoftmax and Hardmax.
//
// Up to opset 12 these flatten X to 2-D at `axis` (default 1) and normalize each row; from
// opset 13 they normalize along the single axis `axis` (default -1). Both views are
// [outer, length, inner] here, computed by one loop that keeps `inner` running maxima and
// sums side by side, so that it reads contiguous memory and vectorizes (with vector_math's
// branch-free exp). It is as fast as onnxruntime's and oneDNN 2.6's softmax here, and
// unlike oneDNN's it follows ONNX exactly: oneDNN's LogSoftmax is off by ~1e-6 (an
// approximate log) and its Softmax turns a row holding a NaN into zeros instead of NaNs.
#include <cmath>
#include <cstring>
#include <limits>

#include "core/dispatch.h"
#include "ops/cpu/axis.h"
#include "ops/cpu/multiversion.h"
#include "ops/cpu/onednn.h"
#include "ops/cpu/vector_math.h"
#include "ops/kernel_registry.h"

namespace onnxtrain {
namespace {

enum class SoftmaxKind { kSoftmax, kLogSoftmax, kHardmax };

// x along `axis`; before opset 13 the rows are everything from `axis` on.
AxisView softmax_view(KernelContext& ctx, const Tensor& x, int64_t axis, bool flatten) {
  if (x.rank() == 0) ctx.fail("input must have rank 1 or more, got a scalar");
  const AxisView v = axis_view(ctx, x.shape(), axis);
  return flatten ? AxisView{v.outer, v.length * v.inner, 1} : v;
}

// Softmax or LogSoftmax of one [length, inner] block in A (float or double); `best` and
// `sum` hold `inner` values each. Every loop runs over contiguous memory with no branches,
// so it vectorizes (exp is vector_math's branch-free one for float).
template <typename A>
ONNXTRAIN_MULTIVERSIONED [[gnu::flatten]] void softmax_block(bool log, const A* x, A* y, int64_t length, int64_t inner,
                                                             A* best, A* sum) {
  if (inner == 1) {
    const A m = onednn::lane_max(x, length);
    // y = e^(x - m) and its sum, a vector of lanes at a time (short rows, such as attention
    // over 16 positions, spend their time around the loop otherwise).
    using Lanes = onednn::LaneVector<A>;
    Lanes lanes = {};
    int64_t i = 0;
    for (; i + onednn::kLanes <= length; i += onednn::kLanes) {
      Lanes v;
      std::memcpy(&v, x + i, sizeof v);
      for (int l = 0; l < onednn::kLanes; ++l) v[l] = vector_math::exp(v[l] - m);
      std::memcpy(y + i, &v, sizeof v);
      lanes += v;
    }
    A total = onednn::fold_lanes<A>(lanes, [](auto a, auto b) { return a + b; });
    for (; i < length; ++i) {
      y[i] = vector_math::exp(x[i] - m);
      total += y[i];
    }
    if (log) {
      // (x - max) - log(sum): adding log(sum) to a large max first would round it away.
      const A log_total = std::log(total);
      for (int64_t i = 0; i < length; ++i) y[i] = (x[i] - m) - log_total;
    } else {
      const A scale = A(1) / total;
      for (int64_t i = 0; i < length; ++i) y[i] *= scale;
    }
    return;
  }
  std::copy(x, x + inner, best);
  for (int64_t l = 1; l < length; ++l)
    for (int64_t i = 0; i < inner; ++i) {
      const A v = x[l * inner + i];
      best[i] = v > best[i] ? v : best[i];
    }
  std::fill(sum, sum + inner, A(0));
  for (int64_t l = 0; l < length; ++l)
    for (int64_t i = 0; i < inner; ++i) {
      const A e = vector_math::exp(x[l * inner + i] - best[i]);
      y[l * inner + i] = e;
      sum[i] += e;
    }
  if (log) {
    for (int64_t i = 0; i < inner; ++i) sum[i] = std::log(sum[i]);
    for (int64_t l = 0; l < length; ++l)
      for (int64_t i = 0; i < inner; ++i) y[l * inner + i] = (x[l * inner + i] - best[i]) - sum[i];
  } else {
    for (int64_t i = 0; i < inner; ++i) sum[i] = A(1) / sum[i];
    for (int64_t l = 0; l < length; ++l)
      for (int64_t i = 0; i < inner; ++i) y[l * inner + i] *= sum[i];
  }
}

template <typename A>
void softmax_loop(bool log, const A* x, A* y, const AxisView& v) {
  const int64_t block = v.length * v.inner;
  parallel_for(v.outer, std::max<int64_t>(1, 16384 / std::max<int64_t>(block, 1)), [&](int64_t begin, int64_t end) {
    std::vector<A> best(static_cast<size_t>(v.inner)), sum(static_cast<size_t>(v.inner));
    for (int64_t o = begin; o < end; ++o)
      softmax_block(log, x + o * block, y + o * block, v.length, v.inner, best.data(), sum.data());
  });
}

// Hardmax: 1 at the first maximum along the axis, 0 elsewhere.
template <typename T>
void hardmax_loop(const T* x, T* y, const AxisView& v) {
  using C = compute_type_t<T>;
  const int64_t block = v.length * v.inner;
  parallel_for(v.outer * v.inner, std::max<int64_t>(1, 16384 / std::max<int64_t>(v.length, 1)),
               [&](int64_t begin, int64_t end) {
                 for (int64_t r = begin; r < end; ++r) {
                   const int64_t base = (r / v.inner) * block + r % v.inner;
                   int64_t arg = 0;
                   C best = static_cast<C>(x[base]);
                   for (int64_t l = 1; l < v.length; ++l) {
                     const C value = static_cast<C>(x[base + l * v.inner]);
                     if (value > best) {
                       best = value;
                       arg = l;
                     }
                   }
                   for (int64_t l = 0; l < v.length; ++l) y[base + l * v.inner] = static_cast<T>(C(l == arg ? 1 : 0));
                 }
               });
}

class SoftmaxKernel final : public OpKernel {
 public:
  SoftmaxKernel(const KernelInfo& info, SoftmaxKind kind)
      : kind_(kind), flatten_(info.opset() < 13), axis_(info.int_attribute("axis", info.opset() < 13 ? 1 : -1)) {}

  void compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    const AxisView v = softmax_view(ctx, x, axis_, flatten_);
    Tensor& y = ctx.allocate_output(0, x.dtype(), x.shape());
    if (y.numel() == 0) return;
    if (kind_ == SoftmaxKind::kHardmax) {
      dispatch<float, double, Float16, BFloat16>(x.dtype(), ctx.node().op_type,
                                                 [&]<typename T>() { hardmax_loop<T>(x.data<T>(), y.data<T>(), v); });
      return;
    }
    const bool log = kind_ == SoftmaxKind::kLogSoftmax;
    switch (x.dtype()) {
      case DType::kFloat32:
        softmax_loop(log, x.data<float>(), y.data<float>(), v);
        return;
      case DType::kFloat64:
        softmax_loop(log, x.data<double>(), y.data<double>(), v);
        return;
      case DType::kFloat16:
      case DType::kBFloat16: {  // in float, through scratch copies
        const Tensor wide = onednn::to_float32(ctx, x);
        Tensor out = ctx.allocate_scratch(DType::kFloat32, x.shape());
        softmax_loop(log, wide.data<float>(), out.data<float>(), v);
        onednn::from_float32(out, y);
        return;
      }
      default:
        dispatch<float, double, Float16, BFloat16>(x.dtype(), ctx.node().op_type, [&]<typename T>() {});
    }
  }

 private:
  SoftmaxKind kind_;
  bool flatten_;
  int64_t axis_;
};

KernelFactory softmax_factory(SoftmaxKind kind) {
  return [kind](const KernelInfo& info) { return std::make_unique<SoftmaxKernel>(info, kind); };
}

const KernelRegistration kSoftmax{"", "Softmax", 1, kLatestOpset, softmax_factory(SoftmaxKind::kSoftmax)};
const KernelRegistration kLogSoftmax{"", "LogSoftmax", 1, kLatestOpset, softmax_factory(SoftmaxKind::kLogSoftmax)};
const KernelRegistration kHardmax{"", "Hardmax", 1, kLatestOpset, softmax_factory(SoftmaxKind::kHardmax)};

// ---- SoftmaxGrad / LogSoftmaxGrad along one axis ----

// dX = Y * (dY - sum(dY * Y)) (softmax) or dY - exp(Y) * sum(dY) (log-softmax).
template <bool kLog>
KernelFactory softmax_grad(const char* name) {
  return [name](const KernelInfo& info) {
    const int64_t axis = info.int_attribute("axis", -1);
    return make_kernel([name, axis](KernelContext& ctx) {
      const Tensor& dy = ctx.input(0);
      const Tensor& y = ctx.input(1);
      ctx.require_alike(dy, y, name);
      const AxisView v = axis_view(ctx, dy.shape(), axis);
      dispatch<ONNXTRAIN_FLOAT_TYPES>(dy.dtype(), name, [&]<typename T>() {
        using C = compute_type_t<T>;
        Tensor& dx = ctx.allocate_output_in_place(0, 0, dy.dtype(), dy.shape());
        const T* g = dy.data<T>();
        const T* p = y.data<T>();
        T* out = dx.data<T>();
        parallel_for(v.outer * v.inner, std::max<int64_t>(1, 4096 / v.length), [&](int64_t begin, int64_t end) {
          for (int64_t r = begin; r < end; ++r) {
            const int64_t base = (r / v.inner) * v.length * v.inner + r % v.inner;
            C sum = 0;
            for (int64_t j = 0; j < v.length; ++j) {
              const int64_t i = base + j * v.inner;
              sum += kLog ? C(g[i]) : C(g[i]) * C(p[i]);
            }
            for (int64_t j = 0; j < v.length; ++j) {
              const int64_t i = base + j * v.inner;
              out[i] =
                  kLog ? static_cast<T>(C(g[i]) - std::exp(C(p[i])) * sum) : static_cast<T>(C(p[i]) * (C(g[i]) - sum));
            }
          }
        });
      });
    });
  };
}

const KernelRegistration kSoftmaxGrad{"org.onnxtrain", "SoftmaxGrad", 1, kLatestOpset,
                                      softmax_grad<false>("SoftmaxGrad")};
const KernelRegistration kLogSoftmaxGrad{"org.onnxtrain", "LogSoftmaxGrad", 1, kLatestOpset,
                                         softmax_grad<true>("LogSoftmaxGrad")};

// com.microsoft's gradient ops (onnxruntime-training's artifacts): where one computes what an
// org.onnxtrain op computes, the same kernel runs it. Opset-13 softmax: one axis, as org.onnxtrain's.
const KernelRegistration kMicrosoftSoftmaxGrad13{"com.microsoft", "SoftmaxGrad_13", 1, kLatestOpset,
                                                 same_kernel_as("org.onnxtrain", "SoftmaxGrad")};
const KernelRegistration kMicrosoftLogSoftmaxGrad13{"com.microsoft", "LogSoftmaxGrad_13", 1, kLatestOpset,
                                                    same_kernel_as("org.onnxtrain", "LogSoftmaxGrad")};

}  // namespace
}  // namespace onnxtrain
