// Pooling: MaxPool (with its optional Indices output), AveragePool, LpPool over 1 to 3
// spatial axes, and the global pools (GlobalAveragePool, GlobalMaxPool, GlobalLpPool).
//
// float32 and bfloat16 MaxPool/AveragePool run on oneDNN's pooling primitive where its
// semantics are ONNX's. A window loop serves the rest: other element types, the Indices
// output (oneDNN's workspace is not ONNX's flat indices), LpPool, and average pooling
// that counts pads in ceil mode (oneDNN would count the ceil overhang as padding too).
// The global pools are plain per-channel reductions.
#include "ops/cpu/pool.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <span>
#include <type_traits>
#include <vector>

#include "core/dispatch.h"
#include "ops/cpu/multiversion.h"
#include "ops/cpu/onednn.h"
#include "ops/cpu/vector_math.h"
#include "ops/cpu/window.h"
#include "ops/kernel_registry.h"

namespace onnxtrain {
namespace {

// Whether v takes the place of the running maximum: larger, or the window's first NaN (a NaN
// propagates through MaxPool as in onnxruntime, torch and onnx.reference; once the maximum is
// NaN nothing replaces it).
template <typename C>
bool takes_max(C v, C best) {
  return v > best || (v != v && best == best);
}

// The maximum of `best` and `v` by takes_max.
template <typename C>
C nan_max(C best, C v) {
  return takes_max(v, best) ? v : best;
}

// The running maximum of vectors of channels (GCC vector types), NaN-propagating lane by
// lane: the largest value by one comparison, the last NaN by another, and a NaN wins at the
// end. One select on two ORed lane masks would be simpler, but GCC 12 compiles that into
// per-lane branches inside target_clones bodies (ResNet-18's fused Conv + MaxPool ran 3x
// slower in its pooling); two single-mask selects stay two compares and two blends.
template <typename V>
struct LaneMax {
  V best, nan;

  // Starts at -infinity; pixels are read from memory and results stored to it (no vector
  // argument or return value: their ABI differs between the clones).
  LaneMax() : best(V{} - std::numeric_limits<float>::infinity()), nan(best) {}
  void add(const float* pixel) {
    V v;
    std::memcpy(&v, pixel, sizeof v);
    best = best >= v ? best : v;
    nan = v != v ? v : nan;
  }
  void store(float* out) const {
    const V result = nan != nan ? nan : best;
    std::memcpy(out, &result, sizeof result);
  }
};

using onednn::memory;

enum class PoolKind { kMax, kAverage, kLp };
using window::AutoPad;
using window::per_axis;

struct PoolAttributes {
  PoolKind kind;
  AutoPad auto_pad;
  bool ceil_mode, count_include_pad, column_major_indices;
  double p = 2.0;
  std::vector<int64_t> kernel_shape, strides, pads, dilations;

  PoolAttributes(const KernelInfo& info, PoolKind k) : kind(k) {
    auto_pad = window::parse_auto_pad(info);
    ceil_mode = info.bool_attribute("ceil_mode", false);
    count_include_pad = info.bool_attribute("count_include_pad", false);
    const int64_t storage_order = info.int_attribute("storage_order", 0);
    if (storage_order != 0 && storage_order != 1) {
      info.fail("storage_order is " + std::to_string(storage_order) + ", expected 0 (row major) or 1 (column major)");
    }
    column_major_indices = storage_order == 1;
    if (kind == PoolKind::kLp) {  // LpPool-1 has a float p, later versions an int
      p = info.opset() < 2 ? info.float_attribute("p", 2.0f) : static_cast<double>(info.int_attribute("p", 2));
      if (p <= 0) info.fail("p is " + std::to_string(p) + ", expected a positive norm order");
    }
    kernel_shape = info.ints_attribute("kernel_shape");
    strides = info.ints_attribute("strides", std::vector<int64_t>{});
    pads = info.ints_attribute("pads", std::vector<int64_t>{});
    dilations = info.ints_attribute("dilations", std::vector<int64_t>{});
    for (int64_t v : kernel_shape)
      if (v < 1) info.fail("kernel_shape " + shape_string(kernel_shape) + " must be positive");
    window::check_steps_and_pads(info, strides, dilations, pads);
  }
};

// One call's geometry, its window padded to three spatial axes.
struct PoolGeometry : window::Window3 {
  int64_t n = 0, c = 0;
  size_t axes = 0;
  Shape out_shape;

