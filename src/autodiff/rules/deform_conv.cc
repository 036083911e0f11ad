// Gradient rule of DeformConv (2-D; w.r.t. X, W, offset, B and mask), in standard ONNX.
//
// The rule recomputes the kernel's columns (src/ops/cpu/deform_conv.cc): for offset group
// o, tap t and output position p, the sample point (py, px) = base + offset reads X
// bilinearly through four corners k with weights w_k = wy_k wx_k (0 outside the image):
//   S[n, c, t, p] = sum_k w_k X[n, c, corner_k],   columns = mask * S,
//   Y[n, m, p] = sum over c of m's group, t of W[m, c, t] columns[n, c, t, p] + B[m].
// Then, group by group, dcolumns = W^T dY and dW = dY columns^T (summed over the batch);
// dmask = sum over the group's channels of dcolumns S; dS = dcolumns mask, which the
// corners scatter back into dX (weights w_k) and turn into the offsets' gradient through
// dw_k/dpy = +-wx_k and dw_k/dpx = +-wy_k.
#include <cstdint>

#include "autodiff/gradient_context.h"

namespace onnxtrain::autodiff {
namespace {

struct Corner {
  std::string index;   // int64 [N, OG, 1, T P]: flat pixel (0 when outside)
  std::string weight;  // [N, OG, 1, T P]
  std::string dy, dx;  // d weight / d py, d px
  std::string values;  // [N, OG, C/OG, T P]
};

class DeformConvGradient {
 public:
  explicit DeformConvGradient(GradientContext& g) : g_(g), x_(g.input(0)) {}

  std::string s(double v) { return g_.scalar(v, x_); }
  std::string op(const char* type, std::vector<std::string> in, std::vector<ir::Attribute> a = {}) {
    return g_.emit(type, std::move(in), std::move(a));
  }
  std::string dim(const std::string& shape, int64_t a) { return op("Slice", {shape, g_.ints({a}), g_.ints({a + 1})}); }
  std::string concat(std::vector<std::string> parts) {
    return op("Concat", std::move(parts), {attr("axis", int64_t{0})});
  }
  // 0, 1, .., n - 1 of X's type, times `step`, plus `start`.
  std::string line(const std::string& n, int64_t step, int64_t start) {
    const std::string count = op("Reshape", {n, g_.ints({})});
    const std::string r = g_.cast_like(op("Range", {g_.int_scalar(0), count, g_.int_scalar(1)}), x_);
    return op("Add", {op("Mul", {r, s(static_cast<double>(step))}), s(static_cast<double>(start))});
  }

