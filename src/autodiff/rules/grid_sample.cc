// Gradient rules of GridSample (w.r.t. X and grid) and AffineGrid (w.r.t. theta), in
// standard ONNX.
//
// GridSample (src/ops/cpu/grid_sample.cc): along spatial axis a a point has K taps
// (1 nearest, 2 linear, 4 cubic) at indices j_ak with weights w_ak(u_a), u_a the
// unnormalized coordinate; Y[n, c, p] = sum over the K^r combinations of one tap per axis
// of prod_a w_ak * X[n, c, j]. The rule recomputes the taps of every point (as the kernel
// does), lays the combinations out between the batch and the points, and
//   dX = ScatterElements(add) of dY * prod_a w_ak at the flat indices,
//   dgrid_a = sum_c dY * sum_combinations X[j] * w'_ak * prod_{b != a} w_bk * du_a/dg_a,
// where du_a/dg_a is the denormalization's scale times the padding's: 0 where border
// clamps, -1 or +1 where reflection folds. Nearest is flat in the grid: dgrid = 0.
//
// AffineGrid: grid[n, p, i] = sum_j theta[n, i, j] * base[p, j], base = (x, y[, z], 1), so
// dtheta[n] = dgrid[n]^T base; the base is AffineGrid of the identity.
#include <cstdint>

#include "autodiff/gradient_context.h"

namespace onnxtrain::autodiff {
namespace {

enum class Interpolation { kNearest, kLinear, kCubic };

struct AxisTaps {
  std::string index;   // int64 [N, K, P]
  std::string weight;  // [N, K, P]
  std::string slope;   // d weight / d grid component, [N, K, P]
};

class GridSampleGradient {
 public:
  explicit GridSampleGradient(GradientContext& g) : g_(g), grid_(g.input(1)) {}

  std::string s(double v) { return g_.scalar(v, grid_); }
  std::string op(const char* type, std::vector<std::string> in) { return g_.emit(type, std::move(in)); }
  std::string add(const std::string& a, const std::string& b) { return op("Add", {a, b}); }
  std::string sub(const std::string& a, const std::string& b) { return op("Sub", {a, b}); }
  std::string mul(const std::string& a, const std::string& b) { return op("Mul", {a, b}); }
  std::string where(const std::string& c, const std::string& a, const std::string& b) { return op("Where", {c, a, b}); }
  std::string clamp(const std::string& v, const std::string& lo, const std::string& hi) {
    return op("Max", {op("Min", {v, hi}), lo});
  }
  std::string as_float(const std::string& boolean) { return g_.cast_like(boolean, grid_); }

  // v folded into [lo, hi] (the kernel's reflect) and d folded / d v (+1 or -1).
  std::pair<std::string, std::string> reflect(const std::string& v, const std::string& lo, const std::string& hi) {
    const std::string range = op("Max", {sub(hi, lo), s(1e-30)});
    const std::string below = op("Less", {v, lo}), above = op("Greater", {v, hi});
    const std::string outside = op("Or", {below, above});
    const std::string dx = op("Max", {where(below, sub(lo, v), sub(v, hi)), s(0)});
    const std::string folds = op("Floor", {op("Div", {dx, range})});
    const std::string rest = sub(dx, mul(folds, range));
    const std::string odd = op("Greater", {sub(folds, mul(s(2), op("Floor", {mul(folds, s(0.5))}))), s(0.5)});
    const std::string from_lo = where(below, op("Not", {odd}), odd);
    const std::string folded = where(from_lo, add(lo, rest), sub(hi, rest));
    const std::string sign = where(op("Equal", {from_lo, below}), s(-1), s(1));
    return {where(outside, folded, v), where(outside, sign, s(1))};
  }

