// Fused kernels for the org.onnxtrain gradient ops (src/autodiff). Each computes what its
// function body (the standard-ONNX definition in src/autodiff/rules/*.cc, which other
// runtimes inline) computes, in one pass; tests/python/autodiff/test_functions.py runs
// both on random inputs.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <optional>
#include <vector>

#include "core/dispatch.h"
#include "core/parallel.h"
#include "ops/cpu/broadcast.h"
#include "ops/cpu/elementwise.h"
#include "ops/cpu/multiversion.h"
#include "ops/cpu/onednn.h"
#include "ops/cpu/vector_math.h"
#include "ops/kernel_registry.h"

namespace onnxtrain {
namespace {

constexpr const char* kDomain = "org.onnxtrain";

#define GRAD_FLOAT_TYPES float, double, Float16, BFloat16

void check_same_shape(KernelContext& ctx, const Tensor& a, const Tensor& b, const char* what) {
  if (a.shape() != b.shape()) {
    ctx.fail(std::string(what) + ": shapes " + shape_string(a.shape()) + " and " + shape_string(b.shape()) + " differ");
  }
  if (a.dtype() != b.dtype()) ctx.fail(std::string(what) + ": element types differ");
}

// A value of any float type read as C.
template <typename C>
C read_as(const Tensor& t, int64_t i) {
  switch (t.dtype()) {
    case DType::kFloat32:
      return static_cast<C>(t.data<float>()[i]);
    case DType::kFloat64:
      return static_cast<C>(t.data<double>()[i]);
    case DType::kFloat16:
      return static_cast<C>(static_cast<float>(t.data<Float16>()[i]));
    case DType::kBFloat16:
      return static_cast<C>(static_cast<float>(t.data<BFloat16>()[i]));
    default:
      throw Error("expected a floating-point tensor, got " + std::string(dtype_name(t.dtype())));
  }
}

// ---- elementwise: dX = f(dY, Y or X) ----

template <typename F>
KernelFactory elementwise_grad(const char* name, F f) {
  return [name, f](const KernelInfo&) {
    return make_kernel([name, f](KernelContext& ctx) {
      check_same_shape(ctx, ctx.input(0), ctx.input(1), name);
      dispatch<GRAD_FLOAT_TYPES>(ctx.input(0).dtype(), name,
                                 [&]<typename T>() { elementwise::binary<T, T, T>(ctx, f); });
    });
  };
}

const KernelRegistration kReluGrad{
    kDomain, "ReluGrad", 1, kLatestOpset,
    elementwise_grad("ReluGrad", [](auto dy, auto y) { return y > decltype(y)(0) ? dy : decltype(y)(0); })};

const KernelRegistration kSigmoidGrad{
    kDomain, "SigmoidGrad", 1, kLatestOpset,
    elementwise_grad("SigmoidGrad", [](auto dy, auto y) { return dy * (y * (decltype(y)(1) - y)); })};

const KernelRegistration kTanhGrad{
    kDomain, "TanhGrad", 1, kLatestOpset,
    elementwise_grad("TanhGrad", [](auto dy, auto y) { return dy * (decltype(y)(1) - y * y); })};

// Phi(x) + x phi(x), Phi and phi the standard normal CDF and density.
const KernelRegistration kGeluGrad{kDomain, "GeluGrad", 1, kLatestOpset,
                                   elementwise_grad("GeluGrad", [](auto dy, auto x) {
                                     using C = decltype(x);
                                     const C cdf = C(0.5) * vector_math::erfc(x * C(-0.70710678118654752));
                                     const C density = vector_math::exp(C(-0.5) * x * x) * C(0.39894228040143268);
                                     return dy * (cdf + x * density);
                                   })};

const KernelRegistration kGeluTanhGrad{kDomain, "GeluTanhGrad", 1, kLatestOpset,
                                       elementwise_grad("GeluTanhGrad", [](auto dy, auto x) {
                                         using C = decltype(x);
                                         const C k = C(0.79788456080286536);
                                         const C t = vector_math::tanh(k * (x + C(0.044715) * x * x * x));
                                         const C du = k * (C(1) + C(0.134145) * x * x);
                                         return dy * (C(0.5) * (C(1) + t) + C(0.5) * x * (C(1) - t * t) * du);
                                       })};

// ---- ReduceToShape: sum over the axes along which the target was broadcast ----

// Merges adjacent axes of the same kind (summed or kept) of a shape aligned with the
// target; returns (sizes, summed flags).
void merge_axes(const Shape& shape, const std::vector<bool>& summed, Shape& sizes, std::vector<bool>& kinds) {
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == 1) continue;  // size-1 axes change nothing
    if (!sizes.empty() && kinds.back() == summed[i]) {
      sizes.back() *= shape[i];
    } else {
      sizes.push_back(shape[i]);
      kinds.push_back(summed[i]);
    }
  }
}

// y[j] = sum over r of x[r * cols + j]: the gradient of a bias broadcast over leading axes.
// Rows are added in order, as in the general loop below, but into a block of column sums at
// a time, so that the inner loop runs over contiguous memory.
constexpr int64_t kSumRowsBlock = 256;

// Columns [begin, end) of sum_rows.
template <typename T>
ONNXTRAIN_MULTIVERSIONED [[gnu::flatten]] void sum_rows_range(const T* x, T* y, int64_t rows, int64_t cols,
                                                              int64_t begin, int64_t end) {
  using C = compute_type_t<T>;
  for (int64_t first = begin; first < end; first += kSumRowsBlock) {
    const int64_t n = std::min(kSumRowsBlock, end - first);
    C sums[kSumRowsBlock] = {};
    for (int64_t r = 0; r < rows; ++r) {
      const T* row = x + r * cols + first;
      for (int64_t j = 0; j < n; ++j) sums[j] += C(row[j]);
    }
    for (int64_t j = 0; j < n; ++j) y[first + j] = static_cast<T>(sums[j]);
  }
}

template <typename T>
void sum_rows(const T* x, T* y, int64_t rows, int64_t cols) {
  parallel_for(cols, kSumRowsBlock, [&](int64_t begin, int64_t end) { sum_rows_range(x, y, rows, cols, begin, end); });
}

template <typename T>
void reduce_to_shape(const Tensor& in, Tensor& out, const Shape& aligned) {
  using C = compute_type_t<T>;
  std::vector<bool> summed(aligned.size());
  for (size_t i = 0; i < aligned.size(); ++i) summed[i] = aligned[i] == 1 && in.shape()[i] != 1;
  Shape sizes;
  std::vector<bool> kinds;
  merge_axes(in.shape(), summed, sizes, kinds);
  const T* x = in.data<T>();
  T* y = out.data<T>();
  const int64_t total = in.numel();
  const int64_t outputs = out.numel();
  // Strides of the merged input axes and, for kept axes, of the output.
  const size_t rank = sizes.size();
  std::vector<int64_t> in_stride(rank), out_stride(rank, 0);
  int64_t s = 1, o = 1;
  for (size_t i = rank; i-- > 0;) {
    in_stride[i] = s;
    s *= sizes[i];
    if (!kinds[i]) {
      out_stride[i] = o;
      o *= sizes[i];
    }
  }
  if (rank == 0 || outputs == total) {
    for (int64_t i = 0; i < total; ++i) y[i] = x[i];
    return;
  }
  if (rank == 2 && kinds[0] && !kinds[1]) {
    sum_rows(x, y, sizes[0], sizes[1]);
    return;
  }
  // Each output element sums its preimage: kept axes fixed, summed axes walked.
  std::vector<size_t> kept, reduced;
  for (size_t i = 0; i < rank; ++i) (kinds[i] ? reduced : kept).push_back(i);
  int64_t reduced_count = 1;
  for (size_t i : reduced) reduced_count *= sizes[i];
  const bool inner_reduced = kinds[rank - 1];
  parallel_for(outputs, std::max<int64_t>(1, 16384 / reduced_count), [&](int64_t begin, int64_t end) {
    for (int64_t out_index = begin; out_index < end; ++out_index) {
      int64_t base = 0;
      int64_t rest = out_index;
      for (size_t k = kept.size(); k-- > 0;) {
        const size_t axis = kept[k];
        base += (rest % sizes[axis]) * in_stride[axis];
        rest /= sizes[axis];
      }
      C sum = 0;
      if (inner_reduced && reduced.size() == 1) {
        const T* p = x + base;
        for (int64_t j = 0; j < sizes[rank - 1]; ++j) sum += C(p[j]);
      } else {
        for (int64_t r = 0; r < reduced_count; ++r) {
          int64_t offset = base;
          int64_t q = r;
          for (size_t k = reduced.size(); k-- > 0;) {
            const size_t axis = reduced[k];
            offset += (q % sizes[axis]) * in_stride[axis];
            q /= sizes[axis];
          }
          sum += C(x[offset]);
        }
      }
      y[out_index] = static_cast<T>(sum);
    }
  });
}

