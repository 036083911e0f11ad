// Gradient rule of RoiAlign (mode avg) w.r.t. X, in standard ONNX. Each bin averages
// bilinear samples, and both the sample positions and the bilinear weights split by axis,
// so for region r: Y[r, c] = A_y[r] X[b_r, c] A_x[r]^T, with A_y [output_height, H] the
// weights that the bins' rows give each row of X (A_x likewise for columns). Then
// dX[b] = sum over the regions r of batch b of A_y[r]^T dY[r, c] A_x[r].
//
// A row of A is built from the region's samples along that axis: sampling_ratio of them per
// bin, or ceil(bin size) (the most any region needs, the rest masked out); each sample out
// of [-1, size] weighs 0, one inside is clamped at 0 and split between its two pixels (both
// the last pixel past size - 1). The regions' boxes get no gradient (as in torchvision).
#include <cstdint>

#include "autodiff/gradient_context.h"

namespace onnxtrain::autodiff {
namespace {

// A one-element 1-D value as a scalar (OneHot's depth).
std::string scalar_of(GradientContext& g, const std::string& one) {
  return g.emit("Reshape", {one, g.ints({})});
}

// A [R, pooled, size]: the weight of each pixel of the axis in each bin, 1/samples folded in.
std::string axis_weights(GradientContext& g, const std::string& rois, int64_t start_column, int64_t pooled,
                         const std::string& size_int, bool half_pixel, int64_t sampling_ratio, double scale) {
  const std::string x = g.input(0);
  auto s = [&](double v) { return g.scalar(v, x); };
  auto column = [&](int64_t c) {  // [R, 1, 1]
    return g.emit("Reshape",
                  {g.emit("Gather", {rois, g.int_scalar(c)}, {attr("axis", int64_t{1})}), g.ints({-1, 1, 1})});
  };
  const std::string offset = s(half_pixel ? 0.5 : 0.0);
  const std::string start = g.emit("Sub", {g.emit("Mul", {column(start_column), s(scale)}), offset});
  const std::string end = g.emit("Sub", {g.emit("Mul", {column(start_column + 2), s(scale)}), offset});
  std::string extent = g.emit("Sub", {end, start});
  if (!half_pixel) extent = g.emit("Max", {extent, s(1)});
  const std::string bin = g.emit("Div", {extent, s(static_cast<double>(pooled))});
  std::string samples, most;  // per region [R, 1, 1], and the most of any region (int64 scalar)
  if (sampling_ratio > 0) {
    samples = s(static_cast<double>(sampling_ratio));
    most = g.int_scalar(sampling_ratio);
  } else {
    samples = g.emit("Ceil", {bin});
    const std::string all =
        g.emit("Concat", {g.emit("Reshape", {samples, g.ints({-1})}), g.emit("Reshape", {s(0), g.ints({1})})},
               {attr("axis", int64_t{0})});  // 0 too: no regions, no samples
    most = g.emit("Cast", {g.emit("ReduceMax", {all}, {attr("keepdims", int64_t{0})})}, {attr("to", int64_t{7})});
  }
  const std::string step = g.cast_like(g.emit("Range", {g.int_scalar(0), most, g.int_scalar(1)}), x);
  const std::string iy = g.emit("Reshape", {step, g.ints({1, 1, -1})});  // [1, 1, G]
  const std::string bins = g.emit("Reshape", {g.cast_like(g.ints([&] {
                                                std::vector<int64_t> v(static_cast<size_t>(pooled));
                                                for (int64_t i = 0; i < pooled; ++i) v[static_cast<size_t>(i)] = i;
                                                return v;
                                              }()),
                                                          x),
                                              g.ints({1, -1, 1})});  // [1, P, 1]
  const std::string size = g.cast_like(size_int, x);
  const std::string within = g.emit("Div", {g.emit("Mul", {g.emit("Add", {iy, s(0.5)}), bin}), samples});
  const std::string y = g.emit("Add", {g.emit("Add", {start, g.emit("Mul", {bins, bin})}), within});  // [R, P, G]
  const std::string valid =
      g.emit("And", {g.emit("Less", {iy, samples}),
                     g.emit("And", {g.emit("GreaterOrEqual", {y, s(-1)}), g.emit("LessOrEqual", {y, size})})});
  const std::string share = g.emit("Div", {g.cast_like(valid, x), g.emit("Max", {samples, s(1)})});
  const std::string last = g.emit("Sub", {size, s(1)});
  const std::string clamped = g.emit("Max", {y, s(0)});
  const std::string floor = g.emit("Floor", {clamped});
  const std::string at_end = g.emit("GreaterOrEqual", {floor, last});
  const std::string low = g.emit("Where", {at_end, last, floor});
  const std::string high = g.emit("Where", {at_end, last, g.emit("Add", {floor, s(1)})});
  const std::string frac = g.emit("Where", {at_end, s(0), g.emit("Sub", {clamped, floor})});
  const std::string off_on = g.cast_like(g.ints({0, 1}), x);
  auto spread = [&](const std::string& index, const std::string& weight) {  // [R, P, G, size]
    const std::string hot =
        g.emit("OneHot", {g.emit("Cast", {index}, {attr("to", int64_t{7})}), scalar_of(g, size_int), off_on});
    return g.emit("Mul", {hot, g.emit("Unsqueeze", {g.emit("Mul", {weight, share}), g.ints({-1})})});
  };
  const std::string both = g.emit("Add", {spread(low, g.emit("Sub", {s(1), frac})), spread(high, frac)});
  return g.emit("ReduceSum", {both, g.ints({2})}, {attr("keepdims", int64_t{0})});
}

void roi_align(GradientContext& g) {
  const std::string dy = g.grad_of_output(0);
  if (dy.empty() || !g.needs_grad(0)) return;
  if (g.attr_string("mode", "avg") != "avg") g.fail("the gradient with mode=max is not implemented");
  const std::string x = g.input(0), rois = g.input(1);
  const bool half_pixel = g.attr_string("coordinate_transformation_mode",
                                        g.opset() >= 16 ? "half_pixel" : "output_half_pixel") == "half_pixel";
  const int64_t sampling_ratio = g.attr_int("sampling_ratio", 0);
  const double scale = g.attr_float("spatial_scale", 1.0f);
  const std::string x_shape = g.shape_of(x);
  auto dim = [&](int64_t a) { return g.emit("Slice", {x_shape, g.ints({a}), g.ints({a + 1})}); };
  const std::string rows = axis_weights(g, rois, 1, g.attr_int("output_height", 1), dim(2), half_pixel, sampling_ratio,
                                        scale);  // [R, PH, H]
  const std::string columns =
      axis_weights(g, rois, 0, g.attr_int("output_width", 1), dim(3), half_pixel, sampling_ratio, scale);  // [R, PW, W]
  const std::string rows_t =
      g.emit("Unsqueeze", {g.emit("Transpose", {rows}, {attr("perm", std::vector<int64_t>{0, 2, 1})}), g.ints({1})});
  const std::string spread = g.emit("MatMul", {g.emit("MatMul", {rows_t, g.cast_like(dy, x)}),
                                               g.emit("Unsqueeze", {columns, g.ints({1})})});  // [R, C, H, W]
  // Sum the regions of each sample: one-hot [N, R] of the batch indices times the regions.
  const std::string off_on = g.cast_like(g.ints({0, 1}), x);
  const std::string owner =
      g.emit("Transpose",
             {g.emit("OneHot", {g.emit("Cast", {g.input(2)}, {attr("to", int64_t{7})}), scalar_of(g, dim(0)), off_on})},
             {attr("perm", std::vector<int64_t>{1, 0})});
  const std::string flat = g.emit("Reshape", {spread, g.ints({0, -1})});
  g.set_input_grad(0, g.emit("Reshape", {g.emit("MatMul", {owner, flat}), x_shape}));
}

const RuleRegistration kDetectionRules{{{"RoiAlign", roi_align}}};

}  // namespace
}  // namespace onnxtrain::autodiff
