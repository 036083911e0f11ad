// Gradient rules of convolutions and pooling.
#include <limits>

#include "autodiff/gradient_context.h"
#include "ir/functions.h"

namespace onnxtrain::autodiff {
namespace {

// Y = Conv(X, W, B) with explicit pads, strides, dilations and group (the rule fills the
// defaults in). Works for any number of spatial axes, all sizes read at run time.
//
// dX: the transposed convolution of dY with W covers the padded input up to the last
// position a window touched; it is padded with zeros to the padded input's extent and the
// input's window [pad_begin, pad_begin + size) is cut out.
//
// dW: a correlation of X with dY, computed as a Conv whose batch is X's channels
// ([cin/G, G*N, *S]) and whose kernels are dY's channels ([G*cout/G, N, *So]), with strides
// and dilations swapped; its output [cin/G, cout, *K'] (K' >= K) is cut to K and
// transposed to W's layout.
const FunctionRegistration kConvGrad{R"(
ConvGrad <pads, strides, dilations, group> (dY, X, W) => (dX, dW, dB) {
  one = Constant <value_int = 1> ()
  two = Constant <value_int = 2> ()
  zero_1d = Constant <value = int64[1] {0}> ()
  one_1d = Constant <value = int64[1] {1}> ()
  two_1d = Constant <value = int64[1] {2}> ()
  minus_one_1d = Constant <value = int64[1] {-1}> ()
  end = Constant <value = int64[1] {9223372036854775807}> ()
  pads = Constant <value_ints: ints = @pads> ()
  group = Constant <value_int: int = @group> ()
  group_1d = Reshape (group, one_1d)
  x_shape = Shape (X)
  y_shape = Shape (dY)
  w_shape = Shape (W)
  rank = Size (x_shape)
  rank_1d = Shape (x_shape)
  spatial = Sub (rank, two)
  spatial_1d = Reshape (spatial, one_1d)
  spatial_axes = Range (two, rank, one)
  x_spatial = Slice (x_shape, two_1d, end)
  y_spatial = Slice (y_shape, two_1d, end)
  k_spatial = Slice (w_shape, two_1d, end)
  pads_begin = Slice (pads, zero_1d, spatial_1d)
  full = ConvTranspose <strides: ints = @strides, dilations: ints = @dilations, group: int = @group> (dY, W)
  full_shape = Shape (full)
  full_spatial = Slice (full_shape, two_1d, end)
  stop = Add (pads_begin, x_spatial)
  short = Sub (stop, full_spatial)
  missing = Max (short, zero_1d)
  zeros_rank = ConstantOfShape <value = int64[1] {0}> (rank_1d)
  pads_full = Concat <axis = 0> (zeros_rank, zero_1d, zero_1d, missing)
  padded = Pad (full, pads_full)
  dX = Slice (padded, pads_begin, stop, spatial_axes)
  n_1d = Slice (x_shape, zero_1d, one_1d)
  cin_1d = Slice (x_shape, one_1d, two_1d)
  cout_1d = Slice (y_shape, one_1d, two_1d)
  cin_group = Div (cin_1d, group_1d)
  cout_group = Div (cout_1d, group_1d)
  x4_shape = Concat <axis = 0> (n_1d, group_1d, cin_group, minus_one_1d)
  x4 = Reshape (X, x4_shape)
  x4_t = Transpose <perm = [2, 1, 0, 3]> (x4)
  group_n = Mul (group_1d, n_1d)
  x_batch_shape = Concat <axis = 0> (cin_group, group_n, x_spatial)
  x_batch = Reshape (x4_t, x_batch_shape)
  y4_shape = Concat <axis = 0> (n_1d, group_1d, cout_group, minus_one_1d)
  y4 = Reshape (dY, y4_shape)
  y4_t = Transpose <perm = [1, 2, 0, 3]> (y4)
  y_kernel_shape = Concat <axis = 0> (cout_1d, n_1d, y_spatial)
  y_kernel = Reshape (y4_t, y_kernel_shape)
  correlation = Conv <strides: ints = @dilations, dilations: ints = @strides, pads: ints = @pads, group: int = @group> (x_batch, y_kernel)
  zeros_spatial = ConstantOfShape <value = int64[1] {0}> (spatial_1d)
  cut = Slice (correlation, zeros_spatial, k_spatial, spatial_axes)
  cut3_shape = Concat <axis = 0> (cin_group, cout_1d, minus_one_1d)
  cut3 = Reshape (cut, cut3_shape)
  cut3_t = Transpose <perm = [1, 0, 2]> (cut3)
  dW = Reshape (cut3_t, w_shape)
  batch_spatial_axes = Concat <axis = 0> (zero_1d, spatial_axes)
  dB = ReduceSum <keepdims = 0> (dY, batch_spatial_axes)
}
)"};

// Explicit pads, strides and dilations for a node with `spatial` spatial axes.
struct ConvGeometry {
  std::vector<int64_t> pads, strides, dilations;
};

size_t spatial_rank(GradientContext& g) {
  if (g.has_attribute("kernel_shape")) return g.attr_ints("kernel_shape").size();
  for (const char* name : {"strides", "dilations"}) {
    if (g.has_attribute(name)) return g.attr_ints(name).size();
  }
  if (g.has_attribute("pads")) return g.attr_ints("pads").size() / 2;
  for (size_t i : {size_t{1}, size_t{0}}) {
    if (g.has_input(i)) {
      if (auto r = g.rank(g.input(i)); r && *r >= 2) return *r - 2;
    }
  }
  g.fail("cannot tell the number of spatial axes (no kernel_shape, strides, pads or known ranks)");
}

ConvGeometry geometry(GradientContext& g) {
  const std::string auto_pad = g.attr_string("auto_pad", "NOTSET");
  if (auto_pad != "NOTSET" && auto_pad != "VALID") {
    g.fail("the gradient with auto_pad " + auto_pad + " is not implemented; export with explicit pads");
  }
  const size_t n = spatial_rank(g);
  ConvGeometry geometry;
  geometry.pads =
      auto_pad == "VALID" ? std::vector<int64_t>(2 * n, 0) : g.attr_ints("pads", std::vector<int64_t>(2 * n, 0));
  geometry.strides = g.attr_ints("strides", std::vector<int64_t>(n, 1));
  geometry.dilations = g.attr_ints("dilations", std::vector<int64_t>(n, 1));
  return geometry;
}

std::vector<ir::Attribute> conv_attributes(const ConvGeometry& c, int64_t group) {
  return {attr("pads", c.pads), attr("strides", c.strides), attr("dilations", c.dilations), attr("group", group)};
}

void conv(GradientContext& g) {
  const std::vector<bool> wanted = {g.needs_grad(0), g.needs_grad(1), g.needs_grad(2)};
  const auto grads = g.call_n("ConvGrad", {g.grad_of_output(0), g.input(0), g.input(1)},
                              conv_attributes(geometry(g), g.attr_int("group", 1)), 3, wanted);
  for (size_t i = 0; i < 3; ++i) g.set_input_grad(i, grads[i]);
}

// ConvTranspose is the adjoint of Conv: dX = Conv(dY, W), and dW is ConvGrad's dW with the
// roles of input and output gradient exchanged.
void conv_transpose(GradientContext& g) {
  if (g.has_attribute("output_shape")) g.fail("the gradient with output_shape is not implemented; use pads");
  const ConvGeometry c = geometry(g);
  const int64_t group = g.attr_int("group", 1);
  const std::string dy = g.grad_of_output(0);
  if (g.needs_grad(0)) g.set_input_grad(0, g.emit("Conv", {dy, g.input(1)}, conv_attributes(c, group)));
  if (g.needs_grad(1)) {
    const auto grads =
        g.call_n("ConvGrad", {g.input(0), dy, g.input(1)}, conv_attributes(c, group), 3, {false, true, false});
    g.set_input_grad(1, grads[1]);
  }
  if (g.needs_grad(2)) {
    const std::string rank = g.rank_of(dy);
    const std::string axes =
        g.emit("Concat", {g.ints({0}), g.emit("Range", {g.int_scalar(2), rank, g.int_scalar(1)})}, {attr("axis", 0)});
    g.set_input_grad(2, g.emit("ReduceSum", {dy, axes}, {attr("keepdims", 0)}));
  }
}

// MaxPool: dY is added at the positions Indices names (flat over the whole input).
const FunctionRegistration kMaxPoolGrad{R"(
MaxPoolGrad (dY, indices, shape) => (dX) {
  flat = Constant <value = int64[1] {-1}> ()
  flat_dY = Reshape (dY, flat)
  flat_indices = Reshape (indices, flat)
  zeros_f = ConstantOfShape (shape)
  zeros_shaped = CastLike (zeros_f, dY)
  zeros = Reshape (zeros_shaped, flat)
  scattered = ScatterElements <axis = 0, reduction = "add"> (zeros, flat_indices, flat_dY)
  dX = Reshape (scattered, shape)
}
)",
                                        16};

void max_pool(GradientContext& g) {
  if (g.attr_int("storage_order", 0) != 0) g.fail("the gradient with storage_order=1 is not implemented");
  const std::string dy = g.grad_of_output(0);
  if (dy.empty()) return;
  const std::string indices = g.require_output(1, "indices");
  g.set_input_grad(0, g.call("MaxPoolGrad", {dy, indices, g.shape_of(g.input(0))}));
}

// AveragePool: each output's gradient, divided by the number of elements its window
// averaged, is spread over the window by a transposed convolution with a kernel of ones
// (one channel, the batch and channel axes folded into one). The counts come from a
// convolution of ones over the input padded with ones (count_include_pad) or zeros, and
// extended at the end so that ceil_mode windows are counted too.
const FunctionRegistration kAveragePoolGrad{R"(
AveragePoolGrad <kernel_shape, pads, strides, dilations, count_include_pad> (dY, shape) => (dX) {
  one = Constant <value_int = 1> ()
  two = Constant <value_int = 2> ()
  zero_1d = Constant <value = int64[1] {0}> ()
  one_1d = Constant <value = int64[1] {1}> ()
  two_1d = Constant <value = int64[1] {2}> ()
  minus_one_1d = Constant <value = int64[1] {-1}> ()
  end = Constant <value = int64[1] {9223372036854775807}> ()
  ones_11 = Constant <value = int64[2] {1, 1}> ()
  kernel = Constant <value_ints: ints = @kernel_shape> ()
  pads = Constant <value_ints: ints = @pads> ()
  strides = Constant <value_ints: ints = @strides> ()
  include_pad = Constant <value_int: int = @count_include_pad> ()
  rank = Size (shape)
  rank_1d = Shape (shape)
  spatial = Sub (rank, two)
  spatial_1d = Reshape (spatial, one_1d)
  spatial_axes = Range (two, rank, one)
  x_spatial = Slice (shape, two_1d, end)
  y_shape = Shape (dY)
  y_spatial = Slice (y_shape, two_1d, end)
  kernel_full = Concat <axis = 0> (ones_11, kernel)
  ones_kernel_f = ConstantOfShape <value = float[1] {1}> (kernel_full)
  ones_kernel = CastLike (ones_kernel_f, dY)
  one_channel = Concat <axis = 0> (one_1d, one_1d, x_spatial)
  ones_x_f = ConstantOfShape <value = float[1] {1}> (one_channel)
  ones_x = CastLike (ones_x_f, dY)
  pad_value_f = Cast <to = 1> (include_pad)
  pad_value = CastLike (pad_value_f, dY)
  zeros_2 = ConstantOfShape <value = int64[1] {0}> (two_1d)
  pads_begin = Slice (pads, zero_1d, spatial_1d)
  pads_end = Slice (pads, spatial_1d, end)
  count_pads = Concat <axis = 0> (zeros_2, pads_begin, zeros_2, pads_end)
  padded_ones = Pad (ones_x, count_pads, pad_value)
  zeros_rank = ConstantOfShape <value = int64[1] {0}> (rank_1d)
  ceil_extra = Concat <axis = 0> (zeros_rank, zeros_2, strides)
  extended_ones = Pad (padded_ones, ceil_extra)
  counts_all = Conv <strides: ints = @strides, dilations: ints = @dilations> (extended_ones, ones_kernel)
  zeros_spatial = ConstantOfShape <value = int64[1] {0}> (spatial_1d)
  counts = Slice (counts_all, zeros_spatial, y_spatial, spatial_axes)
  share = Div (dY, counts)
  folded_shape = Concat <axis = 0> (minus_one_1d, one_1d, y_spatial)
  folded = Reshape (share, folded_shape)
  full = ConvTranspose <strides: ints = @strides, dilations: ints = @dilations> (folded, ones_kernel)
  full_shape = Shape (full)
  full_spatial = Slice (full_shape, two_1d, end)
  stop = Add (pads_begin, x_spatial)
  short = Sub (stop, full_spatial)
  missing = Max (short, zero_1d)
  pads_full = Concat <axis = 0> (zeros_rank, zero_1d, zero_1d, missing)
  padded = Pad (full, pads_full)
  cut = Slice (padded, pads_begin, stop, spatial_axes)
  dX = Reshape (cut, shape)
}
)"};

void average_pool(GradientContext& g) {
  const ConvGeometry c = geometry(g);
  const std::vector<int64_t> kernel = g.attr_ints("kernel_shape");
  g.set_input_grad(
      0, g.call("AveragePoolGrad", {g.grad_of_output(0), g.shape_of(g.input(0))},
                {attr("kernel_shape", kernel), attr("pads", c.pads), attr("strides", c.strides),
                 attr("dilations", c.dilations), attr("count_include_pad", g.attr_int("count_include_pad", 0))}));
}

// The number of elements per channel: the product of the spatial sizes, as `like`'s type.
std::string spatial_count(GradientContext& g, const std::string& x, const std::string& like) {
  const std::string spatial =
      g.emit("Slice", {g.shape_of(x), g.ints({2}), g.ints({std::numeric_limits<int64_t>::max()})});
  return g.cast_like(g.emit("ReduceProd", {spatial}, {attr("keepdims", 0)}), like);
}

void global_average_pool(GradientContext& g) {
  const std::string dy = g.grad_of_output(0);
  const std::string x = g.input(0);
  const std::string spread = g.emit("Expand", {dy, g.shape_of(x)});
  g.set_input_grad(0, g.emit("Div", {spread, spatial_count(g, x, dy)}));
}

void global_max_pool(GradientContext& g) {
  const std::string dy = g.grad_of_output(0);
  const std::string x = g.input(0);
  const std::string mask = g.emit("Equal", {x, g.output(0)});
  const std::string count =
      g.emit("ReduceSum", {g.cast_like(mask, dy), g.emit("Range", {g.int_scalar(2), g.rank_of(x), g.int_scalar(1)})},
             {attr("keepdims", 1)});
  g.set_input_grad(0, g.emit("Where", {mask, g.emit("Div", {dy, count}), g.scalar(0, dy)}));
}

const RuleRegistration kNnRules{
    {"Conv", conv},
    {"ConvTranspose", conv_transpose},
    {"MaxPool", max_pool},
    {"AveragePool", average_pool},
    {"GlobalAveragePool", global_average_pool},
    {"GlobalMaxPool", global_max_pool},
};

}  // namespace
}  // namespace onnxtrain::autodiff