  size_t axis(size_t i) const { return 3 - axes + i; }  // spatial axis i in the padded arrays
};

PoolGeometry pool_geometry(KernelContext& ctx, const PoolAttributes& a, const Tensor& x) {
  if (x.rank() < 3)
    ctx.fail("X must be [N, C, spatial...] with 1 or more spatial axes, got " + shape_string(x.shape()));
  PoolGeometry g;
  g.axes = x.rank() - 2;
  if (g.axes > 3) {
    ctx.fail("X " + shape_string(x.shape()) + " has " + std::to_string(g.axes) +
             " spatial axes; onnxtrain pools over 1 to 3");
  }
  if (a.kernel_shape.size() != g.axes) {
    ctx.fail("kernel_shape " + shape_string(a.kernel_shape) + " has " + std::to_string(a.kernel_shape.size()) +
             " values but X " + shape_string(x.shape()) + " has " + std::to_string(g.axes) + " spatial axes");
  }
  const auto strides = per_axis(ctx, a.strides, g.axes, 1, "strides");
  const auto dilations = per_axis(ctx, a.dilations, g.axes, 1, "dilations");
  if (!a.pads.empty() && a.pads.size() != 2 * g.axes) {
    ctx.fail("pads " + shape_string(a.pads) + " has " + std::to_string(a.pads.size()) + " values, expected " +
             std::to_string(2 * g.axes) + " (begin and end per spatial axis)");
  }
  g.n = x.dim(0);
  g.c = x.dim(1);
  g.out_shape = {g.n, g.c};
  for (size_t i = 0; i < g.axes; ++i) {
    const size_t j = g.axis(i);
    g.in[j] = x.dim(static_cast<int64_t>(i) + 2);
    g.kernel[j] = a.kernel_shape[i];
    g.stride[j] = strides[i];
    g.dilation[j] = dilations[i];
    const int64_t extent = (g.kernel[j] - 1) * g.dilation[j] + 1, s = g.stride[j];
    switch (a.auto_pad) {
      case AutoPad::kSameUpper:
      case AutoPad::kSameLower: {
        g.out[j] = (g.in[j] + s - 1) / s;
        const int64_t total = std::max<int64_t>(0, (g.out[j] - 1) * s + extent - g.in[j]);
        g.pad_begin[j] = a.auto_pad == AutoPad::kSameUpper ? total / 2 : total - total / 2;
        g.pad_end[j] = total - g.pad_begin[j];
        break;
      }
      case AutoPad::kValid:
      case AutoPad::kNotSet: {
        if (a.auto_pad == AutoPad::kNotSet && !a.pads.empty()) {
          g.pad_begin[j] = a.pads[i];
          g.pad_end[j] = a.pads[g.axes + i];
        }
        const int64_t span = g.in[j] + g.pad_begin[j] + g.pad_end[j] - extent;
        if (span < 0) {
          ctx.fail("the pooling window (extent " + std::to_string(extent) + ") is larger than the padded input (" +
                   std::to_string(g.in[j] + g.pad_begin[j] + g.pad_end[j]) + ") on spatial axis " + std::to_string(i) +
                   " of X " + shape_string(x.shape()));
        }
        g.out[j] = (a.ceil_mode ? (span + s - 1) / s : span / s) + 1;
        // In ceil mode the last window must start inside the input or its begin pad.
        if (a.ceil_mode && (g.out[j] - 1) * s >= g.in[j] + g.pad_begin[j]) --g.out[j];
        break;
      }
    }
    g.out_shape.push_back(g.out[j]);
  }
  return g;
}

// ---- the window loop ----

// The kernel taps [lo, hi) along one axis whose positions start + k * dilation lie in [0, limit).
inline std::pair<int64_t, int64_t> taps(int64_t start, int64_t kernel, int64_t dilation, int64_t limit) {
  const int64_t lo = start >= 0 ? 0 : (-start + dilation - 1) / dilation;
  const int64_t hi = start >= limit ? 0 : std::min(kernel, (limit - 1 - start) / dilation + 1);
  return {lo, std::max(lo, hi)};
}

// Pools every output of every (n, c) plane; planes run in parallel. `indices`, when given,
// receives MaxPool's flat index of each maximum.
template <typename T>
void pool_loop(const PoolAttributes& a, const PoolGeometry& g, const T* x, T* y, int64_t* indices) {
  using C = compute_type_t<T>;
  using Acc = std::conditional_t<std::is_floating_point_v<C>, C, double>;
  const int64_t is = g.in_size(), os = g.out_size();
  parallel_for(g.n * g.c, 1, [&](int64_t begin, int64_t end) {
    for (int64_t plane = begin; plane < end; ++plane) {
      const T* xp = x + plane * is;
      T* yp = y + plane * os;
      int64_t* ip = indices ? indices + plane * os : nullptr;
      for (int64_t od = 0; od < g.out[0]; ++od)
        for (int64_t oh = 0; oh < g.out[1]; ++oh)
          for (int64_t ow = 0; ow < g.out[2]; ++ow) {
            const int64_t sd = od * g.stride[0] - g.pad_begin[0], sh = oh * g.stride[1] - g.pad_begin[1],
                          sw = ow * g.stride[2] - g.pad_begin[2];
            auto [d0, d1] = taps(sd, g.kernel[0], g.dilation[0], g.in[0]);
            auto [h0, h1] = taps(sh, g.kernel[1], g.dilation[1], g.in[1]);
            auto [w0, w1] = taps(sw, g.kernel[2], g.dilation[2], g.in[2]);
            const int64_t o = (od * g.out[1] + oh) * g.out[2] + ow;
            if (a.kind == PoolKind::kMax) {
              C best = std::numeric_limits<C>::lowest();
              int64_t best_at = -1;
              for (int64_t kd = d0; kd < d1; ++kd)
                for (int64_t kh = h0; kh < h1; ++kh)
                  for (int64_t kw = w0; kw < w1; ++kw) {
                    const int64_t at = ((sd + kd * g.dilation[0]) * g.in[1] + sh + kh * g.dilation[1]) * g.in[2] + sw +
                                       kw * g.dilation[2];
                    const C v = static_cast<C>(xp[at]);
                    if (best_at < 0 || takes_max(v, best)) {
                      best = v;
                      best_at = at;
                    }
                  }
              yp[o] = static_cast<T>(best);
              if (ip) {
                // ONNX's index runs over the whole tensor, row or column major in the spatial axes.
                int64_t flat = best_at < 0 ? 0 : best_at;
                if (a.column_major_indices && best_at >= 0) {
                  const int64_t w = best_at % g.in[2], h = best_at / g.in[2] % g.in[1],
                                d = best_at / (g.in[2] * g.in[1]);
                  flat = (w * g.in[1] + h) * g.in[0] + d;
                }
                ip[o] = plane * is + flat;
              }
              continue;
            }
            Acc sum = 0;
            for (int64_t kd = d0; kd < d1; ++kd)
              for (int64_t kh = h0; kh < h1; ++kh)
                for (int64_t kw = w0; kw < w1; ++kw) {
                  const Acc v = static_cast<Acc>(
                      static_cast<C>(xp[((sd + kd * g.dilation[0]) * g.in[1] + sh + kh * g.dilation[1]) * g.in[2] + sw +
                                        kw * g.dilation[2]]));
                  sum += a.kind == PoolKind::kLp ? static_cast<Acc>(std::pow(std::abs(v), a.p)) : v;
                }
            if (a.kind == PoolKind::kLp) {
              yp[o] = static_cast<T>(static_cast<C>(std::pow(sum, 1.0 / a.p)));
              continue;
            }
            int64_t count = (d1 - d0) * (h1 - h0) * (w1 - w0);
            if (a.count_include_pad) {  // taps inside the input and its explicit pads
              auto [pd0, pd1] =
                  taps(sd + g.pad_begin[0], g.kernel[0], g.dilation[0], g.in[0] + g.pad_begin[0] + g.pad_end[0]);
              auto [ph0, ph1] =
                  taps(sh + g.pad_begin[1], g.kernel[1], g.dilation[1], g.in[1] + g.pad_begin[1] + g.pad_end[1]);
              auto [pw0, pw1] =
                  taps(sw + g.pad_begin[2], g.kernel[2], g.dilation[2], g.in[2] + g.pad_begin[2] + g.pad_end[2]);
              count = (pd1 - pd0) * (ph1 - ph0) * (pw1 - pw0);
            }
            yp[o] = static_cast<T>(static_cast<C>(count > 0 ? sum / static_cast<Acc>(count) : Acc(0)));
          }
    }
  });
}

// MaxPool whose every window lies inside the input (no padding, no dilation, no partial
// ceil-mode window) over at most two spatial axes: the common CNN case, and the one training
// runs with Indices. Same results as pool_loop (the first maximum wins), without its
// per-tap bounds arithmetic.
bool plain_max_pool(const PoolAttributes& a, const PoolGeometry& g) {
  if (a.kind != PoolKind::kMax || a.column_major_indices || g.in[0] != 1 || g.kernel[0] != 1) return false;
  for (size_t j = 1; j < 3; ++j) {
    if (g.pad_begin[j] != 0 || g.dilation[j] != 1 || (g.out[j] - 1) * g.stride[j] + g.kernel[j] > g.in[j]) return false;
  }
  return true;
}

// Whether a plane holds a NaN (an integer one never does).
template <typename T>
bool holds_nan(const T* x, int64_t n) {
  if constexpr (std::is_integral_v<T>) {
    return false;
  } else {
    int nan = 0;  // an int, not a bool: GCC vectorizes the int reduction only
    for (int64_t i = 0; i < n; ++i) nan |= x[i] != x[i];
    return nan != 0;
  }
}

// One plane. Only a plane that holds a NaN pays for takes_max's NaN test: `v > best` alone
// compiles to a branch-free maximum, the NaN test to branches that cost the small CNN's
// training step 1.3x at 2 threads.
template <bool kNan, typename T>
void plain_max_plane(const PoolGeometry& g, const T* xp, T* yp, int64_t* ip, int64_t plane_offset) {
  const int64_t width = g.in[2];
  const int64_t kh = g.kernel[1], kw = g.kernel[2], sh = g.stride[1], sw = g.stride[2];
  for (int64_t oh = 0; oh < g.out[1]; ++oh) {
    for (int64_t ow = 0; ow < g.out[2]; ++ow) {
      const int64_t origin = oh * sh * width + ow * sw;
      int64_t best_at = origin;
      T best = xp[origin];
      for (int64_t i = 0; i < kh; ++i) {
        const int64_t row = origin + i * width;
        for (int64_t k = 0; k < kw; ++k) {
          if (kNan ? takes_max(xp[row + k], best) : xp[row + k] > best) {
            best = xp[row + k];
            best_at = row + k;
          }
        }
      }
      yp[oh * g.out[2] + ow] = best;
      if (ip) ip[oh * g.out[2] + ow] = plane_offset + best_at;
    }
  }
}

template <typename T>
void plain_max_pool_loop(const PoolGeometry& g, const T* x, T* y, int64_t* indices) {
  const int64_t is = g.in_size(), os = g.out_size();
  parallel_for(g.n * g.c, 1, [&](int64_t begin, int64_t end) {
    for (int64_t plane = begin; plane < end; ++plane) {
      const T* xp = x + plane * is;
      int64_t* ip = indices ? indices + plane * os : nullptr;
      if (holds_nan(xp, is)) {
        plain_max_plane<true>(g, xp, y + plane * os, ip, plane * is);
      } else {
        plain_max_plane<false>(g, xp, y + plane * os, ip, plane * is);
      }
    }
  });
}

// MaxPool 2 x 2 with stride 2 and no Indices, every window inside the input: the most
// common pool of CNNs. oneDNN's kernel for plain NCHW takes 3.3 us for 8 x 32 x 32 floats
// (the small CNN's first pool at batch 1); the maximum of each row pair, then of each
// column pair, vectorizes and takes about a third of that.
bool is_max_pool_2x2(const PoolAttributes& a, const PoolGeometry& g, bool want_indices) {
  return plain_max_pool(a, g) && !want_indices && g.kernel[1] == 2 && g.kernel[2] == 2 && g.stride[1] == 2 &&
         g.stride[2] == 2;
}

// ---- oneDNN ----

// oneDNN derives the output size from the pads, floor((in + pads - extent) / stride) + 1:
// a ceil-mode overhang becomes end padding.
int64_t onednn_pad_end(const PoolGeometry& g, size_t j) {
  const int64_t needed =
      (g.out[j] - 1) * g.stride[j] + (g.kernel[j] - 1) * g.dilation[j] + 1 - g.in[j] - g.pad_begin[j];
  return std::max(g.pad_end[j], needed);
}

// True when oneDNN's output size formula gives ONNX's size on every axis.
bool onednn_sizes_match(const PoolGeometry& g) {
  for (size_t j = 0; j < 3; ++j) {
    const int64_t extent = (g.kernel[j] - 1) * g.dilation[j] + 1;
    if ((g.in[j] + g.pad_begin[j] + onednn_pad_end(g, j) - extent) / g.stride[j] + 1 != g.out[j]) return false;
  }
  return true;
}

// The pooling primitive on as many of `threads` as the input's size is worth.
onednn::Primitive prepare_pool(const PoolAttributes& a, const PoolGeometry& g, memory::data_type type, int threads) {
  memory::dims src_dims{g.n, g.c}, dst_dims{g.n, g.c}, kernel, strides, dilation, pad_l, pad_r;
  for (size_t i = 0; i < g.axes; ++i) {
    const size_t j = g.axis(i);
    src_dims.push_back(g.in[j]);
    dst_dims.push_back(g.out[j]);
    kernel.push_back(g.kernel[j]);
    strides.push_back(g.stride[j]);
    dilation.push_back(g.dilation[j] - 1);
    pad_l.push_back(g.pad_begin[j]);
    pad_r.push_back(onednn_pad_end(g, j));
  }
  const dnnl::algorithm algorithm = a.kind == PoolKind::kMax ? dnnl::algorithm::pooling_max
                                    : a.count_include_pad    ? dnnl::algorithm::pooling_avg_include_padding
                                                             : dnnl::algorithm::pooling_avg_exclude_padding;
  const memory::desc src = onednn::plain_desc(src_dims, type);
  const memory::desc dst = onednn::plain_desc(dst_dims, type);
  const int used = onednn::threads_for(static_cast<double>(src.get_size()), onednn::kBytesPerThread, threads);
  onednn::ThreadScope scope(used);
  dnnl::pooling_v2_forward::desc desc(dnnl::prop_kind::forward_inference, algorithm, src, dst, strides, kernel,
                                      dilation, pad_l, pad_r);
  const dnnl::pooling_v2_forward::primitive_desc pd(desc, onednn::primitive_attr(), onednn::engine());
  onednn::Primitive primitive(dnnl::pooling_v2_forward(pd), pd, used);
  primitive.add_argument(DNNL_ARG_SRC, src);
  primitive.add_argument(DNNL_ARG_DST, dst);
  return primitive;
}

bool holds_nan(const Tensor& x) {
  const float* p = x.data<float>();
  return std::any_of(p, p + x.numel(), [](float v) { return v != v; });
}

class PoolKernel final : public OpKernel {
 public:
  PoolKernel(const KernelInfo& info, PoolKind kind) : attrs_(info, kind) {}

