// Numpy-style (multidirectional) broadcasting, shared by every elementwise kernel.
#pragma once

#include <onnxtrain/tensor.h>

#include <array>
#include <span>
#include <vector>

#include "core/parallel.h"

namespace onnxtrain {

// The broadcast shape of several shapes; throws an Error naming both dimensions otherwise.
Shape broadcast_shapes(std::span<const Shape> shapes);
Shape broadcast_shapes(std::span<const Shape* const> shapes);
Shape broadcast_shapes(const Shape& a, const Shape& b);

// Element strides for reading `shape` as if broadcast to `out` (0 along broadcast axes).
std::vector<int64_t> broadcast_strides(const Shape& shape, const Shape& out);

// Walks the output of a broadcast in rows along the last axis. For each row calls
//   row(out_offset, offsets, strides, count)
// where offsets[k]/strides[k] give input k's first element and its step (0 or 1) in the
// row. Rows run in parallel.
template <size_t N, typename Row>
void for_each_broadcast_row(const Shape& out, const std::array<const Shape*, N>& inputs, Row&& row) {
  const int64_t total = shape_size(out);
  if (total == 0) return;
  const size_t rank = out.size();
  std::array<std::vector<int64_t>, N> strides;
  for (size_t k = 0; k < N; ++k) strides[k] = broadcast_strides(*inputs[k], out);
  const int64_t inner = rank ? out[rank - 1] : 1;
  const int64_t rows = total / inner;
  std::array<int64_t, N> inner_strides{};
  for (size_t k = 0; k < N; ++k) inner_strides[k] = rank ? strides[k][rank - 1] : 0;
  parallel_for(rows, std::max<int64_t>(1, 16384 / inner), [&](int64_t begin, int64_t end) {
    std::array<int64_t, N> offsets{};
    for (int64_t r = begin; r < end; ++r) {
      int64_t rest = r;
      offsets.fill(0);
      for (size_t d = rank - 1; d-- > 0;) {  // decompose the row index over the outer axes
        const int64_t index = rest % out[d];
        rest /= out[d];
        for (size_t k = 0; k < N; ++k) offsets[k] += index * strides[k][d];
      }
      row(r * inner, offsets, inner_strides, inner);
    }
  });
}

}  // namespace onnxtrain
