// GridSample and AffineGrid (spatial transformer networks).
//
// GridSample: X [N, C, D1..Dr] sampled at the points of grid [N, O1..Or, r] (normalized to
// [-1, 1], component 0 along the last axis Dr) gives Y [N, C, O1..Or]. Along each axis a
// point has taps (1 nearest, 2 linear, 4 cubic) with weights; the output is the sum over
// every combination of taps of the product of their weights times the pixel there. A
// point's combinations are computed once and applied to every channel.
//
// Coordinates follow the ONNX reference (and PyTorch): u = ((g + 1) D - 1) / 2, or
// (g + 1) / 2 (D - 1) with align_corners; nearest rounds half to even; a u outside
// [lo, hi] (-0.5 and D - 0.5, or 0 and D - 1 with align_corners) is clamped to [0, D - 1]
// (border) or reflected into [lo, hi] (reflection); each tap outside [0, D) is then zero,
// clamped or reflected the same way.
//
// AffineGrid: theta [N, 2, 3] (or [N, 3, 4]) and size (N, C, H, W) (or (N, C, D, H, W))
// give grid [N, H, W, 2]: the base grid (x, y, 1) of normalized pixel centres times
// theta^T.
#include <array>
#include <cmath>
#include <string>
#include <vector>

#include "core/dispatch.h"
#include "core/parallel.h"
#include "ops/kernel_registry.h"