  void compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    const PoolGeometry g = pool_geometry(ctx, attrs_, x);
    Tensor& y = ctx.allocate_output(0, x.dtype(), g.out_shape);
    const bool want_indices = attrs_.kind == PoolKind::kMax && ctx.has_output(1);
    Tensor* indices = want_indices ? &ctx.allocate_output(1, DType::kInt64, g.out_shape) : nullptr;
    if (y.numel() == 0) return;
    if (g.in_size() == 0) ctx.fail("X " + shape_string(x.shape()) + " has an empty spatial axis");
    // oneDNN's and the 2x2 kernel's maximum drop NaN: an input holding one takes the loops.
    const bool nan_input = attrs_.kind == PoolKind::kMax && x.dtype() == DType::kFloat32 && holds_nan(x);
    if (x.dtype() == DType::kFloat32 && !nan_input && is_max_pool_2x2(attrs_, g, want_indices)) {
      const pool::MaxWindow two_by_two{.out_h = g.out[1], .out_w = g.out[2]};
      pool::max_2d(x.data<float>(), y.data<float>(), g.n * g.c, g.in[1], g.in[2], two_by_two);
      return;
    }
    if (!nan_input && use_onednn(x.dtype(), g, want_indices)) {
      const memory::data_type type = *onednn::data_type(x.dtype());
      key_.clear();
      onednn::append_key(key_, x);
      onednn::Primitive& primitive = cache_.get(key_, [&] { return prepare_pool(attrs_, g, type, ctx.num_threads()); });
      primitive.run(ctx, {{DNNL_ARG_SRC, x.raw_data()}, {DNNL_ARG_DST, y.raw_data()}});
      return;
    }
    auto run = [&]<typename T>() {
      int64_t* index_data = indices ? indices->data<int64_t>() : nullptr;
      if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
        if (plain_max_pool(attrs_, g)) return plain_max_pool_loop<T>(g, x.data<T>(), y.data<T>(), index_data);
      }
      pool_loop<T>(attrs_, g, x.data<T>(), y.data<T>(), index_data);
    };
    if (attrs_.kind == PoolKind::kMax) {
      dispatch<float, double, Float16, BFloat16, int8_t, uint8_t>(x.dtype(), ctx.node().op_type, run);
    } else {
      dispatch<float, double, Float16, BFloat16>(x.dtype(), ctx.node().op_type, run);
    }
  }

