// One axis of a tensor: the check and normalisation of an axis attribute or input (one
// message for every kernel), and the view of a tensor along that axis.
#pragma once

#include <onnxtrain/tensor.h>

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

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
