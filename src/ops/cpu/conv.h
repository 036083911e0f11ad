// What the convolution kernels share (conv.cc, and the integer convolutions of qlinear.cc):
// the attributes of a Conv node and the resolved geometry of one call.
#pragma once

#include <onnxtrain/tensor.h>

#include <cstdint>
#include <vector>

#include "ops/cpu/onednn.h"
#include "ops/cpu/window.h"
#include "ops/kernel.h"

namespace onnxtrain {

struct ConvAttributes {
  window::AutoPad auto_pad = window::AutoPad::kNotSet;
  int64_t group = 1;
  std::vector<int64_t> kernel_shape, dilations, strides, pads;
  std::vector<int64_t> output_padding, output_shape;  // ConvTranspose only

  ConvAttributes(const KernelInfo& info, bool transpose) {
    auto_pad = window::parse_auto_pad(info);
    group = info.int_attribute("group", 1);
    if (group < 1) info.fail("group is " + std::to_string(group) + ", expected 1 or more");
    kernel_shape = info.ints_attribute("kernel_shape", std::vector<int64_t>{});
    dilations = info.ints_attribute("dilations", std::vector<int64_t>{});
    strides = info.ints_attribute("strides", std::vector<int64_t>{});
    pads = info.ints_attribute("pads", std::vector<int64_t>{});
    if (transpose) {
      output_padding = info.ints_attribute("output_padding", std::vector<int64_t>{});
      output_shape = info.ints_attribute("output_shape", std::vector<int64_t>{});
    }
    window::check_steps_and_pads(info, strides, dilations, pads);
  }
};

// The resolved geometry of one call: everything per spatial axis, pads possibly
// negative (ConvTranspose with an output_shape larger than the full result).
struct ConvGeometry : window::Window {
  int64_t n = 0, c = 0, m = 0, group = 1;
  Shape out_shape;
};

// Checks the shapes of X [N, C, spatial...] and W [M, C / group, kernel...] against the
// attributes and resolves the geometry of a Conv; the element types are the caller's to check.
ConvGeometry conv_geometry(KernelContext& ctx, const ConvAttributes& attrs, const Tensor& x, const Tensor& w);
// The same for a ConvTranspose: X [N, C, spatial...], W [C, M / group, kernel...].
ConvGeometry conv_transpose_geometry(KernelContext& ctx, const ConvAttributes& attrs, const Tensor& x, const Tensor& w);

// Y = Conv(X, W) + bias, or ConvTranspose's with `transpose`, by direct loops (conv_direct.cc);
// T is float or double.
template <typename T>
void direct_conv(const ConvGeometry& g, const T* x, const T* w, const T* bias, T* y, bool transpose);

onednn::memory::dims to_dims(const std::vector<int64_t>& v);
// Weights as oneDNN sees them, over ONNX's bytes (see conv.cc).
onednn::memory::desc weights_desc(const ConvGeometry& g, onednn::memory::data_type type, bool transpose);
// oneDNN wants dilation as the number of skipped elements (ONNX dilation - 1), and does
// not take negative pads (the caller clamps those and crops).
onednn::memory::dims dilation_dims(const ConvGeometry& g);

}  // namespace onnxtrain
