// Resize (10..latest) and Upsample (7..9).
//
// Every resized axis gets a plan: for each output index, the input indices it reads and
// their weights (one tap for nearest, two for linear, four for cubic, more for antialiased
// downscaling). Nearest then gathers elements of any type directly. Linear and cubic are
// separable: one pass per resized axis, each a weighted sum of whole rows, so an NCHW
// image is resized as contiguous rows of W (and H) at a time.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>

#include "core/dispatch.h"
#include "core/parallel.h"
#include "ops/cpu/axis.h"
#include "ops/kernel_registry.h"

namespace onnxtrain {
namespace {

enum class Interpolation { kNearest, kLinear, kCubic };
enum class Coordinates {
  kHalfPixel,
  kHalfPixelSymmetric,
  kPytorchHalfPixel,
  kAlignCorners,
  kAsymmetric,
  kTfCropAndResize,
  kTfHalfPixelForNN
};
// kSimple is Upsample's and Resize-10's rule: truncate when upsampling, ceil when downsampling.
enum class Rounding { kRoundPreferFloor, kRoundPreferCeil, kFloor, kCeil, kSimple };
enum class AspectPolicy { kStretch, kNotLarger, kNotSmaller };

struct ResizeOptions {
  int64_t opset = 0;
  Interpolation interpolation = Interpolation::kNearest;
  Coordinates coordinates = Coordinates::kHalfPixel;
  Rounding rounding = Rounding::kRoundPreferFloor;
  AspectPolicy policy = AspectPolicy::kStretch;
  double cubic_a = -0.75;
  double extrapolation = 0;
  bool exclude_outside = false;
  bool antialias = false;
  std::optional<std::vector<int64_t>> axes;
  bool is_upsample = false;  // Upsample: scales >= 1
};

// ---------------------------------------------------------------------------------------
// Attributes

template <typename E>
E choose(const KernelInfo& info, const std::string& attribute, const std::string& value,
         std::initializer_list<std::pair<const char*, E>> choices) {
  std::string expected;
  for (const auto& [name, e] : choices) {
    if (value == name) return e;
    expected += (expected.empty() ? "" : ", ") + std::string(name);
  }
  info.fail("unknown " + attribute + " '" + value + "' (expected one of: " + expected + ")");
}

Interpolation interpolation_of(const KernelInfo& info, bool cubic_allowed) {
  const std::string mode = info.string_attribute("mode", "nearest");
  if (cubic_allowed) {
    return choose<Interpolation>(
        info, "mode", mode,
        {{"nearest", Interpolation::kNearest}, {"linear", Interpolation::kLinear}, {"cubic", Interpolation::kCubic}});
  }
  return choose<Interpolation>(info, "mode", mode,
                               {{"nearest", Interpolation::kNearest}, {"linear", Interpolation::kLinear}});
}

ResizeOptions resize_options(const KernelInfo& info) {
  ResizeOptions o;
  o.opset = info.opset();
  if (o.opset < 11) {  // Resize-10 has only `mode`; it maps coordinates like Upsample
    o.interpolation = interpolation_of(info, false);
    o.coordinates = Coordinates::kAsymmetric;
    o.rounding = Rounding::kSimple;
    return o;
  }
  o.interpolation = interpolation_of(info, true);
  std::initializer_list<std::pair<const char*, Coordinates>> modes = {
      {"half_pixel", Coordinates::kHalfPixel},
      {"pytorch_half_pixel", Coordinates::kPytorchHalfPixel},
      {"align_corners", Coordinates::kAlignCorners},
      {"asymmetric", Coordinates::kAsymmetric},
      {"tf_crop_and_resize", Coordinates::kTfCropAndResize}};
  const std::string coordinates = info.string_attribute("coordinate_transformation_mode", "half_pixel");
  if (o.opset < 13 && coordinates == "tf_half_pixel_for_nn") {
    o.coordinates = Coordinates::kTfHalfPixelForNN;
  } else if (o.opset >= 19 && coordinates == "half_pixel_symmetric") {
    o.coordinates = Coordinates::kHalfPixelSymmetric;
  } else {
    o.coordinates = choose<Coordinates>(info, "coordinate_transformation_mode", coordinates, modes);
  }
  o.rounding = choose<Rounding>(info, "nearest_mode", info.string_attribute("nearest_mode", "round_prefer_floor"),
                                {{"round_prefer_floor", Rounding::kRoundPreferFloor},
                                 {"round_prefer_ceil", Rounding::kRoundPreferCeil},
                                 {"floor", Rounding::kFloor},
                                 {"ceil", Rounding::kCeil}});
  o.cubic_a = info.float_attribute("cubic_coeff_a", -0.75f);
  o.exclude_outside = info.bool_attribute("exclude_outside", false);
  o.extrapolation = info.float_attribute("extrapolation_value", 0.0f);
  if (o.opset >= 18) {
    o.antialias = info.bool_attribute("antialias", false);
    if (info.has_attribute("axes")) o.axes = info.ints_attribute("axes");
    o.policy = choose<AspectPolicy>(info, "keep_aspect_ratio_policy",
                                    info.string_attribute("keep_aspect_ratio_policy", "stretch"),
                                    {{"stretch", AspectPolicy::kStretch},
                                     {"not_larger", AspectPolicy::kNotLarger},
                                     {"not_smaller", AspectPolicy::kNotSmaller}});
  }
  return o;
}

// ---------------------------------------------------------------------------------------
// Per-axis plans

struct AxisPlan {
  int64_t in = 1;
  int64_t out = 1;
  int64_t taps = 1;
  std::vector<int64_t> index;    // out * taps input indices, clamped into [0, in)
  std::vector<double> weight;    // out * taps
  std::vector<uint8_t> outside;  // out: 1 where tf_crop_and_resize extrapolates
  bool identity = false;         // output index x reads exactly input index x
};

struct AxisRequest {
  int64_t in = 1, out = 1;
  double scale = 1;  // output length / input length as the coordinate formulas use it
  double roi_start = 0, roi_end = 1;
};

// The input coordinate of output index `xi`, computed in F. Nearest uses float, as
// onnxruntime does: a coordinate that lands exactly on a pixel or a half in float (say
// 1.5 / 0.6f - 0.5 = 2) may miss it in double, and rounding would pick the other
// neighbour. Linear and cubic weights are continuous in the coordinate: they use double.
template <typename F>
double original_coordinate(const ResizeOptions& o, int64_t xi, const AxisRequest& a) {
  const auto x = static_cast<F>(xi);
  const auto in = static_cast<F>(a.in);
  const auto out = static_cast<F>(a.out);
  const auto scale = static_cast<F>(a.scale);
  const auto start = static_cast<F>(a.roi_start);
  const auto end = static_cast<F>(a.roi_end);
  const F half = 0.5;
  // align_corners and tf_crop_and_resize divide by the fractional output length
  // (scale * in), as ONNX's reference and backend tests do; onnxruntime uses the integer
  // length, which differs when scale * in is not a whole number.
  const F width = scale * in;
  switch (o.coordinates) {
    case Coordinates::kHalfPixel:
      return (x + half) / scale - half;
    case Coordinates::kHalfPixelSymmetric: {
      const F adjustment = out / width;
      const F offset = in / 2 * (1 - adjustment);
      return offset + (x + half) / scale - half;
    }
    case Coordinates::kPytorchHalfPixel:
      return a.out > 1 ? (x + half) / scale - half : F(0);
    case Coordinates::kAlignCorners:
      return width > 1 ? x * (in - 1) / (width - 1) : F(0);
    case Coordinates::kAsymmetric:
      return x / scale;
    case Coordinates::kTfHalfPixelForNN:
      return (x + half) / scale;
    case Coordinates::kTfCropAndResize:
      return width > 1 ? start * (in - 1) + x * (end - start) * (in - 1) / (width - 1)
                       : half * (start + end) * (in - 1);
  }
  return x;
}

int64_t nearest_index(double x, Rounding rounding, bool downsampling) {
  const double f = std::floor(x);
  if (x == f) return static_cast<int64_t>(f);
  const double fraction = x - f;
  switch (rounding) {
    case Rounding::kRoundPreferFloor:
      return static_cast<int64_t>(fraction <= 0.5 ? f : f + 1);
    case Rounding::kRoundPreferCeil:
      return static_cast<int64_t>(fraction < 0.5 ? f : f + 1);
    case Rounding::kFloor:
      return static_cast<int64_t>(f);
    case Rounding::kCeil:
      return static_cast<int64_t>(f + 1);
    case Rounding::kSimple:
      return downsampling ? static_cast<int64_t>(std::ceil(x)) : static_cast<int64_t>(x);
  }
  return static_cast<int64_t>(f);
}

double cubic_kernel(double x, double a) {
  x = std::abs(x);
  if (x <= 1) return ((a + 2) * x - (a + 3)) * x * x + 1;
  if (x < 2) return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a;
  return 0;
}

// Weights of the taps base + start, base + start + 1, ... for a point `ratio` in (0, 1]
// past `base`: tap k sits at distance (start + k - ratio) from the point. Antialiasing
// widens the filter by 1 / scale when downscaling; weights are normalized to sum 1.
std::vector<double> tap_weights(const ResizeOptions& o, double ratio, double scale, int64_t& start) {
  std::vector<double> w;
  if (o.interpolation == Interpolation::kLinear) {
    if (!o.antialias || scale >= 1) {
      start = 0;
      return {1 - ratio, ratio};
    }
    start = static_cast<int64_t>(std::floor(-1 / scale)) + 1;
    for (int64_t i = start; i < 2 - start; ++i)
      w.push_back(std::clamp(1 - std::abs((static_cast<double>(i) - ratio) * scale), 0.0, 1.0));
  } else {
    const double s = o.antialias ? std::min(scale, 1.0) : 1.0;
    start = static_cast<int64_t>(std::floor(-2 / s)) + 1;
    for (int64_t i = start; i < 2 - start; ++i)
      w.push_back(cubic_kernel(s * (static_cast<double>(i) - ratio), o.cubic_a));
  }
  const double sum = std::accumulate(w.begin(), w.end(), 0.0);
  if (sum != 0) {
    for (double& v : w) v /= sum;
  }
  return w;
}

AxisPlan plan_axis(const ResizeOptions& o, const AxisRequest& a) {
  AxisPlan p;
  p.in = a.in;
  p.out = a.out;
  p.outside.assign(static_cast<size_t>(a.out), 0);
  const bool nearest = o.interpolation == Interpolation::kNearest;
  if (!nearest) {  // the tap count depends on the scale only
    int64_t start = 0;
    p.taps = static_cast<int64_t>(tap_weights(o, 0.5, a.scale, start).size());
  }
  for (int64_t x = 0; x < a.out; ++x) {
    const double xo = nearest ? original_coordinate<float>(o, x, a) : original_coordinate<double>(o, x, a);
    const bool out_of_range =
        o.coordinates == Coordinates::kTfCropAndResize && (xo < 0 || xo > static_cast<double>(a.in - 1));
    p.outside[static_cast<size_t>(x)] = out_of_range;
    if (nearest) {
      const int64_t i = out_of_range ? 0 : nearest_index(xo, o.rounding, a.scale < 1);
      p.index.push_back(std::clamp<int64_t>(i, 0, a.in - 1));
      p.weight.push_back(1);
      continue;
    }
    // The point sits `ratio` in (0, 1] past base = ceil(xo) - 1.
    const double base = std::ceil(xo) - 1;
    const double ratio = xo - base;
    int64_t start = 0;
    std::vector<double> w = out_of_range ? std::vector<double>{1} : tap_weights(o, ratio, a.scale, start);
    w.resize(static_cast<size_t>(p.taps), 0.0);  // an extrapolated point has one tap
    std::vector<int64_t> taps(w.size());
    for (size_t k = 0; k < w.size(); ++k) taps[k] = static_cast<int64_t>(base) + start + static_cast<int64_t>(k);
    if (o.exclude_outside) {
      double sum = 0;
      for (size_t k = 0; k < w.size(); ++k) {
        if (taps[k] < 0 || taps[k] >= a.in) w[k] = 0;
        sum += w[k];
      }
      if (sum != 0) {
        for (double& v : w) v /= sum;
      }
    }
    for (size_t k = 0; k < w.size(); ++k) {
      p.index.push_back(std::clamp<int64_t>(taps[k], 0, a.in - 1));
      p.weight.push_back(w[k]);
    }
  }
  // Identity: every output x takes all its weight from input x.
  p.identity = a.in == a.out;
  for (int64_t x = 0; p.identity && x < a.out; ++x) {
    if (p.outside[static_cast<size_t>(x)]) p.identity = false;
    for (int64_t k = 0; p.identity && k < p.taps; ++k) {
      const auto t = static_cast<size_t>(x * p.taps + k);
      if (p.weight[t] != 0 && (p.index[t] != x || p.weight[t] != 1)) p.identity = false;
    }
  }
  return p;
}

// ---------------------------------------------------------------------------------------
// Output sizes from scales or sizes

std::vector<double> float_values(const Tensor& t, std::string_view what) {
  std::vector<double> values(static_cast<size_t>(t.numel()));
  dispatch<float, double, Float16, BFloat16>(t.dtype(), what, [&]<typename T>() {
    const T* p = t.data<T>();
    for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<double>(static_cast<compute_type_t<T>>(p[i]));
  });
  return values;
}

// The per-axis requests of one run. `scales`/`sizes`/`roi` list the values of `axes`.
std::vector<AxisRequest> axis_requests(const KernelContext& ctx, const ResizeOptions& o, const Shape& in,
                                       const std::vector<double>* scales, const std::vector<int64_t>* sizes,
                                       const std::vector<double>* roi) {
  const auto rank = static_cast<int64_t>(in.size());
  std::vector<int64_t> axes;
  if (o.axes) {
    axes = normalize_axes(ctx, *o.axes, rank);
  } else {
    axes.resize(in.size());
    std::iota(axes.begin(), axes.end(), 0);
  }
  const size_t n = axes.size();
  std::vector<AxisRequest> r(in.size());
  for (size_t d = 0; d < in.size(); ++d) r[d].in = r[d].out = in[d];
  if (roi && !roi->empty()) {
    if (roi->size() != 2 * n) {
      ctx.fail("roi has " + std::to_string(roi->size()) + " values, expected " + std::to_string(2 * n) +
               " (start and end for each of " + std::to_string(n) + " axes)");
    }
    for (size_t i = 0; i < n; ++i) {
      r[static_cast<size_t>(axes[i])].roi_start = (*roi)[i];
      r[static_cast<size_t>(axes[i])].roi_end = (*roi)[n + i];
    }
  }
  if (scales) {
    if (scales->size() != n) {
      ctx.fail("scales has " + std::to_string(scales->size()) + " values, expected " + std::to_string(n) +
               " (one per resized axis)");
    }
    for (size_t i = 0; i < n; ++i) {
      const double s = (*scales)[i];
      if (!(s > 0) || (o.is_upsample && s < 1)) {
        ctx.fail("scale " + std::to_string(s) + " for axis " + std::to_string(axes[i]) + " must be " +
                 (o.is_upsample ? ">= 1" : "> 0"));
      }
      AxisRequest& a = r[static_cast<size_t>(axes[i])];
      a.scale = s;
      a.out = static_cast<int64_t>(std::floor(s * static_cast<double>(a.in)));
    }
    return r;
  }
  if (sizes->size() != n) {
    ctx.fail("sizes has " + std::to_string(sizes->size()) + " values, expected " + std::to_string(n) +
             " (one per resized axis)");
  }
  for (size_t i = 0; i < n; ++i) {
    if ((*sizes)[i] < 0) ctx.fail("sizes " + shape_string(*sizes) + " has a negative entry");
    AxisRequest& a = r[static_cast<size_t>(axes[i])];
    if (a.in == 0) ctx.fail("cannot resize axis " + std::to_string(axes[i]) + " of size 0 to a given size");
    a.out = (*sizes)[i];
    a.scale = static_cast<double>(a.out) / static_cast<double>(a.in);
  }
  if (o.policy != AspectPolicy::kStretch) {
    double scale = o.policy == AspectPolicy::kNotLarger ? std::numeric_limits<double>::infinity() : 0.0;
    for (int64_t d : axes) {
      const double s = r[static_cast<size_t>(d)].scale;
      scale = o.policy == AspectPolicy::kNotLarger ? std::min(scale, s) : std::max(scale, s);
    }
    for (int64_t d : axes) {
      AxisRequest& a = r[static_cast<size_t>(d)];
      a.scale = scale;
      a.out = static_cast<int64_t>(std::floor(scale * static_cast<double>(a.in) + 0.5));
    }
  }
  return r;
}

// ---------------------------------------------------------------------------------------
// Nearest: a gather of whole elements, any type.

template <typename U>
void resize_nearest(U* out, const U* in, const std::vector<AxisPlan>& plans, U extrapolation) {
  const size_t rank = plans.size();
  Shape out_shape, in_shape;
  for (const AxisPlan& p : plans) {
    out_shape.push_back(p.out);
    in_shape.push_back(p.in);
  }
  if (rank == 0) {
    out[0] = in[0];
    return;
  }
  std::vector<int64_t> in_strides(rank);
  for (size_t d = rank, s = 1; d-- > 0;) {
    in_strides[d] = static_cast<int64_t>(s);
    s *= static_cast<size_t>(in_shape[d]);
  }
  const AxisPlan& last = plans.back();
  const int64_t inner = last.out;
  const int64_t rows = shape_size(out_shape) / std::max<int64_t>(inner, 1);
  if (inner == 0) return;
  parallel_for(rows, std::max<int64_t>(1, 16384 / inner), [&](int64_t begin, int64_t end) {
    int64_t previous_offset = -1;
    for (int64_t r = begin; r < end; ++r) {
      U* d = out + r * inner;
      int64_t rest = r, offset = 0;
      bool outside = false;
      for (size_t a = rank - 1; a-- > 0;) {
        const auto x = static_cast<size_t>(rest % plans[a].out);
        rest /= plans[a].out;
        outside |= plans[a].outside[x] != 0;
        offset += plans[a].index[x] * in_strides[a];
      }
      if (outside) {
        std::fill(d, d + inner, extrapolation);
        previous_offset = -1;
        continue;
      }
      if (offset == previous_offset) {  // upsampling repeats the row just written
        std::memcpy(d, d - inner, static_cast<size_t>(inner) * sizeof(U));
        continue;
      }
      previous_offset = offset;
      const U* s = in + offset;
      if (last.identity) {
        std::memcpy(d, s, static_cast<size_t>(inner) * sizeof(U));
        continue;
      }
      for (int64_t i = 0; i < inner; ++i)
        d[i] = last.outside[static_cast<size_t>(i)] ? extrapolation : s[last.index[static_cast<size_t>(i)]];
    }
  });
}

// ---------------------------------------------------------------------------------------
// Linear and cubic: separable passes over the resized axes.

// One pass along an axis: src is [outer, plan.in, inner], dst is [outer, plan.out, inner].
template <typename C>
void resize_pass(C* dst, const C* src, int64_t outer, int64_t inner, const AxisPlan& plan, C extrapolation) {
  const int64_t taps = plan.taps;
  const std::vector<C> weights(plan.weight.begin(), plan.weight.end());
  if (inner == 1) {  // the last axis: a short dot product per output element
    parallel_for(outer, std::max<int64_t>(1, 8192 / std::max<int64_t>(1, plan.out * taps)),
                 [&](int64_t begin, int64_t end) {
                   for (int64_t o = begin; o < end; ++o) {
                     const C* s = src + o * plan.in;
                     C* d = dst + o * plan.out;
                     const int64_t* index = plan.index.data();
                     const C* weight = weights.data();
                     if (taps == 2) {  // linear
                       for (int64_t x = 0; x < plan.out; ++x)
                         d[x] = weight[2 * x] * s[index[2 * x]] + weight[2 * x + 1] * s[index[2 * x + 1]];
                     } else {
                       for (int64_t x = 0; x < plan.out; ++x) {
                         C sum = 0;
                         for (int64_t k = 0; k < taps; ++k) sum += weight[x * taps + k] * s[index[x * taps + k]];
                         d[x] = sum;
                       }
                     }
                     for (int64_t x = 0; x < plan.out; ++x) {
                       if (plan.outside[static_cast<size_t>(x)]) d[x] = extrapolation;
                     }
                   }
                 });
    return;
  }
  // An outer axis: each output row is a weighted sum of whole input rows.
  parallel_for(outer * plan.out, std::max<int64_t>(1, 4096 / std::max<int64_t>(1, inner * taps)),
               [&](int64_t begin, int64_t end) {
                 for (int64_t w = begin; w < end; ++w) {
                   const int64_t o = w / plan.out, x = w % plan.out;
                   C* d = dst + w * inner;
                   if (plan.outside[static_cast<size_t>(x)]) {
                     std::fill(d, d + inner, extrapolation);
                     continue;
                   }
                   const C* s = src + o * plan.in * inner;
                   const int64_t* index = plan.index.data() + x * taps;
                   const C* weight = weights.data() + x * taps;
                   const C* first = s + index[0] * inner;
                   for (int64_t i = 0; i < inner; ++i) d[i] = weight[0] * first[i];
                   for (int64_t k = 1; k < taps; ++k) {
                     if (weight[k] == C(0)) continue;
                     const C wk = weight[k];
                     const C* row = s + index[k] * inner;
                     for (int64_t i = 0; i < inner; ++i) d[i] += wk * row[i];
                   }
                 }
               });
}

// float for float and the 16-bit floats, double for double and the integers.
template <typename T>
using resize_compute_t = std::conditional_t<std::is_same_v<compute_type_t<T>, float>, float, double>;

template <typename T>
T from_compute(resize_compute_t<T> v) {
  if constexpr (std::is_integral_v<T>) {  // round half to even, then saturate (numpy's saturate_cast)
    const double r = std::nearbyint(static_cast<double>(v));
    return static_cast<T>(std::clamp(r, static_cast<double>(std::numeric_limits<T>::lowest()),
                                     static_cast<double>(std::numeric_limits<T>::max())));
  } else {
    return static_cast<T>(v);
  }
}

template <typename T>
void resize_interpolated(KernelContext& ctx, const Tensor& x, Tensor& out, const std::vector<AxisPlan>& plans,
                         double extrapolation) {
  using C = resize_compute_t<T>;
  // Shrinking axes first keeps the intermediate tensors small; among equal ratios the
  // last axis (a gather, dearer per element than the row sums of the others) goes first
  // when growing and last when shrinking, so that it runs on the smaller tensor.
  std::vector<size_t> order;
  for (size_t d = 0; d < plans.size(); ++d) {
    if (!plans[d].identity) order.push_back(d);
  }
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const int64_t left = plans[a].out * plans[b].in, right = plans[b].out * plans[a].in;
    if (left != right) return left < right;
    return plans[a].out > plans[a].in ? a > b : a < b;
  });
  Shape shape = x.shape();
  Tensor current;
  const C* src = nullptr;
  if constexpr (std::is_same_v<T, C>) {
    src = x.data<T>();
  } else {
    current = ctx.allocate_scratch(dtype_of<C>(), shape);
    const T* p = x.data<T>();
    C* c = current.data<C>();
    parallel_for(x.numel(), 32768, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) c[i] = static_cast<C>(static_cast<compute_type_t<T>>(p[i]));
    });
    src = c;
  }
  for (size_t step = 0; step < order.size(); ++step) {
    const size_t axis = order[step];
    const int64_t outer = shape_size(std::span(shape).first(axis));
    const int64_t inner = shape_size(std::span(shape).subspan(axis + 1));
    shape[axis] = plans[axis].out;
    const bool last = step + 1 == order.size();
    Tensor next;
    C* dst = nullptr;
    if (last && std::is_same_v<T, C>) {
      dst = reinterpret_cast<C*>(out.raw_data());
    } else {
      next = ctx.allocate_scratch(dtype_of<C>(), shape);
      dst = next.data<C>();
    }
    resize_pass<C>(dst, src, outer, inner, plans[axis], static_cast<C>(extrapolation));
    current = std::move(next);
    src = dst;
  }
  if constexpr (!std::is_same_v<T, C>) {
    T* o = out.data<T>();
    parallel_for(out.numel(), 32768, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) o[i] = from_compute<T>(src[i]);
    });
  }
}