 private:
  bool use_onednn(DType dtype, const PoolGeometry& g, bool want_indices) const {
    if (dtype != DType::kFloat32 && !(dtype == DType::kBFloat16 && onednn::computes_natively(dtype))) return false;
    if (attrs_.kind == PoolKind::kLp || want_indices) return false;
    // oneDNN counts a ceil-mode overhang as padding; ONNX counts only the explicit pads.
    if (attrs_.kind == PoolKind::kAverage && attrs_.count_include_pad && g.overhangs()) return false;
    return onednn_sizes_match(g);
  }

  PoolAttributes attrs_;
  std::vector<int64_t> key_;  // the cache key, rebuilt in place each run
  onednn::ShapeCache<onednn::Primitive> cache_;
};

KernelFactory pool_factory(PoolKind kind) {
  return [kind](const KernelInfo& info) { return std::make_unique<PoolKernel>(info, kind); };
}

const KernelRegistration kMaxPool{"", "MaxPool", 1, kLatestOpset, pool_factory(PoolKind::kMax)};
const KernelRegistration kAveragePool{"", "AveragePool", 1, kLatestOpset, pool_factory(PoolKind::kAverage)};
const KernelRegistration kLpPool{"", "LpPool", 1, kLatestOpset, pool_factory(PoolKind::kLp)};