  void run() {
    const std::vector<int64_t> strides = g_.attr_ints("strides", {1, 1});
    const std::vector<int64_t> dilations = g_.attr_ints("dilations", {1, 1});
    const std::vector<int64_t> pads = g_.attr_ints("pads", {0, 0, 0, 0});
    if (strides.size() != 2 || dilations.size() != 2 || pads.size() != 4) {
      g_.fail("the gradient is implemented for 2-D DeformConv only");
    }
    const int64_t group = g_.attr_int("group", 1), offset_group = g_.attr_int("offset_group", 1);
    const std::string dy = g_.grad_of_output(0);
    const std::string w = g_.input(1), offset = g_.input(2);
    const std::string x_shape = g_.shape_of(x_), w_shape = g_.shape_of(w), offset_shape = g_.shape_of(offset);
    const std::string n = dim(x_shape, 0), height = dim(x_shape, 2), width = dim(x_shape, 3);
    const std::string kh = dim(w_shape, 2), kw = dim(w_shape, 3), oh = dim(offset_shape, 2), ow = dim(offset_shape, 3);
    const std::string og = g_.ints({offset_group}), minus_one = g_.ints({-1});
    // Sample points [N, OG, T, oH, oW]: tap row/column plus output row/column plus offset.
    const std::string tap_rows = op("Reshape", {line(kh, dilations[0], 0), g_.ints({-1, 1, 1, 1})});  // [kh,1,1,1]
    const std::string tap_cols = op("Reshape", {line(kw, dilations[1], 0), g_.ints({1, -1, 1, 1})});  // [1,kw,1,1]
    const std::string out_rows = op("Reshape", {line(oh, strides[0], -pads[0]), g_.ints({1, 1, -1, 1})});
    const std::string out_cols = op("Reshape", {line(ow, strides[1], -pads[1]), g_.ints({1, 1, 1, -1})});
    const std::string split =
        op("Reshape", {offset, concat({n, og, minus_one, g_.ints({2}), oh, ow})});  // [N, OG, T, 2, oH, oW]
    auto component = [&](int64_t i) { return op("Gather", {split, g_.int_scalar(i)}, {attr("axis", int64_t{3})}); };
    const std::string flat_taps = g_.ints({1, -1});
    // Every (tap row, tap column, output row, output column) of [kh, kw, oH, oW]: the other
    // axis's terms times 0 broadcast the sum to all four axes.
    const std::string full =
        op("Mul", {op("Add", {op("Add", {tap_rows, tap_cols}), op("Add", {out_rows, out_cols})}), s(0)});
    auto points = [&](const std::string& tap, const std::string& out, int64_t i) {                    // [N, OG, 1, T P]
      const std::string base = op("Reshape", {op("Add", {op("Add", {tap, out}), full}), flat_taps});  // [1, T oH oW]
      const std::string at = op("Reshape", {component(i), concat({n, og, g_.ints({1, -1})})});        // [N, OG, 1, T P]
      return op("Add", {at, op("Reshape", {base, g_.ints({1, 1, 1, -1})})});
    };
    const std::string py = points(tap_rows, out_rows, 0), px = points(tap_cols, out_cols, 1);
    const std::string channels_per = op("Div", {dim(x_shape, 1), og});
    const std::string x_groups = op("Reshape", {x_, concat({n, og, channels_per, minus_one})});  // [N, OG, C/OG, HW]
    const std::string spread_shape = concat({n, og, channels_per, op("Shape", {py}, {attr("start", int64_t{3})})});
    const std::string fh = g_.cast_like(height, x_), fw = g_.cast_like(width, x_);
    const std::string y0 = op("Floor", {py}), x0 = op("Floor", {px});
    const std::string ly = op("Sub", {py, y0}), lx = op("Sub", {px, x0});
    std::vector<Corner> corners;
    for (int a = 0; a < 2; ++a) {
      for (int b = 0; b < 2; ++b) {
        const std::string yy = a ? op("Add", {y0, s(1)}) : y0, xx = b ? op("Add", {x0, s(1)}) : x0;
        const std::string wy = a ? ly : op("Sub", {s(1), ly}), wx = b ? lx : op("Sub", {s(1), lx});
        const std::string inside = op("And", {op("And", {op("GreaterOrEqual", {yy, s(0)}), op("Less", {yy, fh})}),
                                              op("And", {op("GreaterOrEqual", {xx, s(0)}), op("Less", {xx, fw})})});
        const std::string in = g_.cast_like(inside, x_);
        Corner k;
        const std::string flat = op("Add", {op("Mul", {yy, fw}), xx});
        k.index = g_.emit("Cast", {op("Where", {inside, flat, s(0)})}, {attr("to", int64_t{7})});
        k.weight = op("Mul", {op("Mul", {wy, wx}), in});
        k.dy = op("Mul", {op("Mul", {s(a ? 1 : -1), wx}), in});
        k.dx = op("Mul", {op("Mul", {s(b ? 1 : -1), wy}), in});
        k.values = op("GatherElements", {x_groups, op("Expand", {k.index, spread_shape})}, {attr("axis", int64_t{3})});
        corners.push_back(k);
      }
    }
    std::string samples;  // S [N, OG, C/OG, T P]
    for (const Corner& k : corners) {
      const std::string term = op("Mul", {k.weight, k.values});
      samples = samples.empty() ? term : op("Add", {samples, term});
    }
    const bool has_mask = g_.has_input(4);
    const std::string mask = has_mask ? op("Reshape", {g_.input(4), concat({n, og, g_.ints({1, -1})})}) : "";
    const std::string columns = has_mask ? op("Mul", {samples, mask}) : samples;
    // Group view: [N, G, C/G T, P] and dY [N, G, M/G, P]; W as [G, M/G, C/G T].
    const std::string points_count = op("Mul", {oh, ow});
    const std::string groups = g_.ints({group});
    const std::string grouped = op("Reshape", {columns, concat({n, groups, minus_one, points_count})});
    const std::string dy_grouped = op("Reshape", {dy, concat({n, groups, minus_one, points_count})});
    const std::string w_grouped = op("Reshape", {w, concat({groups, op("Div", {dim(w_shape, 0), groups}), minus_one})});
    if (g_.needs_grad(1)) {
      const std::string transposed = op("Transpose", {grouped}, {attr("perm", std::vector<int64_t>{0, 1, 3, 2})});
      const std::string per_sample = op("MatMul", {dy_grouped, transposed});
      g_.set_input_grad(
          1, op("Reshape", {op("ReduceSum", {per_sample, g_.ints({0})}, {attr("keepdims", int64_t{0})}), w_shape}));
    }
    if (g_.has_input(3) && g_.needs_grad(3)) {
      g_.set_input_grad(3, op("ReduceSum", {dy, g_.ints({0, 2, 3})}, {attr("keepdims", int64_t{0})}));
    }
    const bool wants_x = g_.needs_grad(0), wants_offset = g_.needs_grad(2), wants_mask = has_mask && g_.needs_grad(4);
    if (!wants_x && !wants_offset && !wants_mask) return;
    const std::string w_t = op("Transpose", {w_grouped}, {attr("perm", std::vector<int64_t>{0, 2, 1})});
    const std::string dcolumns =
        op("Reshape", {op("MatMul", {w_t, dy_grouped}), op("Shape", {samples})});  // [N, OG, C/OG, T P]
    if (wants_mask) {
      const std::string dmask =
          op("ReduceSum", {op("Mul", {dcolumns, samples}), g_.ints({2})}, {attr("keepdims", int64_t{1})});
      g_.set_input_grad(4, op("Reshape", {dmask, g_.shape_of(g_.input(4))}));
    }
    const std::string dsamples = has_mask ? op("Mul", {dcolumns, mask}) : dcolumns;
    if (wants_x) {
      std::vector<std::string> indices, updates;
      for (const Corner& k : corners) {
        indices.push_back(op("Expand", {k.index, spread_shape}));
        updates.push_back(op("Mul", {dsamples, k.weight}));
      }
      const std::string all_indices = op("Concat", indices, {attr("axis", int64_t{3})});
      const std::string all_updates = op("Concat", updates, {attr("axis", int64_t{3})});
      const std::string scattered =
          op("ScatterElements", {g_.zeros(g_.shape_of(x_groups), x_), all_indices, all_updates},
             {attr("axis", int64_t{3}), attr("reduction", std::string("add"))});
      g_.set_input_grad(0, op("Reshape", {scattered, x_shape}));
    }
    if (wants_offset) {
      std::string slope_y, slope_x;  // sum_k X[corner_k] dw_k/dp
      for (const Corner& k : corners) {
        const std::string ty = op("Mul", {k.values, k.dy}), tx = op("Mul", {k.values, k.dx});
        slope_y = slope_y.empty() ? ty : op("Add", {slope_y, ty});
        slope_x = slope_x.empty() ? tx : op("Add", {slope_x, tx});
      }
      auto along = [&](const std::string& slope) {  // [N, OG, T, 1, oH, oW]
        const std::string summed =
            op("ReduceSum", {op("Mul", {dsamples, slope}), g_.ints({2})}, {attr("keepdims", int64_t{0})});
        return op("Reshape", {summed, concat({n, og, minus_one, g_.ints({1}), oh, ow})});
      };
      const std::string both = op("Concat", {along(slope_y), along(slope_x)}, {attr("axis", int64_t{3})});
      g_.set_input_grad(2, op("Reshape", {both, offset_shape}));
    }
  }

 private:
  GradientContext& g_;
  std::string x_;
};

void deform_conv(GradientContext& g) {
  if (g.grad_of_output(0).empty()) return;
  DeformConvGradient(g).run();
}

const RuleRegistration kDeformConvRules{{{"DeformConv", deform_conv}}};

}  // namespace
}  // namespace onnxtrain::autodiff
