// The normalizations' gradient kernels: LayerNormalizationGrad, RMSNormalizationGrad and
// BatchNormalizationGrad (org.onnxtrain, and com.microsoft's of the same inputs and outputs),
// and com.microsoft's SimplifiedLayerNormalizationGrad.
#include <algorithm>
#include <cstring>
#include <numeric>
#include <vector>

#include "core/dispatch.h"
#include "core/parallel.h"
#include "ops/cpu/axis.h"
#include "ops/cpu/broadcast.h"
#include "ops/cpu/multiversion.h"
#include "ops/cpu/normalization.h"
#include "ops/kernel_registry.h"

namespace onnxtrain {
namespace {

using normalization::simplified_rows;
using normalization::SimplifiedRows;
using normalization::values_as;

// Rows [begin, end) of LayerNormalizationGrad over rows of n elements: dX into `dx` (when
// not null), and each row's dScale and dBias terms added into ds and dbs (n values each).
template <typename T>
ONNXTRAIN_MULTIVERSIONED [[gnu::flatten]] void layer_norm_grad_rows(const T* g, const T* x, const T* scale,
                                                                    const compute_type_t<T>* means,
                                                                    const compute_type_t<T>* inv_stds, int64_t n,
                                                                    int64_t begin, int64_t end, T* dx,
                                                                    compute_type_t<T>* ds, compute_type_t<T>* dbs) {
  using C = compute_type_t<T>;
  for (int64_t r = begin; r < end; ++r) {
    const C mu = means[r], iv = inv_stds[r];
    const T* gr = g + r * n;
    const T* xr = x + r * n;
    C a = 0, b = 0;
    for (int64_t j = 0; j < n; ++j) {
      const C xhat = (C(xr[j]) - mu) * iv;
      const C dxhat = C(gr[j]) * C(scale[j]);
      a += dxhat;
      b += dxhat * xhat;
      ds[j] += C(gr[j]) * xhat;
      dbs[j] += C(gr[j]);
    }
    if (!dx) continue;
    T* out = dx + r * n;
    const C inv_n = C(1) / C(n);
    for (int64_t j = 0; j < n; ++j) {
      const C xhat = (C(xr[j]) - mu) * iv;
      const C dxhat = C(gr[j]) * C(scale[j]);
      out[j] = static_cast<T>(iv * (dxhat - (a + xhat * b) * inv_n));
    }
  }
}

// LayerNormalizationGrad over the trailing axes from `axis`, from the saved mean and
// inverse standard deviation (one per row).
const KernelRegistration kLayerNormalizationGrad{
    "org.onnxtrain", "LayerNormalizationGrad", 1, kLatestOpset, [](const KernelInfo& info) {
      const int64_t axis_attr = info.int_attribute("axis", -1);
      return make_kernel([axis_attr](KernelContext& ctx) {
        const Tensor& dy = ctx.input(0);
        const Tensor& x = ctx.input(1);
        const Tensor& scale = ctx.input(2);
        const Tensor& mean = ctx.input(3);
        const Tensor& inv = ctx.input(4);
        ctx.require_alike(dy, x, "LayerNormalizationGrad");
        const auto axis = static_cast<size_t>(normalize_axis(ctx, axis_attr, static_cast<int64_t>(x.rank())));
        const int64_t rows = shape_size(std::span(x.shape()).first(axis));
        const int64_t n = rows ? x.numel() / rows : 0;
        if (scale.numel() != n) ctx.fail("Scale must have the normalized shape (" + std::to_string(n) + " elements)");
        if (mean.numel() != rows || inv.numel() != rows) ctx.fail("Mean and InvStdDev must have one value per row");
        Tensor* dx = ctx.has_output(0) ? &ctx.allocate_output(0, x.dtype(), x.shape()) : nullptr;
        Tensor* dscale = ctx.has_output(1) ? &ctx.allocate_output(1, scale.dtype(), scale.shape()) : nullptr;
        Tensor* dbias = ctx.has_output(2) ? &ctx.allocate_output(2, scale.dtype(), scale.shape()) : nullptr;
        dispatch<ONNXTRAIN_FLOAT_TYPES>(x.dtype(), "LayerNormalizationGrad", [&]<typename T>() {
          using C = compute_type_t<T>;
          const T* g = dy.data<T>();
          const T* xv = x.data<T>();
          const T* sc = scale.data<T>();
          const std::vector<C> means = values_as<C>(mean, "Mean"), inv_stds = values_as<C>(inv, "InvStdDev");
          const int threads = std::max(1, omp_get_max_threads());
          std::vector<C> partial(static_cast<size_t>(threads) * 2 * static_cast<size_t>(n), C(0));
          const int64_t chunks = std::min<int64_t>(threads, std::max<int64_t>(1, rows));
          parallel_for(chunks, 1, [&](int64_t cb, int64_t ce) {
            for (int64_t chunk = cb; chunk < ce; ++chunk) {
              C* ds = partial.data() + chunk * 2 * n;
              C* dbs = ds + n;
              layer_norm_grad_rows(g, xv, sc, means.data(), inv_stds.data(), n, rows * chunk / chunks,
                                   rows * (chunk + 1) / chunks, dx ? dx->data<T>() : nullptr, ds, dbs);
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
    "org.onnxtrain", "RMSNormalizationGrad", 1, kLatestOpset, [](const KernelInfo& info) {
      const int64_t axis_attr = info.int_attribute("axis", -1);
      const float epsilon = info.float_attribute("epsilon", 1e-5f);
      return make_kernel([axis_attr, epsilon](KernelContext& ctx) {
        const Tensor& dy = ctx.input(0);
        const Tensor& x = ctx.input(1);
        const Tensor& scale = ctx.input(2);
        ctx.require_alike(dy, x, "RMSNormalizationGrad");
        if (scale.dtype() != x.dtype()) ctx.fail("scale must have X's element type");
        const auto axis = static_cast<size_t>(normalize_axis(ctx, axis_attr, static_cast<int64_t>(x.rank())));
        const int64_t rows = shape_size(std::span(x.shape()).first(axis));
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
        dispatch<ONNXTRAIN_FLOAT_TYPES>(x.dtype(), "RMSNormalizationGrad", [&]<typename T>() {
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

// Sums over one channel of BatchNormalizationGrad, x taken relative to a pivot p (near the
// channel's mean, so that var = s2/n - (s1/n)^2 does not cancel): s1 = sum(x - p),
// s2 = sum((x - p)^2), dy = sum(dY), dyx = sum(dY (x - p)).
struct BatchNormSums {
  double s1 = 0, s2 = 0, dy = 0, dyx = 0;
};

// The sums of channel `ch` of X (n, c, s): 16 lanes in C (a fixed order whatever the
// vector width), halved and added into double after every 512 to 1023 elements, so that
// float rounding stays that of ~70 additions (blocks of 4096 put dScale of 29400 values
// 1e-4 off). Rows shorter than a block share one (512 channels of 4x4 spent more on
// adding each row of 16 into double than on its elements).
template <typename T>
BatchNormSums batch_norm_channel_sums(const T* x, const T* g, int64_t n, int64_t c, int64_t s, int64_t ch,
                                      compute_type_t<T> pivot) {
  using C = compute_type_t<T>;
  constexpr int kLanes = 16;
  constexpr int64_t kBlock = 512;
  BatchNormSums sums;
  C s1[kLanes] = {}, s2[kLanes] = {}, sd[kLanes] = {}, sdx[kLanes] = {};
  const auto flush = [&] {
    for (int width = kLanes / 2; width > 0; width /= 2) {
      for (int l = 0; l < width; ++l) {
        s1[l] += s1[l + width];
        s2[l] += s2[l + width];
        sd[l] += sd[l + width];
        sdx[l] += sdx[l + width];
      }
    }
    sums.s1 += double(s1[0]);
    sums.s2 += double(s2[0]);
    sums.dy += double(sd[0]);
    sums.dyx += double(sdx[0]);
    for (int l = 0; l < kLanes; ++l) s1[l] = s2[l] = sd[l] = sdx[l] = C(0);
  };
  int64_t pending = 0;  // elements in the lanes
  for (int64_t b = 0; b < n; ++b) {
    const T* xr = x + (b * c + ch) * s;
    const T* gr = g + (b * c + ch) * s;
    for (int64_t start = 0; start < s; start += kBlock) {
      const int64_t stop = std::min(s, start + kBlock);
      int64_t i = start;
      for (; i + kLanes <= stop; i += kLanes) {
        for (int l = 0; l < kLanes; ++l) {
          const C d = C(xr[i + l]) - pivot, dy = C(gr[i + l]);
          s1[l] += d;
          s2[l] += d * d;
          sd[l] += dy;
          sdx[l] += dy * d;
        }
      }
      for (; i < stop; ++i) {
        const C d = C(xr[i]) - pivot, dy = C(gr[i]);
        s1[0] += d;
        s2[0] += d * d;
        sd[0] += dy;
        sdx[0] += dy * d;
      }
      pending += stop - start;
      if (pending >= kBlock) {
        flush();
        pending = 0;
      }
    }
  }
  if (pending) flush();
  return sums;
}

// The pivot of channel `ch`: the mean of up to 4 values from each of up to 4 rows, so that
// one outlying value (the first, say) does not become p and make s2 cancel; few enough
// not to cost a pass where rows are short (up to 64 x 16 took 512 channels of 7x7 from
// 0.27 to 0.59 ms).
template <typename T>
compute_type_t<T> batch_norm_pivot(const T* x, int64_t n, int64_t c, int64_t s, int64_t ch) {
  const int64_t rows = std::min<int64_t>(n, 4), cols = std::min<int64_t>(s, 4);
  double sum = 0;
  for (int64_t b = 0; b < rows; ++b) {
    const T* xr = x + (b * c + ch) * s;
    for (int64_t i = 0; i < cols; ++i) sum += double(compute_type_t<T>(xr[i]));
  }
  return static_cast<compute_type_t<T>>(sum / static_cast<double>(rows * cols));
}

// Channels [begin, end) of BatchNormalizationGrad over X (n, c, s): one pass over (X, dY)
// for the channel's statistics and sums (while the channel's rows stay in cache), one
// writing dX = a dY + b (x - mean) + k, the coefficients in double.
template <typename T>
ONNXTRAIN_MULTIVERSIONED [[gnu::flatten]] void batch_norm_grad_channels(const T* g, const T* x, const T* scale,
                                                                        int64_t n, int64_t c, int64_t s, double epsilon,
                                                                        int64_t begin, int64_t end, T* dx, T* dscale,
                                                                        T* dbias) {
  using C = compute_type_t<T>;
  const double count = static_cast<double>(n * s);
  for (int64_t ch = begin; ch < end; ++ch) {
    if (count == 0) {
      if (dscale) dscale[ch] = static_cast<T>(C(0));
      if (dbias) dbias[ch] = static_cast<T>(C(0));
      continue;
    }
    const C pivot = batch_norm_pivot(x, n, c, s, ch);
    const BatchNormSums sums = batch_norm_channel_sums(x, g, n, c, s, ch, pivot);
    const double shift = sums.s1 / count;  // mean - pivot
    const double var = std::max(0.0, sums.s2 / count - shift * shift);
    const double inv = 1.0 / std::sqrt(var + epsilon);
    const double sum_dy_xhat = (sums.dyx - shift * sums.dy) * inv;
    if (dscale) dscale[ch] = static_cast<T>(static_cast<C>(sum_dy_xhat));
    if (dbias) dbias[ch] = static_cast<T>(static_cast<C>(sums.dy));
    if (!dx) continue;
    // dX = scale inv (dY - (sum_dy + xhat sum_dy_xhat) / count), xhat = (x - mean) inv.
    const double factor = double(C(scale[ch])) * inv;
    const C a = static_cast<C>(factor);
    const C k = static_cast<C>(-factor * sums.dy / count);
    const C bx = static_cast<C>(-factor * inv * sum_dy_xhat / count);
    const C mean = static_cast<C>(double(pivot) + shift);
    for (int64_t b = 0; b < n; ++b) {
      const T* xr = x + (b * c + ch) * s;
      const T* gr = g + (b * c + ch) * s;
      T* out = dx + (b * c + ch) * s;
      for (int64_t i = 0; i < s; ++i) out[i] = static_cast<T>(a * C(gr[i]) + bx * (C(xr[i]) - mean) + k);
    }
  }
}

// BatchNormalizationGrad in training mode: statistics over (N, spatial) per channel.
const KernelRegistration kBatchNormalizationGrad{
    "org.onnxtrain", "BatchNormalizationGrad", 1, kLatestOpset, [](const KernelInfo& info) {
      const double epsilon = info.float_attribute("epsilon", 1e-5f);
      return make_kernel([epsilon](KernelContext& ctx) {
        const Tensor& dy = ctx.input(0);
        const Tensor& x = ctx.input(1);
        const Tensor& scale = ctx.input(2);
        ctx.require_alike(dy, x, "BatchNormalizationGrad");
        if (x.rank() < 2) ctx.fail("X needs at least 2 axes");
        const int64_t n = x.dim(0), c = x.dim(1);
        const int64_t s = c && n ? x.numel() / (n * c) : 0;
        if (scale.numel() != c) ctx.fail("scale must have one value per channel");
        Tensor* dx = ctx.has_output(0) ? &ctx.allocate_output(0, x.dtype(), x.shape()) : nullptr;
        Tensor* dscale = ctx.has_output(1) ? &ctx.allocate_output(1, scale.dtype(), {c}) : nullptr;
        Tensor* dbias = ctx.has_output(2) ? &ctx.allocate_output(2, scale.dtype(), {c}) : nullptr;
        dispatch<ONNXTRAIN_FLOAT_TYPES>(x.dtype(), "BatchNormalizationGrad", [&]<typename T>() {
          // Channels split across threads; a channel's rows are what one thread reads twice.
          const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(1, n * s));
          parallel_for(c, grain, [&](int64_t begin, int64_t end) {
            batch_norm_grad_channels(dy.data<T>(), x.data<T>(), scale.data<T>(), n, c, s, epsilon, begin, end,
                                     dx ? dx->data<T>() : nullptr, dscale ? dscale->data<T>() : nullptr,
                                     dbias ? dbias->data<T>() : nullptr);
          });
        });
      });
    }};

// (dY, X, scale, mean, inv_std_dev) => (dX, dScale, dB), the same inputs and outputs.
const KernelRegistration kMicrosoftLayerNormalizationGrad{"com.microsoft", "LayerNormalizationGrad", 1, kLatestOpset,
                                                          same_kernel_as("org.onnxtrain", "LayerNormalizationGrad")};
// ORT's (dY, X, scale, saved_mean, saved_inv_std): the saved batch statistics are what
// org.onnxtrain's kernel recomputes from X, so it reads the first three inputs only.
const KernelRegistration kMicrosoftBatchNormalizationGrad{"com.microsoft", "BatchNormalizationGrad", 1, kLatestOpset,
                                                          same_kernel_as("org.onnxtrain", "BatchNormalizationGrad")};

// com.microsoft::SimplifiedLayerNormalizationGrad <axis, epsilon> (dY, X, scale, inv_std_var)
// => (dX, dScale): with r the saved inv_std_var of a row, x^ = x r and g = dY scale,
// dX = r (g - x^ mean(g x^)) and dScale = sum over rows of dY x^. Per row in double.
const KernelRegistration kMicrosoftSimplifiedLayerNormalizationGrad{
    "com.microsoft", "SimplifiedLayerNormalizationGrad", 1, kLatestOpset, [](const KernelInfo& info) {
      const int64_t axis = info.int_attribute("axis", -1);
      return make_kernel([axis](KernelContext& ctx) {
        const Tensor& dy = ctx.input(0);
        const Tensor& x = ctx.input(1);
        const Tensor& scale = ctx.input(2);
        const Tensor& inv = ctx.input(3);
        const SimplifiedRows r = simplified_rows(ctx, axis, x, scale);
        if (dy.dtype() != x.dtype() || dy.shape() != x.shape()) {
          ctx.fail("dY is " + std::string(dtype_name(dy.dtype())) + shape_string(dy.shape()) + "; expected " +
                   std::string(dtype_name(x.dtype())) + shape_string(x.shape()) + " like X");
        }
        if (!is_floating(inv.dtype()) || inv.numel() != r.rows) {
          ctx.fail("inv_std_var is " + std::string(dtype_name(inv.dtype())) + shape_string(inv.shape()) +
                   "; expected one floating-point value per row of X (" + std::to_string(r.rows) + ")");
        }
        Tensor& dx = ctx.allocate_output(0, x.dtype(), x.shape());
        const std::vector<double> inv_std = values_as<double>(inv, "inv_std_var");
        dispatch<float, double, Float16, BFloat16>(x.dtype(), "SimplifiedLayerNormalizationGrad", [&]<typename T>() {
          using C = compute_type_t<T>;
          const T *g = dy.data<T>(), *xv = x.data<T>(), *sv = scale.data<T>();
          T* out = dx.data<T>();
          parallel_for(
              r.rows, std::max<int64_t>(1, 8192 / std::max<int64_t>(1, r.cols)), [&](int64_t begin, int64_t end) {
                for (int64_t row = begin; row < end; ++row) {
                  const int64_t at = row * r.cols;
                  const double ri = inv_std[static_cast<size_t>(row)];
                  double dot = 0;  // sum of g x^
                  for (int64_t j = 0; j < r.cols; ++j) {
                    dot += double(C(g[at + j])) * double(C(sv[j])) * (double(C(xv[at + j])) * ri);
                  }
                  const double mean = dot / static_cast<double>(r.cols);
                  for (int64_t j = 0; j < r.cols; ++j) {
                    const double gj = double(C(g[at + j])) * double(C(sv[j]));
                    out[at + j] = static_cast<T>(static_cast<C>(ri * (gj - double(C(xv[at + j])) * ri * mean)));
                  }
                }
              });
          if (!ctx.has_output(1)) return;
          T* ds = ctx.allocate_output(1, scale.dtype(), scale.shape()).data<T>();
          parallel_for(r.cols, std::max<int64_t>(1, 8192 / std::max<int64_t>(1, r.rows)),
                       [&](int64_t begin, int64_t end) {
                         for (int64_t j = begin; j < end; ++j) {
                           double sum = 0;
                           for (int64_t row = 0; row < r.rows; ++row) {
                             const int64_t at = row * r.cols + j;
                             sum += double(C(g[at])) * double(C(xv[at])) * inv_std[static_cast<size_t>(row)];
                           }
                           ds[j] = static_cast<T>(static_cast<C>(sum));
                         }
                       });
        });
      });
    }};

}  // namespace
}  // namespace onnxtrain