// ---- global pools ----

// Reduces each (n, c) plane of X to one value: the mean, the maximum or the p-norm.
template <typename T>
void global_pool(PoolKind kind, double p, const T* x, T* y, int64_t planes, int64_t size) {
  using C = compute_type_t<T>;
  using Acc = std::conditional_t<std::is_same_v<C, double>, double, float>;
  parallel_for(planes, std::max<int64_t>(1, 16384 / std::max<int64_t>(size, 1)), [&](int64_t begin, int64_t end) {
    for (int64_t plane = begin; plane < end; ++plane) {
      const T* xp = x + plane * size;
      if (kind == PoolKind::kMax) {
        C best = static_cast<C>(xp[0]);
        for (int64_t i = 1; i < size; ++i) {
          if (takes_max(static_cast<C>(xp[i]), best)) best = static_cast<C>(xp[i]);
        }
        y[plane] = static_cast<T>(best);
        continue;
      }
      const Acc sum =
          kind == PoolKind::kAverage
              ? onednn::lane_sum<Acc>(size, [&](int64_t i) { return static_cast<Acc>(static_cast<C>(xp[i])); })
              : onednn::lane_sum<Acc>(size, [&](int64_t i) {
                  return static_cast<Acc>(std::pow(std::abs(static_cast<double>(xp[i])), p));
                });
      const Acc value =
          kind == PoolKind::kAverage ? sum / static_cast<Acc>(size) : static_cast<Acc>(std::pow(sum, 1.0 / p));
      y[plane] = static_cast<T>(static_cast<C>(value));
    }
  });
}

