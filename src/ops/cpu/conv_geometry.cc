// The geometry of one call of a convolution (Conv, ConvTranspose, and the integer
// convolutions of qlinear_conv.cc): the checks of X and W against the attributes, the output
// size and pads per spatial axis, and the weights as oneDNN sees them.
#include <string>
#include <vector>

#include "ops/cpu/conv.h"

namespace onnxtrain {
namespace {

using onednn::memory;
using window::AutoPad;
using window::per_axis;

int64_t floor_div(int64_t a, int64_t b) {
  return a / b - ((a % b != 0) && ((a < 0) != (b < 0)));
}

// Checks X and W and fills the parts of the geometry common to Conv and ConvTranspose.
ConvGeometry common_geometry(KernelContext& ctx, const ConvAttributes& attrs, const Tensor& x, const Tensor& w,
                             bool transpose) {
  if (x.rank() < 3)
    ctx.fail("X must be [N, C, spatial...] with 1 or more spatial axes, got " + shape_string(x.shape()));
  if (w.rank() != x.rank()) {
    ctx.fail("W " + shape_string(w.shape()) + " must have the rank of X " + shape_string(x.shape()));
  }
  ConvGeometry g;
  const size_t axes = x.rank() - 2;
  if (axes > 3)
    ctx.fail("X " + shape_string(x.shape()) + " has " + std::to_string(axes) +
             " spatial axes; onnxtrain convolves over 1 to 3");
  g.n = x.dim(0);
  g.c = x.dim(1);
  g.group = attrs.group;
  if (g.c % g.group != 0) {
    ctx.fail("X has " + std::to_string(g.c) + " channels, not a multiple of group " + std::to_string(g.group));
  }
  if (transpose) {
    if (w.dim(0) != g.c) {
      ctx.fail("W " + shape_string(w.shape()) + " must have X's " + std::to_string(g.c) +
               " input channels in its first dimension");
    }
    g.m = w.dim(1) * g.group;
  } else {
    if (w.dim(1) * g.group != g.c) {
      ctx.fail("W " + shape_string(w.shape()) + " expects " + std::to_string(w.dim(1) * g.group) +
               " input channels (W[1] * group " + std::to_string(g.group) + "), X " + shape_string(x.shape()) +
               " has " + std::to_string(g.c));
    }
    g.m = w.dim(0);
    if (g.m % g.group != 0) {
      ctx.fail("W has " + std::to_string(g.m) + " output channels, not a multiple of group " + std::to_string(g.group));
    }
  }
  g.in.assign(x.shape().begin() + 2, x.shape().end());
  g.kernel.assign(w.shape().begin() + 2, w.shape().end());
  if (!attrs.kernel_shape.empty() && attrs.kernel_shape != g.kernel) {
    ctx.fail("kernel_shape " + shape_string(attrs.kernel_shape) + " does not match W " + shape_string(w.shape()));
  }
  g.strides = per_axis(ctx, attrs.strides, axes, 1, "strides");
  g.dilations = per_axis(ctx, attrs.dilations, axes, 1, "dilations");
  if (!attrs.pads.empty() && attrs.pads.size() != 2 * axes) {
    ctx.fail("pads " + shape_string(attrs.pads) + " has " + std::to_string(attrs.pads.size()) + " values, expected " +
             std::to_string(2 * axes) + " (begin and end per spatial axis)");
  }
  g.pad_begin.assign(axes, 0);
  g.pad_end.assign(axes, 0);
  if (!attrs.pads.empty() && attrs.auto_pad == AutoPad::kNotSet) {
    for (size_t i = 0; i < axes; ++i) {
      g.pad_begin[i] = attrs.pads[i];
      g.pad_end[i] = attrs.pads[axes + i];
    }
  }
  return g;
}

}  // namespace

ConvGeometry conv_geometry(KernelContext& ctx, const ConvAttributes& attrs, const Tensor& x, const Tensor& w) {
  ConvGeometry g = common_geometry(ctx, attrs, x, w, false);
  g.out.resize(g.spatial());
  for (size_t i = 0; i < g.spatial(); ++i) {
    const int64_t extent = (g.kernel[i] - 1) * g.dilations[i] + 1;
    const int64_t s = g.strides[i];
    switch (attrs.auto_pad) {
      case AutoPad::kSameUpper:
      case AutoPad::kSameLower: {
        g.out[i] = (g.in[i] + s - 1) / s;
        const int64_t total = std::max<int64_t>(0, (g.out[i] - 1) * s + extent - g.in[i]);
        const int64_t small = total / 2;
        g.pad_begin[i] = attrs.auto_pad == AutoPad::kSameUpper ? small : total - small;
        g.pad_end[i] = total - g.pad_begin[i];
        break;
      }
      case AutoPad::kValid:
      case AutoPad::kNotSet: {
        const int64_t span = g.in[i] + g.pad_begin[i] + g.pad_end[i] - extent;
        g.out[i] = span < 0 ? 0 : span / s + 1;
        if (span < 0 && g.in[i] > 0) {
          ctx.fail("the dilated kernel (extent " + std::to_string(extent) + ") is larger than the padded input (" +
                   std::to_string(g.in[i] + g.pad_begin[i] + g.pad_end[i]) + ") on spatial axis " + std::to_string(i) +
                   " of X " + shape_string(x.shape()));
        }
        break;
      }
    }
  }
  g.out_shape = {g.n, g.m};
  g.out_shape.insert(g.out_shape.end(), g.out.begin(), g.out.end());
  return g;
}

ConvGeometry conv_transpose_geometry(KernelContext& ctx, const ConvAttributes& attrs, const Tensor& x,
                                     const Tensor& w) {
  ConvGeometry g = common_geometry(ctx, attrs, x, w, true);
  const size_t axes = g.spatial();
  const std::vector<int64_t> output_padding = per_axis(ctx, attrs.output_padding, axes, 0, "output_padding");
  std::vector<int64_t> target;  // the requested output size per axis, when one is given
  if (!attrs.output_shape.empty()) {
    if (attrs.output_shape.size() != axes && attrs.output_shape.size() != axes + 2) {
      ctx.fail("output_shape " + shape_string(attrs.output_shape) + " has " +
               std::to_string(attrs.output_shape.size()) + " values, expected " + std::to_string(axes));
    }
    target.assign(attrs.output_shape.end() - static_cast<int64_t>(axes), attrs.output_shape.end());
  } else if (attrs.auto_pad == AutoPad::kSameUpper || attrs.auto_pad == AutoPad::kSameLower) {
    target.resize(axes);
    for (size_t i = 0; i < axes; ++i) target[i] = g.in[i] * g.strides[i];
  }
  g.out.resize(axes);
  for (size_t i = 0; i < axes; ++i) {
    if (output_padding[i] < 0) ctx.fail("output_padding " + shape_string(output_padding) + " must not be negative");
    const int64_t extent = (g.kernel[i] - 1) * g.dilations[i] + 1;
    const int64_t full = g.strides[i] * (g.in[i] - 1) + output_padding[i] + extent;
    if (!target.empty()) {
      // The spec: pads follow from the requested size; an odd total puts the extra at
      // the end, except for SAME_UPPER. A negative total widens the result.
      const int64_t total = full - target[i];
      const int64_t half = floor_div(total, 2);
      if (attrs.auto_pad == AutoPad::kSameUpper) {
        g.pad_begin[i] = half;
        g.pad_end[i] = total - half;
      } else {
        g.pad_begin[i] = total - half;
        g.pad_end[i] = half;
      }
      g.out[i] = target[i];
    } else {
      g.out[i] = full - g.pad_begin[i] - g.pad_end[i];
    }
    if (g.out[i] < 0) {
      ctx.fail("pads " + shape_string(attrs.pads) + " are larger than the output (" + std::to_string(full) +
               ") on spatial axis " + std::to_string(i));
    }
    // output_padding extends the end; it shows as a smaller end pad.
    g.pad_end[i] -= output_padding[i];
  }
  g.out_shape = {g.n, g.m};
  g.out_shape.insert(g.out_shape.end(), g.out.begin(), g.out.end());
  return g;
}

memory::dims to_dims(const std::vector<int64_t>& v) {
  return memory::dims(v.begin(), v.end());
}

// Weights as oneDNN sees them, over ONNX's bytes. Conv W is [M, C/g, k...] and oneDNN's
// [g, M/g, C/g, k...] is the same memory. ConvTranspose W is [C, M/g, k...] while oneDNN's
// deconvolution wants [g, M/g, C/g, k...]: the same bytes read with swapped strides.
memory::desc weights_desc(const ConvGeometry& g, memory::data_type type, bool transpose) {
  const int64_t k = shape_size(g.kernel);
  const int64_t in_per_group = g.c / g.group, out_per_group = g.m / g.group;
  memory::dims dims = {out_per_group, in_per_group};
  memory::dims strides = transpose ? memory::dims{k, out_per_group * k} : memory::dims{in_per_group * k, k};
  if (g.group > 1) {
    dims.insert(dims.begin(), g.group);
    strides.insert(strides.begin(), in_per_group * out_per_group * k);
  }
  const memory::dims kernel_strides = onednn::plain_strides(to_dims(g.kernel));
  dims.insert(dims.end(), g.kernel.begin(), g.kernel.end());
  strides.insert(strides.end(), kernel_strides.begin(), kernel_strides.end());
  return memory::desc(dims, type, strides);
}

memory::dims dilation_dims(const ConvGeometry& g) {
  memory::dims d;
  for (int64_t v : g.dilations) d.push_back(v - 1);
  return d;
}

}  // namespace onnxtrain
