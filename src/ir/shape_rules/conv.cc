// Shapes of the convolutions (src/ops/cpu/conv.cc) and the window arithmetic the pools share.
#include "ir/shape_rules.h"

namespace onnxtrain::ir {

SymbolicShape windowed_shape(const ShapeContext& c, const SymbolicShape& x, const WindowShape& window) {
  const size_t spatial = x.size() - 2;
  const auto strides = c.ints_attribute(window.prefix + "strides").value_or(std::vector<int64_t>(spatial, 1));
  const auto dilations = c.ints_attribute(window.prefix + "dilations").value_or(std::vector<int64_t>(spatial, 1));
  const auto pads = c.ints_attribute(window.prefix + "pads").value_or(std::vector<int64_t>(2 * spatial, 0));
  // A window with a prefix (the fused MaxPool) has explicit pads and floor rounding.
  const bool own = window.prefix.empty();
  const auto output_padding =
      (own ? c.ints_attribute("output_padding") : std::nullopt).value_or(std::vector<int64_t>(spatial, 0));
  const std::string auto_pad = (own ? c.string_attribute("auto_pad") : std::nullopt).value_or("NOTSET");
  const bool ceil_mode = (own ? c.int_attribute("ceil_mode") : std::nullopt).value_or(0);
  const auto output_shape = window.transposed ? c.ints_attribute("output_shape") : std::nullopt;
  const bool sizes_ok = window.kernel.size() == spatial && strides.size() == spatial && dilations.size() == spatial &&
                        pads.size() == 2 * spatial && output_padding.size() == spatial;
  SymbolicShape out{x[0], window.channels};
  for (size_t i = 0; i < spatial; ++i) {
    const Dim& in = x[i + 2];
    if (!in.value || !sizes_ok || window.kernel[i] < 0 || strides[i] < 1) {
      out.push_back(Dim{});
      continue;
    }
    const int64_t effective = (window.kernel[i] - 1) * dilations[i] + 1;
    const bool same = auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER";
    if (window.transposed) {
      if (output_shape && output_shape->size() == spatial) {
        out.push_back(known((*output_shape)[i]));
      } else if (same) {
        out.push_back(known(*in.value * strides[i]));
      } else {
        out.push_back(
            known(strides[i] * (*in.value - 1) + output_padding[i] + effective - pads[i] - pads[i + spatial]));
      }
    } else if (same) {
      out.push_back(known((*in.value + strides[i] - 1) / strides[i]));
    } else {
      const int64_t pad_begin = auto_pad == "VALID" ? 0 : pads[i];
      const int64_t padded = *in.value + (auto_pad == "VALID" ? 0 : pads[i] + pads[i + spatial]) - effective;
      if (padded < 0) {
        out.push_back(Dim{});
        continue;
      }
      int64_t size = (ceil_mode ? padded + strides[i] - 1 : padded) / strides[i] + 1;
      // With ceil rounding, a last window that would start in the end padding is dropped.
      if (ceil_mode && (size - 1) * strides[i] >= *in.value + pad_begin) --size;
      out.push_back(known(size));
    }
  }
  return out;
}

std::optional<SymbolicShape> convolution_shape(const ShapeContext& c, size_t weight_input, bool transposed) {
  const SymbolicShape* x = c.shape(0);
  const SymbolicShape* w = c.shape(weight_input);
  if (!x || x->size() < 3) return std::nullopt;
  WindowShape window{c.ints_attribute("kernel_shape").value_or(std::vector<int64_t>{}), Dim{}, transposed, ""};
  if (w && w->size() == x->size()) {
    if (window.kernel.empty()) {
      for (size_t i = 2; i < w->size(); ++i) window.kernel.push_back((*w)[i].value.value_or(-1));
    }
    const int64_t group = c.int_attribute("group").value_or(1);
    window.channels = transposed ? ((*w)[1].value ? known(*(*w)[1].value * group) : Dim{}) : (*w)[0];
  }
  return windowed_shape(c, *x, window);
}

namespace {

void convolution(ShapeContext& c, bool transposed) {
  c.set(0, c.dtype(0), convolution_shape(c, 1, transposed));
}

void conv(ShapeContext& c) {
  convolution(c, false);
}
void conv_transpose(ShapeContext& c) {
  convolution(c, true);
}

// org.onnxtrain::FusedConv: a Conv, maybe with a MaxPool after it (pool_kernel_shape,
// pool_strides, pool_pads; floor rounding).
void fused_conv(ShapeContext& c) {
  convolution(c, false);
  const auto pool_kernel = c.ints_attribute("pool_kernel_shape");
  const auto& conv_out = c.outputs()[0].shape;
  if (!pool_kernel || !conv_out) return;
  const WindowShape window{*pool_kernel, (*conv_out)[1], false, "pool_"};
  c.set(0, c.dtype(0), windowed_shape(c, *conv_out, window));
}

const ShapeRuleRegistration kConvShapes{{{"Conv", conv}, {"ConvTranspose", conv_transpose}}};
const ShapeRuleRegistration kFusedConvShapes{{{"FusedConv", fused_conv}}, "org.onnxtrain"};

}  // namespace
}  // namespace onnxtrain::ir