KernelFactory global_pool_factory(PoolKind kind) {
  return [kind](const KernelInfo& info) {
    const double p = kind != PoolKind::kLp ? 2.0
                     : info.opset() < 2    ? info.float_attribute("p", 2.0f)
                                           : static_cast<double>(info.int_attribute("p", 2));
    if (p <= 0) info.fail("p is " + std::to_string(p) + ", expected a positive norm order");
    return make_kernel([kind, p](KernelContext& ctx) {
      const Tensor& x = ctx.input(0);
      if (x.rank() < 2) ctx.fail("X must be [N, C, spatial...], got " + shape_string(x.shape()));
      Shape out_shape(x.rank(), 1);
      out_shape[0] = x.dim(0);
      out_shape[1] = x.dim(1);
      Tensor& y = ctx.allocate_output(0, x.dtype(), out_shape);
      if (y.numel() == 0) return;
      const int64_t size = x.numel() / y.numel();
      if (size == 0) ctx.fail("X " + shape_string(x.shape()) + " has an empty spatial axis; there is nothing to pool");
      dispatch<float, double, Float16, BFloat16>(x.dtype(), ctx.node().op_type, [&]<typename T>() {
        global_pool<T>(kind, p, x.data<T>(), y.data<T>(), y.numel(), size);
      });
    });
  };
}