  AxisTaps axis(const std::string& grid_component, const std::string& size, Interpolation mode,
                const std::string& padding, bool align_corners) {
    const std::string size_1 = sub(size, s(1));
    const std::string lo = align_corners ? s(0) : s(-0.5);
    const std::string hi = align_corners ? size_1 : sub(size, s(0.5));
    const std::string scale = align_corners ? mul(size_1, s(0.5)) : mul(size, s(0.5));
    std::string u = align_corners ? mul(add(grid_component, s(1)), scale)
                                  : mul(sub(mul(add(grid_component, s(1)), size), s(1)), s(0.5));
    std::string du = op("Expand", {scale, g_.shape_of(grid_component)});
    if (mode == Interpolation::kNearest) u = op("Round", {u});
    if (padding == "border") {
      const std::string outside = op("Or", {op("Less", {u, lo}), op("Greater", {u, hi})});
      u = where(outside, clamp(u, s(0), size_1), u);
      du = mul(du, as_float(op("Not", {outside})));
    } else if (padding == "reflection") {
      auto [folded, sign] = reflect(u, lo, hi);
      u = folded;
      du = mul(du, sign);
    }
    u = clamp(u, s(-4), add(size, s(4)));  // far outside every tap is padding anyway
    // The taps of every point at once, [N, K, P]: tap k lies at j = base + offset_k, at
    // distance d = u - j; its weight is the interpolation kernel at |d| = d * sign_k.
    const std::string base = mode == Interpolation::kNearest ? u : op("Floor", {u});
    std::vector<int64_t> offsets{0}, signs{1}, outer{0};
    if (mode == Interpolation::kLinear) offsets = {0, 1}, signs = {1, -1}, outer = {0, 0};
    if (mode == Interpolation::kCubic) offsets = {-1, 0, 1, 2}, signs = {1, 1, -1, -1}, outer = {1, 0, 0, 1};
    const std::string j_base = op("Unsqueeze", {base, g_.ints({1})});
    std::string j = add(j_base, taps_constant(offsets));
    std::string weight, slope;
    if (mode == Interpolation::kNearest) {
      weight = op("Expand", {s(1), g_.shape_of(j)});
    } else {
      const std::string sign = taps_constant(signs);
      const std::string distance = mul(sub(op("Unsqueeze", {u, g_.ints({1})}), j), sign);  // |d|
      std::string kernel_slope;                                                            // d weight / d |d|
      if (mode == Interpolation::kLinear) {
        weight = sub(s(1), distance);
        kernel_slope = s(-1);
      } else {
        const std::string is_outer = g_.emit("Cast", {taps_constant(outer)}, {attr("to", int64_t{9})});  // bool
        weight = where(is_outer, cubic_outer(distance), cubic_inner(distance));
        kernel_slope = where(is_outer, cubic_outer_slope(distance), cubic_inner_slope(distance));
      }
      slope = mul(mul(kernel_slope, sign), op("Unsqueeze", {du, g_.ints({1})}));
    }
    if (padding == "zeros") {
      const std::string inside = op("And", {op("GreaterOrEqual", {j, s(0)}), op("LessOrEqual", {j, size_1})});
      j = where(inside, j, s(0));
      weight = mul(weight, as_float(inside));
      if (!slope.empty()) slope = mul(slope, as_float(inside));
    } else if (padding == "reflection") {
      j = reflect(j, lo, hi).first;
    }
    const std::string index = g_.emit("Cast", {clamp(j, s(0), size_1)}, {attr("to", int64_t{7})});  // int64
    return {index, weight, slope};
  }

  // A [1, K, 1] constant of the grid's type.
  std::string taps_constant(const std::vector<int64_t>& values) {
    return g_.cast_like(op("Reshape", {g_.ints(values), g_.ints({1, -1, 1})}), grid_);
  }

  // Keys' cubic convolution kernel (a = -0.75) at distance x and its derivative: the
  // inner piece for x in [0, 1], the outer one for x in [1, 2].
  static constexpr double kCubicA = -0.75;
  std::string cubic_inner(const std::string& x) {  // (a+2) x^3 - (a+3) x^2 + 1
    return add(mul(mul(sub(mul(s(kCubicA + 2), x), s(kCubicA + 3)), x), x), s(1));
  }
  std::string cubic_inner_slope(const std::string& x) {
    return mul(sub(mul(s(3 * (kCubicA + 2)), x), s(2 * (kCubicA + 3))), x);
  }
  std::string cubic_outer(const std::string& x) {  // a x^3 - 5a x^2 + 8a x - 4a
    const double a = kCubicA;
    return sub(mul(add(mul(sub(mul(s(a), x), s(5 * a)), x), s(8 * a)), x), s(4 * a));
  }
  std::string cubic_outer_slope(const std::string& x) {
    const double a = kCubicA;
    return add(mul(sub(mul(s(3 * a), x), s(10 * a)), x), s(8 * a));
  }

