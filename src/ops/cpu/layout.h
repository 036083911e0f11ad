// Small pieces shared by the kernels that move elements around (shape, gather, resize).
#pragma once

#include <onnxtrain/tensor.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace onnxtrain {

// Calls f.template operator()<U>() with an unsigned type of `bytes` bytes: moving an
// element needs only its size.
template <typename F>
void dispatch_by_size(size_t bytes, F&& f) {
  switch (bytes) {
    case 1: f.template operator()<uint8_t>(); return;
    case 2: f.template operator()<uint16_t>(); return;
    case 4: f.template operator()<uint32_t>(); return;
    case 8: f.template operator()<uint64_t>(); return;
    default: throw Error("no element type of " + std::to_string(bytes) + " bytes", ErrorKind::kNotImplemented);
  }
}

// `axis` in [-rank, rank) mapped to [0, rank); `where` (KernelInfo or KernelContext) fails otherwise.
template <typename Where>
int64_t normalize_axis(const Where& where, int64_t axis, int64_t rank, std::string_view what = "axis") {
  if (axis < -rank || axis >= rank) {
    where.fail(std::string(what) + " " + std::to_string(axis) + " is out of range for rank " + std::to_string(rank) +
               " (expected " + std::to_string(-rank) + ".." + std::to_string(rank - 1) + ")");
  }
  return axis < 0 ? axis + rank : axis;
}

// Row-major element strides of `shape`.
inline std::vector<int64_t> contiguous_strides(const Shape& shape) {
  std::vector<int64_t> strides(shape.size());
  int64_t s = 1;
  for (size_t d = shape.size(); d-- > 0;) {
    strides[d] = s;
    s *= shape[d];
  }
  return strides;
}

}  // namespace onnxtrain