const KernelRegistration kReduceToShape{
    kDomain, "ReduceToShape", 1, kLatestOpset, [](const KernelInfo&) {
      return make_kernel([](KernelContext& ctx) {
        const Tensor& grad = ctx.input(0);
        const Shape target = ctx.input(1).to_int64_vector();
        if (target.size() > grad.rank()) ctx.fail("the target shape has more axes than the gradient");
        Shape aligned(grad.rank() - target.size(), 1);
        aligned.insert(aligned.end(), target.begin(), target.end());
        for (size_t i = 0; i < aligned.size(); ++i) {
          if (aligned[i] != 1 && aligned[i] != grad.shape()[i]) {
            ctx.fail("cannot reduce " + shape_string(grad.shape()) + " to " + shape_string(target));
          }
        }
        if (aligned == grad.shape()) {
          ctx.set_output(0, grad.reshaped(target));  // nothing was broadcast
          return;
        }
        Tensor& out = ctx.allocate_output(0, grad.dtype(), target);
        const size_t lead = grad.rank() - target.size();
        if (std::equal(target.begin(), target.end(), grad.shape().begin() + static_cast<int64_t>(lead))) {
          // A bias broadcast over leading axes (Gemm, MatMul + Add): the sums of the rows.
          const int64_t cols = out.numel(), rows = cols ? grad.numel() / cols : 0;
          dispatch<GRAD_FLOAT_TYPES>(grad.dtype(), "ReduceToShape",
                                     [&]<typename T>() { sum_rows(grad.data<T>(), out.data<T>(), rows, cols); });
          return;
        }
        dispatch<GRAD_FLOAT_TYPES>(grad.dtype(), "ReduceToShape",
                                   [&]<typename T>() { reduce_to_shape<T>(grad, out, aligned); });
      });
    }};

// ---- SoftmaxGrad / LogSoftmaxGrad along one axis ----

struct AxisView {
  int64_t outer = 1, n = 1, inner = 1;
};

AxisView axis_view(KernelContext& ctx, const Shape& shape, int64_t axis) {
  const int64_t rank = static_cast<int64_t>(shape.size());
  if (axis < 0) axis += rank;
  if (axis < 0 || axis >= rank) ctx.fail("axis out of range for shape " + shape_string(shape));
  AxisView v;
  for (int64_t i = 0; i < axis; ++i) v.outer *= shape[static_cast<size_t>(i)];
  v.n = shape[static_cast<size_t>(axis)];
  for (int64_t i = axis + 1; i < rank; ++i) v.inner *= shape[static_cast<size_t>(i)];
  return v;
}