 private:
  GradientContext& g_;
  std::string grid_;
};

// [N, K, P] as [N, 1, .., K, .., 1, P] with K at position 1 + a of r axes: the
// combinations lie between the batch and the points, so that every broadcast runs over
// contiguous points.
std::string spread(GradientContext& g, const std::string& v, size_t a, size_t r) {
  std::vector<int64_t> axes;
  for (size_t b = 0; b < r; ++b) {
    if (b != a) axes.push_back(static_cast<int64_t>(1 + b));
  }
  return axes.empty() ? v : g.emit("Unsqueeze", {v, g.ints(axes)});
}

void grid_sample(GradientContext& g) {
  const std::string dy = g.grad_of_output(0);
  if (dy.empty()) return;
  const std::string x = g.input(0), grid = g.input(1);
  auto rank = g.rank(x);
  if (!rank) rank = g.rank(grid);
  if (!rank || *rank < 3) g.fail("the gradient needs the rank of X or grid (3 or more)");
  const size_t r = *rank - 2;
  std::string mode_name = g.attr_string("mode", g.opset() >= 20 ? "linear" : "bilinear");
  Interpolation mode = Interpolation::kLinear;
  if (mode_name == "nearest") mode = Interpolation::kNearest;
  if (mode_name == "cubic" || mode_name == "bicubic") mode = Interpolation::kCubic;
  const std::string padding = g.attr_string("padding_mode", "zeros");
  const bool align_corners = g.attr_int("align_corners", 0) != 0;

  GridSampleGradient e(g);
  const std::string x_shape = g.shape_of(x);
  const std::string components_first =
      g.emit("Transpose", {g.emit("Reshape", {grid, g.ints({0, -1, static_cast<int64_t>(r)})})},
             {attr("perm", std::vector<int64_t>{2, 0, 1})});  // [r, N, P]
  std::vector<std::string> sizes(r), strides(r);
  for (size_t a = 0; a < r; ++a) {
    sizes[a] = g.emit("Slice", {x_shape, g.ints({static_cast<int64_t>(a + 2)}), g.ints({static_cast<int64_t>(a + 3)})});
  }
  strides[r - 1] = g.ints({1});
  for (size_t a = r - 1; a-- > 0;) strides[a] = g.emit("Mul", {strides[a + 1], sizes[a + 1]});
  std::string flat_index, weight;
  std::vector<AxisTaps> taps;
  for (size_t a = 0; a < r; ++a) {
    const std::string component =
        g.emit("Gather", {components_first, g.int_scalar(static_cast<int64_t>(r - 1 - a))}, {attr("axis", int64_t{0})});
    taps.push_back(e.axis(component, g.cast_like(sizes[a], grid), mode, padding, align_corners));
    const std::string index = g.emit("Mul", {spread(g, taps[a].index, a, r), strides[a]});
    flat_index = a == 0 ? index : g.emit("Add", {flat_index, index});
    const std::string w = spread(g, taps[a].weight, a, r);
    weight = a == 0 ? w : g.emit("Mul", {weight, w});
  }
  const std::string keep_2 = g.ints({0, 0, -1});
  const std::string indices = g.emit("Reshape", {flat_index, g.ints({0, -1})});  // [N, K^r * P]
  std::vector<int64_t> points_shape = {0, 0};
  points_shape.insert(points_shape.end(), r, 1);
  points_shape.push_back(-1);
  const std::string dy_points = g.emit("Reshape", {dy, g.ints(points_shape)});  // [N, C, 1.., P]
  const std::string x_flat = g.emit("Reshape", {x, keep_2});                    // [N, C, S]
  const std::string spread_shape = g.emit(
      "Concat",
      {g.emit("Slice", {x_shape, g.ints({0}), g.ints({2})}), g.emit("Shape", {indices}, {attr("start", int64_t{1})})},
      {attr("axis", int64_t{0})});
  const std::string all_indices = g.emit("Expand", {g.emit("Unsqueeze", {indices, g.ints({1})}), spread_shape});
  if (g.needs_grad(0)) {
    const std::string combos = g.emit("Unsqueeze", {weight, g.ints({1})});  // [N, 1, K.., P]
    const std::string updates = g.emit("Reshape", {g.emit("Mul", {dy_points, combos}), keep_2});
    const std::string zeros = g.zeros(g.shape_of(x_flat), x);
    const std::string scattered = g.emit("ScatterElements", {zeros, all_indices, g.cast_like(updates, x)},
                                         {attr("axis", int64_t{2}), attr("reduction", std::string("add"))});
    g.set_input_grad(0, g.emit("Reshape", {scattered, x_shape}));
  }
  if (!g.needs_grad(1)) return;
  if (mode == Interpolation::kNearest) {
    g.set_input_grad(1, g.zeros(g.shape_of(grid), grid));
    return;
  }
  const std::string values_shape =  // [N, C, K.., P]
      g.emit("Concat",
             {g.emit("Slice", {x_shape, g.ints({0}), g.ints({2})}),
              g.emit("Shape", {weight}, {attr("start", int64_t{1})})},
             {attr("axis", int64_t{0})});
  const std::string values =
      g.emit("Reshape", {g.emit("GatherElements", {x_flat, all_indices}, {attr("axis", int64_t{2})}), values_shape});
  const std::string weighted = g.emit("ReduceSum", {g.cast_like(g.emit("Mul", {values, dy_points}), grid), g.ints({1})},
                                      {attr("keepdims", int64_t{0})});  // [N, K.., P]
  std::vector<int64_t> combination_axes;
  for (size_t a = 0; a < r; ++a) combination_axes.push_back(static_cast<int64_t>(1 + a));
  std::vector<std::string> components(r);
  for (size_t a = 0; a < r; ++a) {
    std::string slope = spread(g, taps[a].slope, a, r);
    for (size_t b = 0; b < r; ++b) {
      if (b != a) slope = g.emit("Mul", {slope, spread(g, taps[b].weight, b, r)});
    }
    const std::string sum = g.emit("ReduceSum", {g.emit("Mul", {weighted, slope}), g.ints(combination_axes)},
                                   {attr("keepdims", int64_t{0})});  // [N, P]
    components[r - 1 - a] = g.emit("Unsqueeze", {sum, g.ints({-1})});
  }
  const std::string dgrid = r == 1 ? components[0] : g.emit("Concat", components, {attr("axis", int64_t{2})});
  g.set_input_grad(1, g.emit("Reshape", {dgrid, g.shape_of(grid)}));
}

void affine_grid(GradientContext& g) {
  const std::string dgrid = g.grad_of_output(0);
  if (dgrid.empty() || !g.needs_grad(0)) return;
  const std::string theta = g.input(0);
  const std::string size = g.input(1);
  const std::string rest = g.emit("Slice", {size, g.ints({1}), g.ints({INT64_MAX})});
  const std::string one_size = g.emit("Concat", {g.ints({1}), rest}, {attr("axis", int64_t{0})});
  const std::string spatial = g.emit("Size", {rest});  // r + 1
  const std::string r = g.emit("Sub", {spatial, g.int_scalar(1)});
  // The identity [1, r, r + 1]: EyeLike of zeros [r, r + 1].
  const std::string eye_shape =
      g.emit("Concat", {g.emit("Unsqueeze", {r, g.ints({0})}), g.emit("Unsqueeze", {spatial, g.ints({0})})},
             {attr("axis", int64_t{0})});
  const std::string eye = g.emit("EyeLike", {g.zeros(eye_shape, theta)});
  const std::string identity = g.emit("Unsqueeze", {eye, g.ints({0})});
  std::vector<ir::Attribute> attributes;
  if (g.has_attribute("align_corners")) attributes.push_back(attr("align_corners", g.attr_int("align_corners", 0)));
  const std::string coordinates = g.emit("AffineGrid", {identity, one_size}, attributes);  // [1, D.., r]
  const std::string flat =
      g.emit("Reshape", {coordinates, g.emit("Concat", {g.ints({-1}), g.emit("Unsqueeze", {r, g.ints({0})})},
                                             {attr("axis", int64_t{0})})});  // [P, r]
  const std::string ones = g.emit(
      "Expand", {g.scalar(1, theta), g.emit("Concat", {g.emit("Shape", {flat}, {attr("end", int64_t{1})}), g.ints({1})},
                                            {attr("axis", int64_t{0})})});
  const std::string base = g.emit("Concat", {flat, ones}, {attr("axis", int64_t{1})});  // [P, r + 1]
  const std::string dgrid_flat =
      g.emit("Reshape", {dgrid, g.emit("Concat", {g.ints({0, -1}), g.emit("Unsqueeze", {r, g.ints({0})})},
                                       {attr("axis", int64_t{0})})});  // [N, P, r]
  const std::string transposed = g.emit("Transpose", {dgrid_flat}, {attr("perm", std::vector<int64_t>{0, 2, 1})});
  g.set_input_grad(0, g.emit("MatMul", {transposed, base}));
}

const RuleRegistration kGridSampleRules{{{"GridSample", grid_sample}, {"AffineGrid", affine_grid}}};

}  // namespace
}  // namespace onnxtrain::autodiff