const KernelRegistration kGlobalAveragePool{"", "GlobalAveragePool", 1, kLatestOpset,
                                            global_pool_factory(PoolKind::kAverage)};
const KernelRegistration kGlobalMaxPool{"", "GlobalMaxPool", 1, kLatestOpset, global_pool_factory(PoolKind::kMax)};
const KernelRegistration kGlobalLpPool{"", "GlobalLpPool", 1, kLatestOpset, global_pool_factory(PoolKind::kLp)};

}  // namespace

// ---- 2-D max pools shared with conv.cc ----

namespace pool {
namespace {

// The 2 x 2, stride 2 window: each is the larger of its two rows' pairwise maxima, vertical
// pairs first as one vectorizable pass over two input rows, then neighbours. Output rows
// [begin, end) of one plane of width w; `pair_max` holds 2 * (w / 2) values.
template <typename T, typename C>
ONNXTRAIN_MULTIVERSIONED [[gnu::flatten]] void max_2x2_rows(const T* x, T* y, int64_t begin, int64_t end, int64_t w,
                                                            C* pair_max) {
  const int64_t out_w = w / 2;
  for (int64_t r = begin; r < end; ++r) {
    const T* top = x + 2 * r * w;
    const T* bottom = top + w;
    for (int64_t i = 0; i < 2 * out_w; ++i) {
      const C a = static_cast<C>(top[i]), b = static_cast<C>(bottom[i]);
      pair_max[i] = nan_max(a, b);
    }
    T* row = y + r * out_w;
    for (int64_t i = 0; i < out_w; ++i) row[i] = static_cast<T>(nan_max(pair_max[2 * i], pair_max[2 * i + 1]));
  }
}

template <typename T>
void max_2x2(const T* x, T* y, int64_t planes, int64_t h, int64_t w) {
  using C = compute_type_t<T>;
  const int64_t out_h = h / 2, out_w = w / 2;
  parallel_for(planes, std::max<int64_t>(1, 16384 / std::max<int64_t>(h * w, 1)), [&](int64_t begin, int64_t end) {
    std::vector<C> pair_max(static_cast<size_t>(2 * out_w));
    for (int64_t plane = begin; plane < end; ++plane)
      max_2x2_rows(x + plane * h * w, y + plane * out_h * out_w, 0, out_h, w, pair_max.data());
  });
}

// The input rows or columns [begin, end) a window starting at `start` covers.
std::pair<int64_t, int64_t> window_span(int64_t start, int64_t kernel, int64_t size) {
  return {std::max<int64_t>(start, 0), std::min(start + kernel, size)};
}

// Any window over one channel block at a time, a vector of `kBlock` channels per pixel: a
// row of windows into `tile`, then its channels into Y's planes (one pass, where pooling
// into blocks and transposing after took 0.093 ms instead of 0.077 for the small CNN at
// batch 8 on two threads).
template <int kBlock>
ONNXTRAIN_MULTIVERSIONED [[gnu::flatten]] void max_block_range(const float* x, float* y, int64_t begin, int64_t end,
                                                               int64_t c, int64_t h, int64_t w, const MaxWindow& win,
                                                               float* tile_data) {
  using Channels = vector_math::Vector<float, kBlock>;
  const int64_t blocks = (c + kBlock - 1) / kBlock;
  const bool two_by_two = win.is_unbounded_2x2(h, w);
  const std::span<float> tile(tile_data, static_cast<size_t>(win.out_w * kBlock));
  for (int64_t i = begin; i < end; ++i) {
    const int64_t first_channel = i % blocks * kBlock, valid = std::min<int64_t>(kBlock, c - first_channel);
    const float* in = x + i * h * w * kBlock;
    const auto at = [&](int64_t r, int64_t col) { return in + (r * w + col) * kBlock; };
    for (int64_t oh = 0; oh < win.out_h; ++oh) {
      const auto [r0, r1] = window_span(oh * win.stride_h - win.pad_top, win.kernel_h, h);
      for (int64_t ow = 0; ow < win.out_w; ++ow) {
        LaneMax<Channels> m;
        if (two_by_two) {  // the common case without the window's bounds
          m.add(at(2 * oh, 2 * ow));
          m.add(at(2 * oh + 1, 2 * ow));
          m.add(at(2 * oh, 2 * ow + 1));
          m.add(at(2 * oh + 1, 2 * ow + 1));
        } else {
          const auto [c0, c1] = window_span(ow * win.stride_w - win.pad_left, win.kernel_w, w);
          for (int64_t r = r0; r < r1; ++r)
            for (int64_t col = c0; col < c1; ++col) m.add(at(r, col));
        }
        m.store(tile.data() + ow * kBlock);
      }
      for (int64_t j = 0; j < valid; ++j) {
        float* row = y + ((i / blocks * c + first_channel + j) * win.out_h + oh) * win.out_w;
        for (int64_t ow = 0; ow < win.out_w; ++ow) row[ow] = tile[static_cast<size_t>(ow * kBlock + j)];
      }
    }
  }
}

// The n * ceil(c / kBlock) channel blocks run in parallel.
template <int kBlock>
void max_blocks(const float* x, float* y, int64_t n, int64_t c, int64_t h, int64_t w, const MaxWindow& win) {
  const int64_t blocks = (c + kBlock - 1) / kBlock;
  parallel_for(n * blocks, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> tile(static_cast<size_t>(win.out_w * kBlock));
    max_block_range<kBlock>(x, y, begin, end, c, h, w, win, tile.data());
  });
}

}  // namespace