// dX = Y * (dY - sum(dY * Y)) (softmax) or dY - exp(Y) * sum(dY) (log-softmax).
template <bool kLog>
KernelFactory softmax_grad(const char* name) {
  return [name](const KernelInfo& info) {
    const int64_t axis = info.int_attribute("axis", -1);
    return make_kernel([name, axis](KernelContext& ctx) {
      const Tensor& dy = ctx.input(0);
      const Tensor& y = ctx.input(1);
      check_same_shape(ctx, dy, y, name);
      const AxisView v = axis_view(ctx, dy.shape(), axis);
      dispatch<GRAD_FLOAT_TYPES>(dy.dtype(), name, [&]<typename T>() {
        using C = compute_type_t<T>;
        Tensor& dx = ctx.allocate_output_in_place(0, 0, dy.dtype(), dy.shape());
        const T* g = dy.data<T>();
        const T* p = y.data<T>();
        T* out = dx.data<T>();
        parallel_for(v.outer * v.inner, std::max<int64_t>(1, 4096 / v.n), [&](int64_t begin, int64_t end) {
          for (int64_t r = begin; r < end; ++r) {
            const int64_t base = (r / v.inner) * v.n * v.inner + r % v.inner;
            C sum = 0;
            for (int64_t j = 0; j < v.n; ++j) {
              const int64_t i = base + j * v.inner;
              sum += kLog ? C(g[i]) : C(g[i]) * C(p[i]);
            }
            for (int64_t j = 0; j < v.n; ++j) {
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

const KernelRegistration kSoftmaxGrad{kDomain, "SoftmaxGrad", 1, kLatestOpset, softmax_grad<false>("SoftmaxGrad")};
const KernelRegistration kLogSoftmaxGrad{kDomain, "LogSoftmaxGrad", 1, kLatestOpset,
                                         softmax_grad<true>("LogSoftmaxGrad")};

// ---- GatherGrad: dX = zeros(shape); dX[..., indices[j], ...] += dY[..., j, ...] ----

const KernelRegistration kGatherGrad{kDomain, "GatherGrad", 1, kLatestOpset, [](const KernelInfo& info) {
                                       const int64_t axis_attr = info.int_attribute("axis", 0);
                                       return make_kernel([axis_attr](KernelContext& ctx) {
                                         const Tensor& dy = ctx.input(0);
                                         const Shape shape = ctx.input(1).to_int64_vector();
                                         const std::vector<int64_t> indices = ctx.input(2).to_int64_vector();
                                         const AxisView v = axis_view(ctx, shape, axis_attr);
                                         const int64_t m = static_cast<int64_t>(indices.size());
                                         if (dy.numel() != v.outer * m * v.inner)
                                           ctx.fail("dY " + shape_string(dy.shape()) + " does not match");
                                         Tensor& dx = ctx.allocate_output(0, dy.dtype(), shape);
                                         dispatch<GRAD_FLOAT_TYPES>(dy.dtype(), "GatherGrad", [&]<typename T>() {
                                           using C = compute_type_t<T>;
                                           T* out = dx.data<T>();
                                           const T* g = dy.data<T>();
                                           std::fill(out, out + dx.numel(), T(0));
                                           for (int64_t j = 0; j < m; ++j) {
                                             const int64_t k = indices[static_cast<size_t>(j)];
                                             if (k < -v.n || k >= v.n)
                                               ctx.fail("index " + std::to_string(k) + " out of range");
                                           }
                                           // Race-free: threads own disjoint (outer row, inner column) ranges.
                                           parallel_for(v.outer * v.inner, 256, [&](int64_t begin, int64_t end) {
                                             for (int64_t r = begin; r < end;) {
                                               const int64_t o = r / v.inner;
                                               const int64_t c0 = r % v.inner;
                                               const int64_t c1 = std::min(v.inner, c0 + (end - r));
                                               for (int64_t j = 0; j < m; ++j) {
                                                 int64_t k = indices[static_cast<size_t>(j)];
                                                 if (k < 0) k += v.n;
                                                 T* dst = out + (o * v.n + k) * v.inner;
                                                 const T* src = g + (o * m + j) * v.inner;
                                                 for (int64_t c = c0; c < c1; ++c)
                                                   dst[c] = static_cast<T>(C(dst[c]) + C(src[c]));
                                               }
                                               r += c1 - c0;
                                             }
                                           });
                                         });
                                       });
                                     }};

// ---- MaxPoolGrad: dY added at the flat input positions Indices names ----

const KernelRegistration kMaxPoolGrad{
    kDomain, "MaxPoolGrad", 1, kLatestOpset, [](const KernelInfo&) {
      return make_kernel([](KernelContext& ctx) {
        const Tensor& dy = ctx.input(0);
        const Tensor& indices = ctx.input(1);
        const Shape shape = ctx.input(2).to_int64_vector();
        if (indices.numel() != dy.numel()) ctx.fail("Indices and dY differ in size");
        if (indices.dtype() != DType::kInt64) ctx.fail("Indices must be int64");
        Tensor& dx = ctx.allocate_output(0, dy.dtype(), shape);
        const int64_t planes = shape.size() >= 2 ? shape[0] * shape[1] : 1;
        const int64_t plane_in = planes ? dx.numel() / planes : 0;
        const int64_t plane_out = planes ? dy.numel() / planes : 0;
        const int64_t* idx = indices.data<int64_t>();
        for (int64_t p = 0; p < planes; ++p) {  // checked here: no throwing inside the threads
          for (int64_t i = p * plane_out; i < (p + 1) * plane_out; ++i) {
            if (idx[i] < p * plane_in || idx[i] >= (p + 1) * plane_in) {
              ctx.fail("index " + std::to_string(idx[i]) + " lies outside its (sample, channel) plane");
            }
          }
        }
        dispatch<GRAD_FLOAT_TYPES>(dy.dtype(), "MaxPoolGrad", [&]<typename T>() {
          using C = compute_type_t<T>;
          T* out = dx.data<T>();
          const T* g = dy.data<T>();
          // Indices of plane p (sample, channel) point into plane p of the input.
          parallel_for(planes, 1, [&](int64_t begin, int64_t end) {
            for (int64_t p = begin; p < end; ++p) {
              T* plane = out + p * plane_in;
              std::fill(plane, plane + plane_in, T(0));
              for (int64_t i = p * plane_out; i < (p + 1) * plane_out; ++i) {
                const int64_t at = idx[i] - p * plane_in;
                plane[at] = static_cast<T>(C(plane[at]) + C(g[i]));
              }
            }
          });
        });
      });
    }};

// ---- pooling and convolution geometry ----

struct PoolGeometry {
  std::vector<int64_t> in, out, kernel, strides, dilations, pad_begin;
  int64_t in_size() const { return std::accumulate(in.begin(), in.end(), int64_t{1}, std::multiplies<>()); }
  int64_t out_size() const { return std::accumulate(out.begin(), out.end(), int64_t{1}, std::multiplies<>()); }
  int64_t kernel_size() const { return std::accumulate(kernel.begin(), kernel.end(), int64_t{1}, std::multiplies<>()); }
};

// For every (output position, kernel offset) pair: the input position, or -1 in padding.
// `padded_extent` (when given) also marks positions inside the padding as -2 (counted by
// count_include_pad, but holding no input).
std::vector<int64_t> window_map(const PoolGeometry& g, const std::vector<int64_t>* pad_end = nullptr) {
  const size_t rank = g.in.size();
  const int64_t os = g.out_size(), ks = g.kernel_size();
  std::vector<int64_t> map(static_cast<size_t>(os * ks));
  std::vector<int64_t> o(rank), k(rank);
  for (int64_t oi = 0; oi < os; ++oi) {
    int64_t rest = oi;
    for (size_t d = rank; d-- > 0;) {
      o[d] = rest % g.out[d];
      rest /= g.out[d];
    }
    for (int64_t ki = 0; ki < ks; ++ki) {
      int64_t krest = ki;
      for (size_t d = rank; d-- > 0;) {
        k[d] = krest % g.kernel[d];
        krest /= g.kernel[d];
      }
      int64_t at = 0;
      bool padding = false, beyond = false;
      for (size_t d = 0; d < rank; ++d) {
        const int64_t pos = o[d] * g.strides[d] + k[d] * g.dilations[d] - g.pad_begin[d];
        if (pos < 0 || pos >= g.in[d]) {
          padding = true;
          const int64_t end = g.in[d] + (pad_end ? (*pad_end)[d] : 0);
          if (pos < -g.pad_begin[d] || pos >= end) beyond = true;
        }
        at = at * g.in[d] + pos;
      }
      map[static_cast<size_t>(oi * ks + ki)] = beyond ? -3 : padding ? -2 : at;
    }
  }
  return map;
}

const KernelRegistration kAveragePoolGrad{
    kDomain, "AveragePoolGrad", 1, kLatestOpset, [](const KernelInfo& info) {
      PoolGeometry base;
      base.kernel = info.ints_attribute("kernel_shape");
      const std::vector<int64_t> pads = info.ints_attribute("pads");
      base.strides = info.ints_attribute("strides");
      base.dilations = info.ints_attribute("dilations");
      const bool include_pad = info.int_attribute("count_include_pad", 0) != 0;
      const size_t rank = base.kernel.size();
      if (pads.size() != 2 * rank || base.strides.size() != rank || base.dilations.size() != rank) {
        info.fail("kernel_shape, pads, strides and dilations disagree on the number of spatial axes");
      }
      base.pad_begin.assign(pads.begin(), pads.begin() + static_cast<int64_t>(rank));
      const std::vector<int64_t> pad_end(pads.begin() + static_cast<int64_t>(rank), pads.end());
      return make_kernel([base, pad_end, include_pad, rank](KernelContext& ctx) {
        const Tensor& dy = ctx.input(0);
        const Shape shape = ctx.input(1).to_int64_vector();
        if (shape.size() != rank + 2 || dy.rank() != rank + 2) ctx.fail("rank does not match kernel_shape");
        PoolGeometry g = base;
        g.in.assign(shape.begin() + 2, shape.end());
        g.out.assign(dy.shape().begin() + 2, dy.shape().end());
        const std::vector<int64_t> map = window_map(g, &pad_end);
        const int64_t os = g.out_size(), ks = g.kernel_size(), is = g.in_size();
        std::vector<int64_t> counts(static_cast<size_t>(os), 0);
        for (int64_t oi = 0; oi < os; ++oi) {
          for (int64_t ki = 0; ki < ks; ++ki) {
            const int64_t at = map[static_cast<size_t>(oi * ks + ki)];
            if (at >= 0 || (include_pad && at == -2)) ++counts[static_cast<size_t>(oi)];
          }
        }
        Tensor& dx = ctx.allocate_output(0, dy.dtype(), shape);
        const int64_t planes = shape[0] * shape[1];
        dispatch<GRAD_FLOAT_TYPES>(dy.dtype(), "AveragePoolGrad", [&]<typename T>() {
          using C = compute_type_t<T>;
          parallel_for(planes, 1, [&](int64_t begin, int64_t end) {
            std::vector<C> acc(static_cast<size_t>(is));
            for (int64_t p = begin; p < end; ++p) {
              std::fill(acc.begin(), acc.end(), C(0));
              const T* g_plane = dy.data<T>() + p * os;
              for (int64_t oi = 0; oi < os; ++oi) {
                const int64_t count = counts[static_cast<size_t>(oi)];
                if (count == 0) continue;
                const C share = C(g_plane[oi]) / C(count);
                for (int64_t ki = 0; ki < ks; ++ki) {
                  const int64_t at = map[static_cast<size_t>(oi * ks + ki)];
                  if (at >= 0) acc[static_cast<size_t>(at)] += share;
                }
              }
              T* out = dx.data<T>() + p * is;
              for (int64_t i = 0; i < is; ++i) out[i] = static_cast<T>(acc[static_cast<size_t>(i)]);
            }
          });
        });
      });
    }};

// ---- ConvGrad ----

struct ConvShape {
  int64_t n = 0, c = 0, m = 0, group = 1;
  PoolGeometry g;
};

// dX and dW by direct loops over (output position, kernel offset) pairs: any float type,
// any number of spatial axes.
template <typename T>
void conv_grad_loop(const ConvShape& s, const T* dy, const T* x, const T* w, T* dx, T* dw) {
  using C = compute_type_t<T>;
  const std::vector<int64_t> map = window_map(s.g);
  const int64_t os = s.g.out_size(), ks = s.g.kernel_size(), is = s.g.in_size();
  const int64_t cg = s.c / s.group, mg = s.m / s.group;
  if (dx) {
    parallel_for(s.n * s.c, 1, [&](int64_t begin, int64_t end) {
      std::vector<C> acc(static_cast<size_t>(is));
      for (int64_t nc = begin; nc < end; ++nc) {
        const int64_t n = nc / s.c, c = nc % s.c, grp = c / cg, ci = c % cg;
        std::fill(acc.begin(), acc.end(), C(0));
        for (int64_t mi = 0; mi < mg; ++mi) {
          const int64_t m = grp * mg + mi;
          const T* g = dy + (n * s.m + m) * os;
          const T* wk = w + (m * cg + ci) * ks;
          for (int64_t oi = 0; oi < os; ++oi) {
            const C gv = C(g[oi]);
            for (int64_t ki = 0; ki < ks; ++ki) {
              const int64_t at = map[static_cast<size_t>(oi * ks + ki)];
              if (at >= 0) acc[static_cast<size_t>(at)] += gv * C(wk[ki]);
            }
          }
        }
        T* out = dx + nc * is;
        for (int64_t i = 0; i < is; ++i) out[i] = static_cast<T>(acc[static_cast<size_t>(i)]);
      }
    });
  }
  if (dw) {
    parallel_for(s.m * cg, 1, [&](int64_t begin, int64_t end) {
      std::vector<C> acc(static_cast<size_t>(ks));
      for (int64_t mc = begin; mc < end; ++mc) {
        const int64_t m = mc / cg, ci = mc % cg, grp = m / mg;
        std::fill(acc.begin(), acc.end(), C(0));
        for (int64_t n = 0; n < s.n; ++n) {
          const T* g = dy + (n * s.m + m) * os;
          const T* xin = x + (n * s.c + grp * cg + ci) * is;
          for (int64_t oi = 0; oi < os; ++oi) {
            const C gv = C(g[oi]);
            for (int64_t ki = 0; ki < ks; ++ki) {
              const int64_t at = map[static_cast<size_t>(oi * ks + ki)];
              if (at >= 0) acc[static_cast<size_t>(ki)] += gv * C(xin[at]);
            }
          }
        }
        T* out = dw + mc * ks;
        for (int64_t k = 0; k < ks; ++k) out[k] = static_cast<T>(acc[static_cast<size_t>(k)]);
      }
    });
  }
}

template <typename T>
void bias_grad(const ConvShape& s, const T* dy, T* db) {
  using C = compute_type_t<T>;
  const int64_t os = s.g.out_size();
  parallel_for(s.m, 1, [&](int64_t begin, int64_t end) {
    for (int64_t m = begin; m < end; ++m) {
      C sum = 0;
      for (int64_t n = 0; n < s.n; ++n) {
        const T* g = dy + (n * s.m + m) * os;
        for (int64_t i = 0; i < os; ++i) sum += C(g[i]);
      }
      db[m] = static_cast<T>(sum);
    }
  });
}

// oneDNN's backward-data and backward-weights primitives for float32, per shape. They
// compute in layouts oneDNN picks (channel-blocked, several times faster than plain NCHW);
// inputs and outputs are reordered from and to the plain layouts.
struct PreparedConvGrad {
  // With their arguments declared; their scratchpads come from the run's scratch memory
  // (the memory plan's arena), not from oneDNN's own allocation, which would keep the
  // largest one (per-thread weight gradient partials: threads x the weights) resident.
  onednn::Primitive data, weights;
  // Plain (user) layouts.
  onednn::memory::desc src, wei, dst, bias;
  // The primitives' layouts.
  onednn::memory::desc data_diff_dst, data_wei, data_diff_src;
  onednn::memory::desc weights_src, weights_diff_dst, weights_diff_wei;
  bool cropped = false;  // src is a view of X without its last, unused rows
  bool ok = false;
};

PreparedConvGrad prepare_conv_grad(const ConvShape& s) {
  using onednn::memory;
  const auto type = memory::data_type::f32;
  memory::dims src_dims = {s.n, s.c}, dst_dims = {s.n, s.m}, wei_dims;
  src_dims.insert(src_dims.end(), s.g.in.begin(), s.g.in.end());
  dst_dims.insert(dst_dims.end(), s.g.out.begin(), s.g.out.end());
  if (s.group > 1)
    wei_dims = {s.group, s.m / s.group, s.c / s.group};
  else
    wei_dims = {s.m, s.c};
  wei_dims.insert(wei_dims.end(), s.g.kernel.begin(), s.g.kernel.end());
  memory::dims strides, dilation, pad_l, pad_r;
  const memory::dims full_src_strides = onednn::plain_strides(src_dims);
  bool cropped = false;
  for (size_t d = 0; d < s.g.in.size(); ++d) {
    strides.push_back(s.g.strides[d]);
    dilation.push_back(s.g.dilations[d] - 1);
    pad_l.push_back(s.g.pad_begin[d]);
    // oneDNN wants the end padding that makes the sizes consistent exactly. When the last
    // windows stop short of the input's end (a strided 1x1 convolution), the input is
    // cropped instead: a view with the full tensor's strides.
    const int64_t extent = (s.g.kernel[d] - 1) * s.g.dilations[d] + 1;
    const int64_t right = (s.g.out[d] - 1) * s.g.strides[d] + extent - s.g.in[d] - s.g.pad_begin[d];
    if (s.g.pad_begin[d] < 0) return {};
    if (right < 0) {
      src_dims[2 + d] += right;
      cropped = true;
    }
    pad_r.push_back(std::max<int64_t>(right, 0));
  }
  PreparedConvGrad p;
  p.cropped = cropped;
  p.src = memory::desc(src_dims, type, full_src_strides);
  p.dst = onednn::plain_desc(dst_dims, type);
  p.wei = onednn::plain_desc(wei_dims, type);
  p.bias = onednn::plain_desc({s.m}, type);
  const memory::desc src_any = onednn::any_desc(src_dims, type);
  const memory::desc dst_any = onednn::any_desc(dst_dims, type);
  const memory::desc wei_any = onednn::any_desc(wei_dims, type);
  try {
    dnnl::convolution_forward::desc fwd(dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct, src_any,
                                        wei_any, p.bias, dst_any, strides, dilation, pad_l, pad_r);
    dnnl::convolution_forward::primitive_desc fwd_pd(fwd, onednn::engine());
    dnnl::convolution_backward_data::desc bd(dnnl::algorithm::convolution_direct, src_any, wei_any, dst_any, strides,
                                             dilation, pad_l, pad_r);
    dnnl::convolution_backward_data::primitive_desc bd_pd(bd, onednn::primitive_attr(), onednn::engine(), fwd_pd);
    dnnl::convolution_backward_weights::desc bw(dnnl::algorithm::convolution_direct, src_any, wei_any, p.bias, dst_any,
                                                strides, dilation, pad_l, pad_r);
    dnnl::convolution_backward_weights::primitive_desc bw_pd(bw, onednn::primitive_attr(), onednn::engine(), fwd_pd);
    p.data_diff_dst = bd_pd.diff_dst_desc();
    p.data_wei = bd_pd.weights_desc();
    p.data_diff_src = bd_pd.diff_src_desc();
    p.weights_src = bw_pd.src_desc();
    p.weights_diff_dst = bw_pd.diff_dst_desc();
    p.weights_diff_wei = bw_pd.diff_weights_desc();
    const int threads = omp_get_max_threads();  // what the primitives were created for
    p.data = onednn::Primitive(dnnl::convolution_backward_data(bd_pd), bd_pd, threads);
    p.data.add_argument(DNNL_ARG_DIFF_DST, p.data_diff_dst);
    p.data.add_argument(DNNL_ARG_WEIGHTS, p.data_wei);
    p.data.add_argument(DNNL_ARG_DIFF_SRC, p.data_diff_src);
    p.weights = onednn::Primitive(dnnl::convolution_backward_weights(bw_pd), bw_pd, threads);
    p.weights.add_argument(DNNL_ARG_SRC, p.weights_src);
    p.weights.add_argument(DNNL_ARG_DIFF_DST, p.weights_diff_dst);
    p.weights.add_argument(DNNL_ARG_DIFF_WEIGHTS, p.weights_diff_wei);
    p.weights.add_argument(DNNL_ARG_DIFF_BIAS, p.bias);
    p.ok = true;
  } catch (const dnnl::error&) {
    return {};
  }
  return p;
}

// `data` (plain layout `plain`) in layout `want`: itself, or a reordered scratch copy.
const void* in_layout(KernelContext& ctx, const onednn::memory::desc& plain, const onednn::memory::desc& want,
                      const void* data, Tensor& scratch) {
  if (plain == want) return data;
  scratch = onednn::scratch_bytes(ctx, want.get_size());
  onednn::reorder(plain, data, want, scratch.raw_data());
  return scratch.raw_data();
}

class ConvGradKernel final : public OpKernel {
 public:
  explicit ConvGradKernel(const KernelInfo& info) {
    pads_ = info.ints_attribute("pads");
    strides_ = info.ints_attribute("strides");
    dilations_ = info.ints_attribute("dilations");
    group_ = info.int_attribute("group", 1);
    if (pads_.size() != 2 * strides_.size() || dilations_.size() != strides_.size()) {
      info.fail("pads, strides and dilations disagree on the number of spatial axes");
    }
  }

  void compute(KernelContext& ctx) override {
    const Tensor& dy = ctx.input(0);
    const Tensor& x = ctx.input(1);
    const Tensor& w = ctx.input(2);
    const size_t spatial = strides_.size();
    if (x.rank() != spatial + 2 || w.rank() != spatial + 2 || dy.rank() != spatial + 2) {
      ctx.fail("X, W and dY must have " + std::to_string(spatial + 2) + " axes");
    }
    ConvShape s;
    s.n = x.dim(0);
    s.c = x.dim(1);
    s.m = w.dim(0);
    s.group = group_;
    if (s.c % group_ != 0 || s.m % group_ != 0 || w.dim(1) * group_ != s.c) ctx.fail("channels do not match group");
    s.g.in.assign(x.shape().begin() + 2, x.shape().end());
    s.g.out.assign(dy.shape().begin() + 2, dy.shape().end());
    s.g.kernel.assign(w.shape().begin() + 2, w.shape().end());
    s.g.strides = strides_;
    s.g.dilations = dilations_;
    s.g.pad_begin.assign(pads_.begin(), pads_.begin() + static_cast<int64_t>(spatial));
    const bool want_dx = ctx.has_output(0), want_dw = ctx.has_output(1), want_db = ctx.has_output(2);
    Tensor* dx = want_dx ? &ctx.allocate_output(0, x.dtype(), x.shape()) : nullptr;
    Tensor* dw = want_dw ? &ctx.allocate_output(1, w.dtype(), w.shape()) : nullptr;
    Tensor* db = want_db ? &ctx.allocate_output(2, dy.dtype(), {s.m}) : nullptr;
    if (dy.dtype() == DType::kFloat32 && run_onednn(ctx, s, dy, x, w, dx, dw, db)) return;
    dispatch<GRAD_FLOAT_TYPES>(dy.dtype(), "ConvGrad", [&]<typename T>() {
      conv_grad_loop<T>(s, dy.data<T>(), x.data<T>(), w.data<T>(), dx ? dx->data<T>() : nullptr,
                        dw ? dw->data<T>() : nullptr);
      if (db) bias_grad<T>(s, dy.data<T>(), db->data<T>());
    });
  }

 private:
  bool run_onednn(KernelContext& ctx, const ConvShape& s, const Tensor& dy, const Tensor& x, const Tensor& w,
                  Tensor* dx, Tensor* dw, Tensor* db) {
    std::vector<int64_t> key;
    onednn::append_key(key, dy);
    onednn::append_key(key, x);
    onednn::append_key(key, w);
    PreparedConvGrad& p = cache_.get(key, [&] { return prepare_conv_grad(s); });
    if (!p.ok) return false;
    // dY in the data pass's layout; the weights pass reuses it when it wants the same one.
    Tensor dy_scratch;
    if (dx) {
      Tensor w_scratch, dx_scratch;
      const void* diff_dst = in_layout(ctx, p.dst, p.data_diff_dst, dy.raw_data(), dy_scratch);
      const void* weights = in_layout(ctx, p.wei, p.data_wei, w.raw_data(), w_scratch);
      const bool direct = p.data_diff_src == p.src;
      if (p.cropped) std::fill_n(dx->data<float>(), dx->numel(), 0.0f);  // the rows no window reads
      if (!direct) dx_scratch = onednn::scratch_bytes(ctx, p.data_diff_src.get_size());
      void* out = direct ? dx->raw_data() : dx_scratch.raw_data();
      p.data.run(ctx, {{DNNL_ARG_DIFF_DST, diff_dst}, {DNNL_ARG_WEIGHTS, weights}, {DNNL_ARG_DIFF_SRC, out}});
      if (!direct) onednn::reorder(p.data_diff_src, out, p.src, dx->raw_data());
    }
    if (dw || db) {
      Tensor dy_weights_scratch, x_scratch, dw_scratch, db_scratch;
      const bool reuse = dx && p.weights_diff_dst == p.data_diff_dst;
      const void* dy_data = reuse && dy_scratch.defined() ? dy_scratch.raw_data() : dy.raw_data();
      const void* diff_dst =
          reuse ? dy_data : in_layout(ctx, p.dst, p.weights_diff_dst, dy.raw_data(), dy_weights_scratch);
      const void* src = in_layout(ctx, p.src, p.weights_src, x.raw_data(), x_scratch);
      const bool direct = dw && p.weights_diff_wei == p.wei;
      if (!direct) dw_scratch = onednn::scratch_bytes(ctx, p.weights_diff_wei.get_size());
      void* dw_out = direct ? dw->raw_data() : dw_scratch.raw_data();
      void* db_out = db ? db->raw_data() : (db_scratch = ctx.allocate_scratch(DType::kFloat32, {s.m})).raw_data();
      p.weights.run(ctx, {{DNNL_ARG_SRC, src},
                          {DNNL_ARG_DIFF_DST, diff_dst},
                          {DNNL_ARG_DIFF_WEIGHTS, dw_out},
                          {DNNL_ARG_DIFF_BIAS, db_out}});
      if (dw && !direct) onednn::reorder(p.weights_diff_wei, dw_out, p.wei, dw->raw_data());
    }
    return true;
  }

  std::vector<int64_t> pads_, strides_, dilations_;
  int64_t group_ = 1;
  onednn::ShapeCache<PreparedConvGrad> cache_;
};

const KernelRegistration kConvGrad{kDomain, "ConvGrad", 1, kLatestOpset,
                                   [](const KernelInfo& info) { return std::make_unique<ConvGradKernel>(info); }};

// ---- normalizations ----

// LayerNormalizationGrad over the trailing axes from `axis`, from the saved mean and
// inverse standard deviation (one per row).
const KernelRegistration kLayerNormalizationGrad{
    kDomain, "LayerNormalizationGrad", 1, kLatestOpset, [](const KernelInfo& info) {
      const int64_t axis_attr = info.int_attribute("axis", -1);
      return make_kernel([axis_attr](KernelContext& ctx) {
        const Tensor& dy = ctx.input(0);
        const Tensor& x = ctx.input(1);
        const Tensor& scale = ctx.input(2);
        const Tensor& mean = ctx.input(3);
        const Tensor& inv = ctx.input(4);
        check_same_shape(ctx, dy, x, "LayerNormalizationGrad");
        int64_t axis = axis_attr < 0 ? axis_attr + static_cast<int64_t>(x.rank()) : axis_attr;
        if (axis < 0 || axis >= static_cast<int64_t>(x.rank())) ctx.fail("axis out of range");
        int64_t rows = 1;
        for (int64_t i = 0; i < axis; ++i) rows *= x.dim(i);
        const int64_t n = rows ? x.numel() / rows : 0;
        if (scale.numel() != n) ctx.fail("Scale must have the normalized shape (" + std::to_string(n) + " elements)");
        if (mean.numel() != rows || inv.numel() != rows) ctx.fail("Mean and InvStdDev must have one value per row");
        Tensor* dx = ctx.has_output(0) ? &ctx.allocate_output(0, x.dtype(), x.shape()) : nullptr;
        Tensor* dscale = ctx.has_output(1) ? &ctx.allocate_output(1, scale.dtype(), scale.shape()) : nullptr;
        Tensor* dbias = ctx.has_output(2) ? &ctx.allocate_output(2, scale.dtype(), scale.shape()) : nullptr;
        dispatch<GRAD_FLOAT_TYPES>(x.dtype(), "LayerNormalizationGrad", [&]<typename T>() {
          using C = compute_type_t<T>;
          const T* g = dy.data<T>();
          const T* xv = x.data<T>();
          const T* sc = scale.data<T>();
          const int threads = std::max(1, omp_get_max_threads());
          std::vector<C> partial(static_cast<size_t>(threads) * 2 * static_cast<size_t>(n), C(0));
          const int64_t chunks = std::min<int64_t>(threads, std::max<int64_t>(1, rows));
          parallel_for(chunks, 1, [&](int64_t cb, int64_t ce) {
            for (int64_t chunk = cb; chunk < ce; ++chunk) {
              C* ds = partial.data() + chunk * 2 * n;
              C* dbs = ds + n;
              for (int64_t r = rows * chunk / chunks; r < rows * (chunk + 1) / chunks; ++r) {
                const C mu = read_as<C>(mean, r), iv = read_as<C>(inv, r);
                const T* gr = g + r * n;
                const T* xr = xv + r * n;
                C a = 0, b = 0;
                for (int64_t j = 0; j < n; ++j) {
                  const C xhat = (C(xr[j]) - mu) * iv;
                  const C dxhat = C(gr[j]) * C(sc[j]);
                  a += dxhat;
                  b += dxhat * xhat;
                  ds[j] += C(gr[j]) * xhat;
                  dbs[j] += C(gr[j]);
                }
                if (!dx) continue;
                T* out = dx->data<T>() + r * n;
                const C inv_n = C(1) / C(n);
                for (int64_t j = 0; j < n; ++j) {
                  const C xhat = (C(xr[j]) - mu) * iv;
                  const C dxhat = C(gr[j]) * C(sc[j]);
                  out[j] = static_cast<T>(iv * (dxhat - (a + xhat * b) * inv_n));
                }
              }
            }
          });
          for (int64_t j = 0; j < n; ++j) {
            C s = 0, bsum = 0;
            for (int64_t t = 0; t < chunks; ++t) {
              s += partial[static_cast<size_t>(t * 2 * n + j)];
              bsum += partial[static_cast<size_t>(t * 2 * n + n + j)];
            }
            if (dscale) dscale->data<T>()[j] = static_cast<T>(s);
            if (dbias) dbias->data<T>()[j] = static_cast<T>(bsum);
          }
        });
      });
    }};

// RMSNormalizationGrad over the trailing axes from `axis`, the statistics recomputed
// per row: dX = r (dn - x r^2 mean(dn x)) with dn = dY scale, and dScaleFull = dY x r,
// X's shape (the rule sums it down to scale's). scale broadcasts to X unidirectionally.
const KernelRegistration kRMSNormalizationGrad{
    kDomain, "RMSNormalizationGrad", 1, kLatestOpset, [](const KernelInfo& info) {
      const int64_t axis_attr = info.int_attribute("axis", -1);
      const float epsilon = info.float_attribute("epsilon", 1e-5f);
      return make_kernel([axis_attr, epsilon](KernelContext& ctx) {
        const Tensor& dy = ctx.input(0);
        const Tensor& x = ctx.input(1);
        const Tensor& scale = ctx.input(2);
        check_same_shape(ctx, dy, x, "RMSNormalizationGrad");
        if (scale.dtype() != x.dtype()) ctx.fail("scale must have X's element type");
        const int64_t rank = static_cast<int64_t>(x.rank());
        const int64_t axis = axis_attr < 0 ? axis_attr + rank : axis_attr;
        if (axis < 0 || axis >= rank) ctx.fail("axis out of range");
        const int64_t rows = shape_size(std::span(x.shape()).first(static_cast<size_t>(axis)));
        const int64_t n = rows ? x.numel() / rows : 0;
        // scale's element offset for each element of X (0 strides where it broadcasts).
        const Shape broadcast = broadcast_shapes(scale.shape(), x.shape());
        if (broadcast != x.shape()) ctx.fail("scale " + shape_string(scale.shape()) + " does not broadcast to X");
        const std::vector<int64_t> strides = broadcast_strides(scale.shape(), x.shape());
        const bool per_row = scale.numel() == n && std::all_of(strides.begin(), strides.begin() + axis,
                                                               [](int64_t stride) { return stride == 0; });
        Tensor* dx = ctx.has_output(0) ? &ctx.allocate_output(0, x.dtype(), x.shape()) : nullptr;
        Tensor* ds = ctx.has_output(1) ? &ctx.allocate_output(1, x.dtype(), x.shape()) : nullptr;
        if (x.numel() == 0) return;
        dispatch<GRAD_FLOAT_TYPES>(x.dtype(), "RMSNormalizationGrad", [&]<typename T>() {
          using C = compute_type_t<T>;
          const T* g = dy.data<T>();
          const T* xv = x.data<T>();
          const T* sc = scale.data<T>();
          parallel_for(rows, std::max<int64_t>(1, 8192 / std::max<int64_t>(n, 1)), [&](int64_t begin, int64_t end) {
            std::vector<C> dn(static_cast<size_t>(n));
            for (int64_t r = begin; r < end; ++r) {
              const T* gr = g + r * n;
              const T* xr = xv + r * n;
              C squares = 0, dn_x = 0;
              for (int64_t j = 0; j < n; ++j) {
                int64_t offset = j;  // scale over the normalized shape, the common case
                if (!per_row) {
                  int64_t rest = r * n + j;
                  offset = 0;
                  for (size_t a = x.rank(); a-- > 0;) {
                    offset += rest % x.shape()[a] * strides[a];
                    rest /= x.shape()[a];
                  }
                }
                const C xj = C(xr[j]);
                dn[static_cast<size_t>(j)] = C(gr[j]) * C(sc[offset]);
                squares += xj * xj;
                dn_x += dn[static_cast<size_t>(j)] * xj;
              }
              const C inv = C(1) / std::sqrt(squares / C(n) + C(epsilon));
              const C correction = inv * inv * dn_x / C(n);
              for (int64_t j = 0; j < n; ++j) {
                const C xj = C(xr[j]);
                if (dx) dx->data<T>()[r * n + j] = static_cast<T>(inv * (dn[static_cast<size_t>(j)] - xj * correction));
                if (ds) ds->data<T>()[r * n + j] = static_cast<T>(C(gr[j]) * xj * inv);
              }
            }
          });
        });
      });
    }};

// BatchNormalizationGrad in training mode: statistics over (N, spatial) per channel.
const KernelRegistration kBatchNormalizationGrad{
    kDomain, "BatchNormalizationGrad", 1, kLatestOpset, [](const KernelInfo& info) {
      const double epsilon = info.float_attribute("epsilon", 1e-5f);
      return make_kernel([epsilon](KernelContext& ctx) {
        const Tensor& dy = ctx.input(0);
        const Tensor& x = ctx.input(1);
        const Tensor& scale = ctx.input(2);
        check_same_shape(ctx, dy, x, "BatchNormalizationGrad");
        if (x.rank() < 2) ctx.fail("X needs at least 2 axes");
        const int64_t n = x.dim(0), c = x.dim(1);
        const int64_t s = c && n ? x.numel() / (n * c) : 0;
        if (scale.numel() != c) ctx.fail("scale must have one value per channel");
        Tensor* dx = ctx.has_output(0) ? &ctx.allocate_output(0, x.dtype(), x.shape()) : nullptr;
        Tensor* dscale = ctx.has_output(1) ? &ctx.allocate_output(1, scale.dtype(), {c}) : nullptr;
        Tensor* dbias = ctx.has_output(2) ? &ctx.allocate_output(2, scale.dtype(), {c}) : nullptr;
        dispatch<GRAD_FLOAT_TYPES>(x.dtype(), "BatchNormalizationGrad", [&]<typename T>() {
          using C = compute_type_t<T>;
          using A = double;  // statistics accumulate in double
          const T* g = dy.data<T>();
          const T* xv = x.data<T>();
          const T* sc = scale.data<T>();
          const A count = static_cast<A>(n * s);
          parallel_for(c, 1, [&](int64_t begin, int64_t end) {
            for (int64_t ch = begin; ch < end; ++ch) {
              A sum = 0;
              for (int64_t b = 0; b < n; ++b) {
                const T* xr = xv + (b * c + ch) * s;
                for (int64_t i = 0; i < s; ++i) sum += A(C(xr[i]));
              }
              const A mean = sum / count;
              A var = 0;
              for (int64_t b = 0; b < n; ++b) {
                const T* xr = xv + (b * c + ch) * s;
                for (int64_t i = 0; i < s; ++i) {
                  const A d = A(C(xr[i])) - mean;
                  var += d * d;
                }
              }
              const A inv = 1.0 / std::sqrt(var / count + epsilon);
              A sum_dy = 0, sum_dy_xhat = 0;
              for (int64_t b = 0; b < n; ++b) {
                const T* xr = xv + (b * c + ch) * s;
                const T* gr = g + (b * c + ch) * s;
                for (int64_t i = 0; i < s; ++i) {
                  sum_dy += A(C(gr[i]));
                  sum_dy_xhat += A(C(gr[i])) * (A(C(xr[i])) - mean) * inv;
                }
              }
              if (dscale) dscale->data<T>()[ch] = static_cast<T>(static_cast<C>(sum_dy_xhat));
              if (dbias) dbias->data<T>()[ch] = static_cast<T>(static_cast<C>(sum_dy));
              if (!dx) continue;
              const A factor = A(C(sc[ch])) * inv;
              for (int64_t b = 0; b < n; ++b) {
                const T* xr = xv + (b * c + ch) * s;
                const T* gr = g + (b * c + ch) * s;
                T* out = dx->data<T>() + (b * c + ch) * s;
                for (int64_t i = 0; i < s; ++i) {
                  const A xhat = (A(C(xr[i])) - mean) * inv;
                  out[i] =
                      static_cast<T>(static_cast<C>(factor * (A(C(gr[i])) - (sum_dy + xhat * sum_dy_xhat) / count)));
                }
              }
            }
          });
        });
      });
    }};

// ---- SoftmaxCrossEntropyLossGrad: (softmax - onehot(label)) * g, classes on axis 1 ----
// g is dY (per label, or one value for all) divided by the number of labels when `mean`.

template <typename T, typename L>
void softmax_cross_entropy_grad(const Tensor& dy, const Tensor& log_prob, const Tensor& label, bool mean, Tensor& out) {
  using C = compute_type_t<T>;
  const int64_t n = log_prob.dim(0), classes = log_prob.dim(1);
  const int64_t inner = n && classes ? log_prob.numel() / (n * classes) : 0;
  const T* lp = log_prob.data<T>();
  const T* g = dy.data<T>();
  const L* labels = label.data<L>();
  const bool per_label = dy.numel() != 1;
  const C scale = mean && label.numel() > 0 ? C(1) / static_cast<C>(label.numel()) : C(1);
  T* o = out.data<T>();
  parallel_for(n, std::max<int64_t>(1, 8192 / std::max<int64_t>(classes * inner, 1)), [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; ++b) {
      for (int64_t i = 0; i < inner; ++i) {
        const int64_t at = b * inner + i;
        int64_t target = static_cast<int64_t>(labels[at]);
        if (target < 0) target += classes;  // OneHot counts negative labels from the end
        const C weight = C(g[per_label ? at : 0]) * scale;
        const T* row = lp + b * classes * inner + i;
        T* row_out = o + b * classes * inner + i;
        for (int64_t k = 0; k < classes; ++k) {
          const C p = vector_math::exp(C(row[k * inner]));
          row_out[k * inner] = static_cast<T>((k == target ? p - C(1) : p) * weight);
        }
      }
    }
  });
}

const KernelRegistration kSoftmaxCrossEntropyLossGrad{
    kDomain, "SoftmaxCrossEntropyLossGrad", 1, kLatestOpset, [](const KernelInfo& info) {
      const bool mean = info.int_attribute("mean", 0) != 0;
      return make_kernel([mean](KernelContext& ctx) {
        const Tensor& dy = ctx.input(0);
        const Tensor& log_prob = ctx.input(1);
        const Tensor& label = ctx.input(2);
        if (log_prob.rank() < 2) ctx.fail("log_prob needs a class axis");
        const int64_t n = log_prob.dim(0), classes = log_prob.dim(1);
        const int64_t labels = n && classes ? log_prob.numel() / classes : 0;
        if (label.numel() != labels) ctx.fail("label must have the shape of log_prob without its class axis");
        if (dy.numel() != 1 && dy.shape() != label.shape()) {
          ctx.fail("dY is " + shape_string(dy.shape()) + ", expected the labels' shape " + shape_string(label.shape()) +
                   " or one value");
        }
        if (dy.dtype() != log_prob.dtype()) ctx.fail("dY and log_prob have different element types");
        Tensor& out = ctx.allocate_output(0, log_prob.dtype(), log_prob.shape());
        dispatch<GRAD_FLOAT_TYPES>(log_prob.dtype(), "SoftmaxCrossEntropyLossGrad", [&]<typename T>() {
          dispatch<int32_t, int64_t>(label.dtype(), "SoftmaxCrossEntropyLossGrad labels", [&]<typename L>() {
            softmax_cross_entropy_grad<T, L>(dy, log_prob, label, mean, out);
          });
        });
      });
    }};

// ---- com.microsoft: the gradient ops of onnxruntime-training's artifacts ----
// Where ORT's op computes what an org.onnxtrain op above computes, the same kernel runs it
// (ReluGrad reads X where ours reads Y: X > 0 exactly where Relu's Y > 0).

constexpr const char* kMicrosoftDomain = "com.microsoft";

// The factory of org.onnxtrain::`op_type`, registered above in this file (static
// initialization runs in order within one file).
KernelFactory same_kernel_as(const char* op_type) {
  const KernelDef* def = KernelRegistry::global().find(kDomain, op_type, 1);
  if (def == nullptr) throw Error(std::string("no org.onnxtrain kernel '") + op_type + "' to share");
  return def->create;
}

const KernelRegistration kMicrosoftGeluGrad{kMicrosoftDomain, "GeluGrad", 1, kLatestOpset, same_kernel_as("GeluGrad")};
const KernelRegistration kMicrosoftFastGeluGrad{kMicrosoftDomain, "FastGeluGrad", 1, kLatestOpset,
                                                same_kernel_as("GeluTanhGrad")};
// Opset-13 softmax: one axis, as org.onnxtrain's.
const KernelRegistration kMicrosoftSoftmaxGrad13{kMicrosoftDomain, "SoftmaxGrad_13", 1, kLatestOpset,
                                                 same_kernel_as("SoftmaxGrad")};
const KernelRegistration kMicrosoftLogSoftmaxGrad13{kMicrosoftDomain, "LogSoftmaxGrad_13", 1, kLatestOpset,
                                                    same_kernel_as("LogSoftmaxGrad")};
// (dY, X, scale, mean, inv_std_dev) => (dX, dScale, dB), the same inputs and outputs.
const KernelRegistration kMicrosoftLayerNormalizationGrad{kMicrosoftDomain, "LayerNormalizationGrad", 1, kLatestOpset,
                                                          same_kernel_as("LayerNormalizationGrad")};
// (dY, X, W) => (dX, dW, dB) with Conv's attributes.
const KernelRegistration kMicrosoftConvGrad{kMicrosoftDomain, "ConvGrad", 1, kLatestOpset, same_kernel_as("ConvGrad")};
// ORT's (dY, X, scale, saved_mean, saved_inv_std): the saved batch statistics are what
// org.onnxtrain's kernel recomputes from X, so it reads the first three inputs only.
const KernelRegistration kMicrosoftBatchNormalizationGrad{kMicrosoftDomain, "BatchNormalizationGrad", 1, kLatestOpset,
                                                          same_kernel_as("BatchNormalizationGrad")};

const KernelRegistration kMicrosoftReluGrad{
    kMicrosoftDomain, "ReluGrad", 1, kLatestOpset,
    elementwise_grad("ReluGrad", [](auto dy, auto x) { return x > decltype(x)(0) ? dy : decltype(x)(0); })};

const KernelRegistration kMicrosoftSigmoidGrad{
    kMicrosoftDomain, "SigmoidGrad", 1, kLatestOpset,
    elementwise_grad("SigmoidGrad", [](auto dy, auto y) { return dy * (y * (decltype(y)(1) - y)); })};

const KernelRegistration kMicrosoftTanhGrad{
    kMicrosoftDomain, "TanhGrad", 1, kLatestOpset,
    elementwise_grad("TanhGrad", [](auto dy, auto y) { return dy * (decltype(y)(1) - y * y); })};

// dY * GeluGrad(X + B), B broadcast along the last axis (ORT fuses the bias of a Gemm/MatMul).
const KernelRegistration kMicrosoftBiasGeluGradDx{
    kMicrosoftDomain, "BiasGeluGrad_dX", 1, kLatestOpset, [](const KernelInfo&) {
      return make_kernel([](KernelContext& ctx) {
        const Tensor& dy = ctx.input(0);
        const Tensor& x = ctx.input(1);
        const Tensor& b = ctx.input(2);
        check_same_shape(ctx, dy, x, "BiasGeluGrad_dX");
        if (x.rank() == 0 || b.rank() != 1 || b.dim(0) != x.dim(x.rank() - 1) || b.dtype() != x.dtype()) {
          ctx.fail("B must be a vector of X's last dimension and element type");
        }
        Tensor& dx = ctx.allocate_output(0, x.dtype(), x.shape());
        dispatch<float, double>(x.dtype(), "BiasGeluGrad_dX", [&]<typename T>() {
          const T* g = dy.data<T>();
          const T* xv = x.data<T>();
          const T* bv = b.data<T>();
          T* out = dx.data<T>();
          const int64_t n = b.numel();
          for (int64_t i = 0; i < x.numel(); ++i) {
            const T v = xv[i] + bv[i % n];
            const T cdf = T(0.5) * vector_math::erfc(v * T(-0.70710678118654752));
            const T density = vector_math::exp(T(-0.5) * v * v) * T(0.39894228040143268);
            out[i] = g[i] * (cdf + v * density);
          }
        });
      });
    }};

// ZeroGradient (gradient, reset_signal) => zeros like the gradient.
const KernelRegistration kMicrosoftZeroGradient{kMicrosoftDomain, "ZeroGradient", 1, kLatestOpset,
                                                [](const KernelInfo&) {
                                                  return make_kernel([](KernelContext& ctx) {
                                                    const Tensor& g = ctx.input(0);
                                                    Tensor& out = ctx.allocate_output(0, g.dtype(), g.shape());
                                                    std::memset(out.raw_data(), 0, out.nbytes());
                                                  });
                                                }};

// DropoutGrad (dY, mask, ratio = 0.5, training_mode): dY * mask / (1 - ratio). As ORT's
// kernel, whatever training_mode says (the recorded ORT run shows it: a mask from an eval
// forward pass is all true, and ORT scales anyway).
const KernelRegistration kMicrosoftDropoutGrad{
    kMicrosoftDomain, "DropoutGrad", 1, kLatestOpset, [](const KernelInfo&) {
      return make_kernel([](KernelContext& ctx) {
        const Tensor& dy = ctx.input(0);
        const Tensor& mask = ctx.input(1);
        if (mask.dtype() != DType::kBool || mask.shape() != dy.shape()) {
          ctx.fail("mask must be bool and of dY's shape " + shape_string(dy.shape()));
        }
        const double ratio = ctx.has_input(2) ? ctx.input(2).item_as_double() : 0.5;
        if (!(ratio >= 0 && ratio < 1)) ctx.fail("ratio must be in [0, 1), got " + std::to_string(ratio));
        Tensor& dx = ctx.allocate_output(0, dy.dtype(), dy.shape());
        dispatch<float, double>(dy.dtype(), "DropoutGrad", [&]<typename T>() {
          const T* g = dy.data<T>();
          const bool* m = mask.data<bool>();
          T* out = dx.data<T>();
          const T scale = static_cast<T>(1.0 / (1.0 - ratio));
          for (int64_t i = 0; i < dy.numel(); ++i) out[i] = m[i] ? g[i] * scale : T(0);
        });
      });
    }};

}  // namespace
}  // namespace onnxtrain
