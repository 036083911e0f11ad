// DeformConv (2-D): a convolution whose every kernel tap reads X at its usual place plus a
// learned (dy, dx) offset, bilinearly interpolated (zero outside the image), optionally
// scaled by a mask; offsets and mask are per offset group of input channels.
//
// Each (sample, group of input channels) first gathers the columns
// [C/group * kH * kW, oH * oW] of sampled, masked values; the output channels of the group
// are then W_g [M/group, C/group * kH * kW] times the columns, plus the bias.
#include <cmath>
#include <string>
#include <vector>

#include "core/dispatch.h"
#include "core/parallel.h"
#include "ops/kernel_registry.h"

namespace onnxtrain {
namespace {

struct DeformGeometry {
  int64_t n, channels, height, width, out_channels, group, offset_group;
  int64_t kh, kw, oh, ow, stride_h, stride_w, dilation_h, dilation_w, pad_top, pad_left;
};

// X's plane at the real position (y, x): bilinear over the four pixels around it, each
// outside the image counting as 0.
template <typename A, typename T>
A sample(const T* plane, int64_t h, int64_t w, A y, A x) {
  if (!(y > A(-1) && y < A(h) && x > A(-1) && x < A(w))) return A(0);
  using C = compute_type_t<T>;
  const A y0 = std::floor(y), x0 = std::floor(x);
  const int64_t iy = static_cast<int64_t>(y0), ix = static_cast<int64_t>(x0);
  const A ly = y - y0, lx = x - x0;
  A sum = 0;
  for (int64_t dy = 0; dy < 2; ++dy) {
    for (int64_t dx = 0; dx < 2; ++dx) {
      const int64_t py = iy + dy, px = ix + dx;
      if (py < 0 || py >= h || px < 0 || px >= w) continue;
      const A weight = (dy ? ly : 1 - ly) * (dx ? lx : 1 - lx);
      sum += weight * static_cast<A>(static_cast<C>(plane[py * w + px]));
    }
  }
  return sum;
}

template <typename T>
void deform_conv(const Tensor& x, const Tensor& weights, const Tensor& offset, const Tensor* bias, const Tensor* mask,
                 const DeformGeometry& g, Tensor& y) {
  using C = compute_type_t<T>;
  using A = std::conditional_t<std::is_same_v<T, double>, double, float>;
  const int64_t taps = g.kh * g.kw, points = g.oh * g.ow;
  const int64_t in_per_group = g.channels / g.group, out_per_group = g.out_channels / g.group;
  const int64_t in_per_offset_group = g.channels / g.offset_group;
  const T* px = x.data<T>();
  const T* pw = weights.data<T>();
  const T* po = offset.data<T>();
  const T* pm = mask ? mask->data<T>() : nullptr;
  const T* pb = bias ? bias->data<T>() : nullptr;
  T* py = y.data<T>();
  auto read = [](const T* p, int64_t i) { return static_cast<A>(static_cast<C>(p[i])); };
  parallel_for(g.n * g.group, 1, [&](int64_t begin, int64_t end) {
    std::vector<A> columns(static_cast<size_t>(in_per_group * taps * points));
    for (int64_t ng = begin; ng < end; ++ng) {
      const int64_t b = ng / g.group, grp = ng % g.group;
      for (int64_t ci = 0; ci < in_per_group; ++ci) {
        const int64_t c = grp * in_per_group + ci, og = c / in_per_offset_group;
        const T* plane = px + (b * g.channels + c) * g.height * g.width;
        for (int64_t t = 0; t < taps; ++t) {
          const int64_t ki = t / g.kw, kj = t % g.kw;
          // offset [N, offset_group * taps * 2, oH, oW]: (dy, dx) of tap t; mask [N, offset_group * taps, oH, oW].
          const int64_t dy_at = ((b * g.offset_group + og) * taps + t) * 2 * points;
          const int64_t mask_at = ((b * g.offset_group + og) * taps + t) * points;
          A* column = columns.data() + (ci * taps + t) * points;
          for (int64_t p = 0; p < points; ++p) {
            const int64_t i = p / g.ow, j = p % g.ow;
            const A sy = A(i * g.stride_h - g.pad_top + ki * g.dilation_h) + read(po, dy_at + p);
            const A sx = A(j * g.stride_w - g.pad_left + kj * g.dilation_w) + read(po, dy_at + points + p);
            const A value = sample<A>(plane, g.height, g.width, sy, sx);
            column[p] = pm ? value * read(pm, mask_at + p) : value;
          }
        }
      }
      std::vector<A> out(static_cast<size_t>(points));
      for (int64_t mo = 0; mo < out_per_group; ++mo) {
        const int64_t m = grp * out_per_group + mo;
        std::fill(out.begin(), out.end(), pb ? read(pb, m) : A(0));
        const T* wm = pw + m * in_per_group * taps;
        for (int64_t k = 0; k < in_per_group * taps; ++k) {
          const A wk = read(wm, k);
          const A* column = columns.data() + k * points;
          for (int64_t p = 0; p < points; ++p) out[static_cast<size_t>(p)] += wk * column[p];
        }
        T* ym = py + (b * g.out_channels + m) * points;
        for (int64_t p = 0; p < points; ++p) ym[p] = static_cast<T>(static_cast<C>(out[static_cast<size_t>(p)]));
      }
    }
  });
}

struct DeformAttributes {
  int64_t group = 1, offset_group = 1;
  std::vector<int64_t> kernel_shape, dilations, strides, pads;
};

DeformGeometry geometry(KernelContext& ctx, const DeformAttributes& a) {
  const Tensor& x = ctx.input(0);
  const Tensor& w = ctx.input(1);
  const Tensor& offset = ctx.input(2);
  if (x.rank() != 4) ctx.fail("X must be [N, C, H, W] (2-D DeformConv), got " + shape_string(x.shape()));
  if (w.rank() != 4) ctx.fail("W must be [M, C/group, kH, kW], got " + shape_string(w.shape()));
  DeformGeometry g{};
  g.n = x.dim(0), g.channels = x.dim(1), g.height = x.dim(2), g.width = x.dim(3);
  g.out_channels = w.dim(0), g.group = a.group, g.offset_group = a.offset_group;
  g.kh = w.dim(2), g.kw = w.dim(3);
  if (!a.kernel_shape.empty() &&
      (a.kernel_shape.size() != 2 || a.kernel_shape[0] != g.kh || a.kernel_shape[1] != g.kw)) {
    ctx.fail("kernel_shape differs from W's spatial sizes " + shape_string(w.shape()));
  }
  if (g.channels != w.dim(1) * g.group || g.out_channels % g.group != 0 || g.channels % g.offset_group != 0) {
    ctx.fail("X " + shape_string(x.shape()) + " and W " + shape_string(w.shape()) + " do not fit group " +
             std::to_string(g.group) + " and offset_group " + std::to_string(g.offset_group));
  }
  auto pick = [](const std::vector<int64_t>& v, size_t i, int64_t fallback) { return v.empty() ? fallback : v[i]; };
  if ((!a.strides.empty() && a.strides.size() != 2) || (!a.dilations.empty() && a.dilations.size() != 2) ||
      (!a.pads.empty() && a.pads.size() != 4)) {
    ctx.fail("strides and dilations must hold 2 values and pads 4");
  }
  g.stride_h = pick(a.strides, 0, 1), g.stride_w = pick(a.strides, 1, 1);
  g.dilation_h = pick(a.dilations, 0, 1), g.dilation_w = pick(a.dilations, 1, 1);
  g.pad_top = pick(a.pads, 0, 0), g.pad_left = pick(a.pads, 1, 0);
  if (g.stride_h < 1 || g.stride_w < 1 || g.dilation_h < 1 || g.dilation_w < 1) {
    ctx.fail("strides and dilations must be 1 or more");
  }
  g.oh = (g.height + g.pad_top + pick(a.pads, 2, 0) - (g.kh - 1) * g.dilation_h - 1) / g.stride_h + 1;
  g.ow = (g.width + g.pad_left + pick(a.pads, 3, 0) - (g.kw - 1) * g.dilation_w - 1) / g.stride_w + 1;
  const Shape expected_offset{g.n, g.offset_group * g.kh * g.kw * 2, g.oh, g.ow};
  if (offset.shape() != expected_offset) {
    ctx.fail("offset must be " + shape_string(expected_offset) + ", got " + shape_string(offset.shape()));
  }
  if (ctx.has_input(4)) {
    const Shape expected_mask{g.n, g.offset_group * g.kh * g.kw, g.oh, g.ow};
    if (ctx.input(4).shape() != expected_mask) {
      ctx.fail("mask must be " + shape_string(expected_mask) + ", got " + shape_string(ctx.input(4).shape()));
    }
  }
  if (ctx.has_input(3) && ctx.input(3).shape() != Shape{g.out_channels}) {
    ctx.fail("B must be [" + std::to_string(g.out_channels) + "], got " + shape_string(ctx.input(3).shape()));
  }
  for (size_t i = 1; i < 5; ++i) {
    if (ctx.has_input(i) && ctx.input(i).dtype() != x.dtype()) ctx.fail("every input must share X's element type");
  }
  return g;
}

const KernelRegistration kDeformConv{
    "", "DeformConv", 19, kLatestOpset, [](const KernelInfo& info) {
      DeformAttributes a;
      a.group = info.int_attribute("group", 1);
      a.offset_group = info.int_attribute("offset_group", 1);
      if (a.group < 1 || a.offset_group < 1) info.fail("group and offset_group must be 1 or more");
      a.kernel_shape = info.ints_attribute("kernel_shape", std::vector<int64_t>{});
      a.dilations = info.ints_attribute("dilations", std::vector<int64_t>{});
      a.strides = info.ints_attribute("strides", std::vector<int64_t>{});
      a.pads = info.ints_attribute("pads", std::vector<int64_t>{});
      return make_kernel([a](KernelContext& ctx) {
        const DeformGeometry g = geometry(ctx, a);
        Tensor& y = ctx.allocate_output(0, ctx.input(0).dtype(),
                                        {g.n, g.out_channels, std::max<int64_t>(g.oh, 0), std::max<int64_t>(g.ow, 0)});
        if (y.numel() == 0) return;
        const Tensor* bias = ctx.has_input(3) ? &ctx.input(3) : nullptr;
        const Tensor* mask = ctx.has_input(4) ? &ctx.input(4) : nullptr;
        dispatch<float, double, Float16, BFloat16>(y.dtype(), "DeformConv", [&]<typename T>() {
          deform_conv<T>(ctx.input(0), ctx.input(1), ctx.input(2), bias, mask, g, y);
        });
      });
    }};

}  // namespace
}  // namespace onnxtrain