template <typename T>
void max_2d(const T* x, T* y, int64_t planes, int64_t h, int64_t w, const MaxWindow& win) {
  if (win.is_unbounded_2x2(h, w)) {
    max_2x2(x, y, planes, h, w);
    return;
  }
  using C = compute_type_t<T>;
  parallel_for(planes, std::max<int64_t>(1, 16384 / std::max<int64_t>(h * w, 1)), [&](int64_t begin, int64_t end) {
    for (int64_t plane = begin; plane < end; ++plane) {
      const T* xp = x + plane * h * w;
      for (int64_t oh = 0; oh < win.out_h; ++oh) {
        const auto [r0, r1] = window_span(oh * win.stride_h - win.pad_top, win.kernel_h, h);
        for (int64_t ow = 0; ow < win.out_w; ++ow) {
          const auto [c0, c1] = window_span(ow * win.stride_w - win.pad_left, win.kernel_w, w);
          C best = -std::numeric_limits<C>::infinity();
          for (int64_t r = r0; r < r1; ++r)
            for (int64_t col = c0; col < c1; ++col) {
              best = nan_max(best, static_cast<C>(xp[r * w + col]));
            }
          y[(plane * win.out_h + oh) * win.out_w + ow] = static_cast<T>(best);
        }
      }
    }
  });
}

template void max_2d(const float*, float*, int64_t, int64_t, int64_t, const MaxWindow&);
template void max_2d(const double*, double*, int64_t, int64_t, int64_t, const MaxWindow&);
template void max_2d(const Float16*, Float16*, int64_t, int64_t, int64_t, const MaxWindow&);
template void max_2d(const BFloat16*, BFloat16*, int64_t, int64_t, int64_t, const MaxWindow&);

void max_2d_from_channel_blocks(const float* x, float* y, int64_t n, int64_t c, int64_t h, int64_t w, int64_t block,
                                const MaxWindow& window) {
  if (block == 8) {
    max_blocks<8>(x, y, n, c, h, w, window);
  } else {
    max_blocks<16>(x, y, n, c, h, w, window);
  }
}

}  // namespace pool
}  // namespace onnxtrain