// ---------------------------------------------------------------------------------------
// The kernel

void resize(KernelContext& ctx, const ResizeOptions& o, const std::vector<AxisRequest>& requests) {
  const Tensor& x = ctx.input(0);
  std::vector<AxisPlan> plans;
  Shape out_shape;
  bool identity = true;
  for (const AxisRequest& a : requests) {
    if (a.in == 0 && a.out > 0) ctx.fail("cannot resize an axis of size 0 to size " + std::to_string(a.out));
    plans.push_back(plan_axis(o, a));
    out_shape.push_back(a.out);
    identity &= plans.back().identity;
  }
  if (identity) {  // nothing moves: the output is the input
    ctx.set_output(0, x);
    return;
  }
  if (o.interpolation == Interpolation::kNearest) {
    Tensor& out = ctx.allocate_output(0, x.dtype(), out_shape);
    if (out.numel() == 0) return;
    dispatch<ONNXTRAIN_ALL_TYPES>(x.dtype(), "Resize", [&]<typename T>() {
      const T extrapolation = static_cast<T>(static_cast<compute_type_t<T>>(o.extrapolation));
      resize_nearest<T>(out.data<T>(), x.data<T>(), plans, extrapolation);
    });
    return;
  }
  dispatch<ONNXTRAIN_NUMERIC_TYPES>(x.dtype(), "Resize", [&]<typename T>() {
    Tensor& out = ctx.allocate_output(0, x.dtype(), out_shape);
    if (out.numel() == 0) return;
    resize_interpolated<T>(ctx, x, out, plans, o.extrapolation);
  });
}

