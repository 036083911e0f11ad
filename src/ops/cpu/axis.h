// One axis of a tensor: the check and normalisation of an axis attribute or input, or of a
// list of axes (one message for every kernel), and the view of a tensor along that axis.
#pragma once

#include <onnxtrain/tensor.h>

#include <algorithm>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace onnxtrain {

// `axis` in [-rank, rank) mapped to [0, rank); `where` (KernelInfo or KernelContext) fails otherwise.
template <typename Where>
int64_t normalize_axis(const Where& where, int64_t axis, int64_t rank, std::string_view what = "axis") {
  if (axis < -rank || axis >= rank) {
    where.fail(std::string(what) + " " + std::to_string(axis) + " is out of range for rank " + std::to_string(rank) +
               " (expected " + std::to_string(-rank) + ".." + std::to_string(rank - 1) + ")");
  }
  return axis < 0 ? axis + rank : axis;
}

// Each of `axes` normalized as normalize_axis does, in their order; an axis listed twice
// (also as 1 and -2 of a rank-3 tensor) fails.
template <typename Where>
std::vector<int64_t> normalize_axes(const Where& where, std::vector<int64_t> axes, int64_t rank,
                                    std::string_view what = "axes") {
  std::vector<bool> listed(static_cast<size_t>(std::max<int64_t>(rank, 0)), false);
  for (int64_t& a : axes) {
    const int64_t given = a;
    a = normalize_axis(where, a, rank);
    if (listed[static_cast<size_t>(a)])
      where.fail("axis " + std::to_string(given) + " is listed twice in " + std::string(what));
    listed[static_cast<size_t>(a)] = true;
  }
  return axes;
}

// A tensor seen along one axis: `outer` blocks before it, `length` along it, `inner` after
// it; element (o, j, i) lies at (o * length + j) * inner + i.
struct AxisView {
  int64_t outer = 1, length = 1, inner = 1;
};

// `shape` seen along `axis` (in [0, rank)).
inline AxisView axis_view(std::span<const int64_t> shape, size_t axis) {
  return {shape_size(shape.first(axis)), shape[axis], shape_size(shape.subspan(axis + 1))};
}

// `shape` seen along `axis` (in [-rank, rank): `where` fails otherwise).
template <typename Where>
AxisView axis_view(const Where& where, std::span<const int64_t> shape, int64_t axis) {
  return axis_view(shape, static_cast<size_t>(normalize_axis(where, axis, static_cast<int64_t>(shape.size()))));
}

}  // namespace onnxtrain