namespace onnxtrain {
namespace {

enum class Interpolation { kNearest, kLinear, kCubic };
enum class Padding { kZeros, kBorder, kReflection };

struct GridSampleParams {
  Interpolation mode = Interpolation::kLinear;
  Padding padding = Padding::kZeros;
  bool align_corners = false;
};

GridSampleParams grid_sample_params(const KernelInfo& info) {
  GridSampleParams p;
  const std::string mode = info.string_attribute("mode", info.opset() >= 20 ? "linear" : "bilinear");
  if (mode == "nearest") {
    p.mode = Interpolation::kNearest;
  } else if (mode == "linear" || mode == "bilinear") {
    p.mode = Interpolation::kLinear;
  } else if (mode == "cubic" || mode == "bicubic") {
    p.mode = Interpolation::kCubic;
  } else {
    info.fail("mode is \"" + mode + "\", expected nearest, linear (bilinear) or cubic (bicubic)");
  }
  const std::string padding = info.string_attribute("padding_mode", "zeros");
  if (padding == "zeros") {
    p.padding = Padding::kZeros;
  } else if (padding == "border") {
    p.padding = Padding::kBorder;
  } else if (padding == "reflection") {
    p.padding = Padding::kReflection;
  } else {
    info.fail("padding_mode is \"" + padding + "\", expected zeros, border or reflection");
  }
  p.align_corners = info.int_attribute("align_corners", 0) != 0;
  return p;
}

// x reflected at lo and hi until it lies in [lo, hi].
template <typename A>
A reflect(A x, A lo, A hi) {
  const A range = hi - lo;
  if (!std::isfinite(x) || range <= 0) return lo;
  if (x < lo) {
    const A dx = lo - x, n = std::floor(dx / range), r = dx - n * range;
    return std::fmod(n, A(2)) == 0 ? lo + r : hi - r;
  }
  if (x > hi) {
    const A dx = x - hi, n = std::floor(dx / range), r = dx - n * range;
    return std::fmod(n, A(2)) == 0 ? hi - r : lo + r;
  }
  return x;
}

// Keys' cubic convolution weights (a = -0.75) of the taps at -1, 0, 1, 2 for t in [0, 1).
template <typename A>
std::array<A, 4> cubic_weights(A t) {
  constexpr A a = A(-0.75);
  const A s = t + 1, q = 1 - t, w = 2 - t;
  return {((a * s - 5 * a) * s + 8 * a) * s - 4 * a, ((a + 2) * t - (a + 3)) * t * t + 1,
          ((a + 2) * q - (a + 3)) * q * q + 1, ((a * w - 5 * a) * w + 8 * a) * w - 4 * a};
}

// One axis of one point: up to 4 taps (index along the axis, weight); a zero-padded tap
// outside the axis has weight 0 and index 0.
template <typename A>
struct Taps {
  std::array<int64_t, 4> index{};
  std::array<A, 4> weight{};
  int count = 0;
};

template <typename A>
Taps<A> axis_taps(A g, int64_t size, const GridSampleParams& p) {
  const A lo = p.align_corners ? A(0) : A(-0.5);
  const A hi = p.align_corners ? A(size - 1) : A(size) - A(0.5);
  A u = p.align_corners ? (g + 1) / 2 * A(size - 1) : ((g + 1) * A(size) - 1) / 2;
  Taps<A> taps;
  if (std::isnan(u)) {  // NaN in, NaN out
    taps.count = 1;
    taps.weight[0] = u;
    return taps;
  }
  if (p.mode == Interpolation::kNearest) u = std::nearbyint(u);
  if (u < lo || u > hi) {
    if (p.padding == Padding::kBorder) u = std::clamp(u, A(0), A(size - 1));
    if (p.padding == Padding::kReflection) u = reflect(u, lo, hi);
  }
  u = std::clamp(u, A(-4), A(size + 4));  // far outside (zeros): every tap is outside too
  int64_t first = 0;
  if (p.mode == Interpolation::kNearest) {
    taps.count = 1;
    first = static_cast<int64_t>(u);
    taps.weight[0] = 1;
  } else if (p.mode == Interpolation::kLinear) {
    const A base = std::floor(u), t = u - base;
    taps.count = 2;
    first = static_cast<int64_t>(base);
    taps.weight = {1 - t, t, 0, 0};
  } else {
    const A base = std::floor(u);
    taps.count = 4;
    first = static_cast<int64_t>(base) - 1;
    taps.weight = cubic_weights(u - base);
  }
  for (int k = 0; k < taps.count; ++k) {
    int64_t j = first + k;
    if (j < 0 || j >= size) {
      if (p.padding == Padding::kZeros) {
        taps.weight[k] = 0;
        j = 0;
      } else if (p.padding == Padding::kBorder) {
        j = std::clamp<int64_t>(j, 0, size - 1);
      } else {
        j = std::clamp<int64_t>(static_cast<int64_t>(reflect(A(j), lo, hi)), 0, size - 1);
      }
    }
    taps.index[k] = j;
  }
  return taps;
}

template <typename T>
void grid_sample(const Tensor& x, const Tensor& grid, Tensor& y, const GridSampleParams& p) {
  using C = compute_type_t<T>;
  using A = std::conditional_t<std::is_same_v<T, double>, double, float>;
  const size_t r = x.rank() - 2;
  const int64_t n = x.dim(0), channels = x.dim(1);
  const int64_t plane = x.numel() / (n * channels);
  const int64_t points = grid.numel() / (n * static_cast<int64_t>(r));
  std::vector<int64_t> strides(r, 1);
  for (size_t a = r - 1; a-- > 0;) strides[a] = strides[a + 1] * x.dim(static_cast<int64_t>(a + 3));
  const T* px = x.data<T>();
  const T* pg = grid.data<T>();
  T* py = y.data<T>();
  const int64_t grain = std::max<int64_t>(1, 2048 / std::max<int64_t>(1, channels));
  parallel_for(n * points, grain, [&](int64_t begin, int64_t end) {
    std::vector<Taps<A>> taps(r);
    std::vector<int64_t> offsets, next_offsets;  // reused: no allocation per point
    std::vector<A> weights, next_weights;
    for (int64_t np = begin; np < end; ++np) {
      const int64_t b = np / points, point = np % points;
      const T* g = pg + np * static_cast<int64_t>(r);
      for (size_t a = 0; a < r; ++a) {
        const A coordinate = static_cast<A>(static_cast<C>(g[r - 1 - a]));
        taps[a] = axis_taps<A>(coordinate, x.dim(static_cast<int64_t>(a + 2)), p);
      }
      // Every combination of one tap per axis: its flat offset and weight.
      offsets.assign(1, 0);
      weights.assign(1, A(1));
      for (size_t a = 0; a < r; ++a) {
        const size_t before = offsets.size();
        next_offsets.clear();
        next_weights.clear();
        for (size_t i = 0; i < before; ++i) {
          for (int k = 0; k < taps[a].count; ++k) {
            next_offsets.push_back(offsets[i] + taps[a].index[k] * strides[a]);
            next_weights.push_back(weights[i] * taps[a].weight[k]);
          }
        }
        offsets.swap(next_offsets);
        weights.swap(next_weights);
      }
      for (int64_t c = 0; c < channels; ++c) {
        const T* xc = px + (b * channels + c) * plane;
        A sum = 0;
        for (size_t i = 0; i < offsets.size(); ++i) {
          if (weights[i] != A(0)) {  // a zero-padded tap reads nothing (X may hold inf)
            sum += weights[i] * static_cast<A>(static_cast<C>(xc[offsets[i]]));
          }
        }
        py[(b * channels + c) * points + point] = static_cast<T>(static_cast<C>(sum));
      }
    }
  });
}

void check_grid(KernelContext& ctx, const Tensor& x, const Tensor& grid) {
  if (x.rank() < 3) ctx.fail("X must be [N, C, D1, ...] (rank 3 or more), got " + shape_string(x.shape()));
  const size_t r = x.rank() - 2;
  if (grid.rank() != x.rank() || grid.dim(-1) != static_cast<int64_t>(r) || grid.dim(0) != x.dim(0)) {
    ctx.fail("grid must be [N, O1, ..., O" + std::to_string(r) + ", " + std::to_string(r) + "] for X " +
             shape_string(x.shape()) + ", got " + shape_string(grid.shape()));
  }
  if (grid.dtype() != x.dtype()) {
    ctx.fail("grid is " + std::string(dtype_name(grid.dtype())) + " and X " + std::string(dtype_name(x.dtype())) +
             ", expected one element type");
  }
}

const KernelRegistration kGridSample{"", "GridSample", 16, kLatestOpset, [](const KernelInfo& info) {
                                       const GridSampleParams p = grid_sample_params(info);
                                       return make_kernel([p](KernelContext& ctx) {
                                         const Tensor& x = ctx.input(0);
                                         const Tensor& grid = ctx.input(1);
                                         check_grid(ctx, x, grid);
                                         Shape out{x.dim(0), x.dim(1)};
                                         for (size_t a = 1; a + 1 < grid.rank(); ++a)
                                           out.push_back(grid.dim(static_cast<int64_t>(a)));
                                         Tensor& y = ctx.allocate_output(0, x.dtype(), out);
                                         if (y.numel() == 0) return;
                                         for (size_t a = 2; a < x.rank(); ++a) {
                                           if (x.dim(static_cast<int64_t>(a)) == 0)
                                             ctx.fail("X has an empty spatial axis: " + shape_string(x.shape()));
                                         }
                                         dispatch<float, double, Float16, BFloat16>(
                                             x.dtype(), "GridSample",
                                             [&]<typename T>() { grid_sample<T>(x, grid, y, p); });
                                       });
                                     }};

// The normalized centre of pixel i of an axis of `size` pixels (AffineGrid's base grid).
double base_coordinate(int64_t i, int64_t size, bool align_corners) {
  if (align_corners) return size > 1 ? -1.0 + 2.0 * static_cast<double>(i) / static_cast<double>(size - 1) : -1.0;
  return -1.0 + (2.0 * static_cast<double>(i) + 1.0) / static_cast<double>(size);
}

template <typename T>
void affine_grid(const Tensor& theta, const std::vector<int64_t>& spatial, bool align_corners, Tensor& grid) {
  using C = compute_type_t<T>;
  using A = std::conditional_t<std::is_same_v<T, double>, double, float>;
  const size_t r = spatial.size();
  const int64_t n = theta.dim(0), points = grid.numel() / (n * static_cast<int64_t>(r));
  const T* pt = theta.data<T>();
  T* pg = grid.data<T>();
  parallel_for(n * points, 1024, [&](int64_t begin, int64_t end) {
    std::vector<A> base(r + 1, A(1));  // (x, y[, z], 1): the last axis first
    for (int64_t np = begin; np < end; ++np) {
      int64_t rest = np % points;
      for (size_t a = r; a-- > 0;) {
        base[r - 1 - a] = static_cast<A>(base_coordinate(rest % spatial[a], spatial[a], align_corners));
        rest /= spatial[a];
      }
      const T* th = pt + np / points * static_cast<int64_t>(r * (r + 1));
      for (size_t i = 0; i < r; ++i) {
        A sum = 0;
        for (size_t j = 0; j <= r; ++j) sum += static_cast<A>(static_cast<C>(th[i * (r + 1) + j])) * base[j];
        pg[np * static_cast<int64_t>(r) + static_cast<int64_t>(i)] = static_cast<T>(static_cast<C>(sum));
      }
    }
  });
}

const KernelRegistration kAffineGrid{
    "", "AffineGrid", 20, kLatestOpset, {.host_inputs = {1}}, [](const KernelInfo& info) {
      const bool align_corners = info.int_attribute("align_corners", 0) != 0;
      return make_kernel([align_corners](KernelContext& ctx) {
        const Tensor& theta = ctx.input(0);
        const std::vector<int64_t> size = ctx.input(1).to_int64_vector();
        if (size.size() != 4 && size.size() != 5) {
          ctx.fail("size must hold (N, C, H, W) or (N, C, D, H, W), got " + std::to_string(size.size()) + " values");
        }
        const std::vector<int64_t> spatial(size.begin() + 2, size.end());
        const int64_t r = static_cast<int64_t>(spatial.size());
        if (theta.rank() != 3 || theta.dim(1) != r || theta.dim(2) != r + 1) {
          ctx.fail("theta must be [N, " + std::to_string(r) + ", " + std::to_string(r + 1) + "] for a size of " +
                   std::to_string(size.size()) + " values, got " + shape_string(theta.shape()));
        }
        Shape out{theta.dim(0)};
        for (int64_t d : spatial) {
          if (d < 0) ctx.fail("size holds a negative size: " + std::to_string(d));
          out.push_back(d);
        }
        out.push_back(r);
        Tensor& grid = ctx.allocate_output(0, theta.dtype(), out);
        if (grid.numel() == 0) return;
        dispatch<float, double, Float16, BFloat16>(
            theta.dtype(), "AffineGrid", [&]<typename T>() { affine_grid<T>(theta, spatial, align_corners, grid); });
      });
    }};

}  // namespace
}  // namespace onnxtrain