// An optional input that may also be given as an empty tensor.
const Tensor* present(const KernelContext& ctx, size_t i) {
  return ctx.has_input(i) && ctx.input(i).numel() > 0 ? &ctx.input(i) : nullptr;
}

const KernelRegistration kResize10{"", "Resize", 10, 10, [](const KernelInfo& info) {
                                     const ResizeOptions o = resize_options(info);
                                     return make_kernel([o](KernelContext& ctx) {
                                       const std::vector<double> scales = float_values(ctx.input(1), "scales");
                                       resize(ctx, o,
                                              axis_requests(ctx, o, ctx.input(0).shape(), &scales, nullptr, nullptr));
                                     });
                                   }};

const KernelRegistration kResize11{
    "", "Resize", 11, kLatestOpset, {.host_inputs = {1, 2, 3}}, [](const KernelInfo& info) {
      const ResizeOptions o = resize_options(info);
      return make_kernel([o](KernelContext& ctx) {
        const Tensor* scales_tensor = present(ctx, 2);
        const Tensor* sizes_tensor = present(ctx, 3);
        if (scales_tensor && sizes_tensor) ctx.fail("give either scales or sizes, not both");
        if (!scales_tensor && !sizes_tensor) ctx.fail("one of scales and sizes is required");
        std::vector<double> roi;
        if (const Tensor* r = present(ctx, 1); r && o.coordinates == Coordinates::kTfCropAndResize) {
          roi = float_values(*r, "roi");
        }
        std::vector<double> scales;
        std::vector<int64_t> sizes;
        if (scales_tensor) {
          scales = float_values(*scales_tensor, "scales");
        } else {
          if (sizes_tensor->dtype() != DType::kInt64) {
            ctx.fail("sizes must be int64, got " + std::string(dtype_name(sizes_tensor->dtype())));
          }
          sizes.assign(sizes_tensor->data<int64_t>(), sizes_tensor->data<int64_t>() + sizes_tensor->numel());
        }
        resize(ctx, o,
               axis_requests(ctx, o, ctx.input(0).shape(), scales_tensor ? &scales : nullptr,
                             scales_tensor ? nullptr : &sizes, &roi));
      });
    }};

// Upsample-7/8 take scales as an attribute, Upsample-9 as input 1.
const KernelRegistration kUpsample{
    "", "Upsample", 7, 9, [](const KernelInfo& info) {
      ResizeOptions o;
      o.opset = info.opset();
      o.interpolation = interpolation_of(info, false);
      o.coordinates = Coordinates::kAsymmetric;
      o.rounding = Rounding::kSimple;
      o.is_upsample = true;
      std::optional<std::vector<double>> attribute;
      if (info.opset() < 9) {
        const std::vector<float> s = info.floats_attribute("scales");
        attribute = std::vector<double>(s.begin(), s.end());
      }
      return make_kernel([o, attribute](KernelContext& ctx) {
        const std::vector<double> scales = attribute ? *attribute : float_values(ctx.input(1), "scales");
        resize(ctx, o, axis_requests(ctx, o, ctx.input(0).shape(), &scales, nullptr, nullptr));
      });
    }};

}  // namespace
}  // namespace onnxtrain
