// Small pieces shared by the kernels that move elements around (shape, gather, resize).
#pragma once

#include <onnxtrain/tensor.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "ops/cpu/multiversion.h"
#include "ops/cpu/vector_math.h"

namespace onnxtrain {

// Calls f.template operator()<U>() with an unsigned type of `bytes` bytes: moving an
// element needs only its size.
template <typename F>
void dispatch_by_size(size_t bytes, F&& f) {
  switch (bytes) {
    case 1:
      f.template operator()<uint8_t>();
      return;
    case 2:
      f.template operator()<uint16_t>();
      return;
    case 4:
      f.template operator()<uint32_t>();
      return;
    case 8:
      f.template operator()<uint64_t>();
      return;
    default:
      throw Error("no element type of " + std::to_string(bytes) + " bytes", ErrorKind::kNotImplemented);
  }
}

// Transposes the 8 x 8 tile r of 4-byte elements (r[i][j] becomes r[j][i]) in registers:
// three rounds of shuffles, on 2 x 2, 4 x 4 and 8 x 8 blocks.
template <typename V>
ONNXTRAIN_VECTOR_INLINE void transpose_8x8(V r[8]) {
  static_assert(sizeof(V) == 32, "8 lanes of 4 bytes");
  V t[8], u[8];
  for (int i = 0; i < 8; i += 2) {  // 2 x 2 blocks
    t[i] = __builtin_shufflevector(r[i], r[i + 1], 0, 8, 1, 9, 4, 12, 5, 13);
    t[i + 1] = __builtin_shufflevector(r[i], r[i + 1], 2, 10, 3, 11, 6, 14, 7, 15);
  }
  for (int i = 0; i < 8; i += 4)  // 4 x 4 blocks
    for (int j = 0; j < 2; ++j) {
      u[i + 2 * j] = __builtin_shufflevector(t[i + j], t[i + j + 2], 0, 1, 8, 9, 4, 5, 12, 13);
      u[i + 2 * j + 1] = __builtin_shufflevector(t[i + j], t[i + j + 2], 2, 3, 10, 11, 6, 7, 14, 15);
    }
  for (int j = 0; j < 4; ++j) {  // the 4 x 4 halves
    r[j] = __builtin_shufflevector(u[j], u[j + 4], 0, 1, 2, 3, 8, 9, 10, 11);
    r[j + 4] = __builtin_shufflevector(u[j], u[j + 4], 4, 5, 6, 7, 12, 13, 14, 15);
  }
}

// Transposes blocks: dst[i * dst_row + j] = src[i + j * src_col] for i < rows, j < cols.
// Works in tiles (16 x 16 for bytes and 8 x 8 for 4-byte elements in registers, 8 x 8
// through a local buffer for the others): each tile reads a few source rows and writes as
// many destination rows, so even power-of-two strides (which map every row to one cache
// set) stay within the L1 cache's associativity.
// A 16 x 16 tile of bytes transposed in registers: four rounds of interleaving row r with
// row r + 8 (each round rotates the index bits by one; four swap row and column).
inline void transpose_16x16_bytes(uint8_t* dst, int64_t dst_row, const uint8_t* src, int64_t src_col) {
  typedef uint8_t Bytes16 __attribute__((vector_size(16)));
  Bytes16 r[16], u[16];
  for (int j = 0; j < 16; ++j) std::memcpy(&r[j], src + j * src_col, 16);
  for (int round = 0; round < 4; ++round) {
    for (int i = 0; i < 8; ++i) {
      u[2 * i] = __builtin_shufflevector(r[i], r[i + 8], 0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
      u[2 * i + 1] =
          __builtin_shufflevector(r[i], r[i + 8], 8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
    }
    std::memcpy(r, u, sizeof r);
  }
  for (int i = 0; i < 16; ++i) std::memcpy(dst + i * dst_row, &r[i], 16);
}

template <typename U>
ONNXTRAIN_MULTIVERSIONED [[gnu::flatten]] void transpose_block(U* dst, const U* src, int64_t rows, int64_t cols,
                                                               int64_t dst_row, int64_t src_col) {
  if constexpr (sizeof(U) == 1) {  // whole 16 x 16 tiles in registers, the edges below
    const int64_t full_rows = rows / 16 * 16, full_cols = cols / 16 * 16;
    for (int64_t j0 = 0; j0 < full_cols; j0 += 16)
      for (int64_t i0 = 0; i0 < full_rows; i0 += 16)
        transpose_16x16_bytes(reinterpret_cast<uint8_t*>(dst + i0 * dst_row + j0), dst_row,
                              reinterpret_cast<const uint8_t*>(src + i0 + j0 * src_col), src_col);
    for (int64_t i = 0; i < rows; ++i) {
      const int64_t j_begin = i < full_rows ? full_cols : 0;
      for (int64_t j = j_begin; j < cols; ++j) dst[i * dst_row + j] = src[i + j * src_col];
    }
    return;
  }
  constexpr int64_t kTile = 8;
  U tile[kTile][kTile];
  for (int64_t j0 = 0; j0 < cols; j0 += kTile) {
    const int64_t nj = std::min(kTile, cols - j0);
    for (int64_t i0 = 0; i0 < rows; i0 += kTile) {
      const int64_t ni = std::min(kTile, rows - i0);
      if (sizeof(U) == 4 && ni == kTile && nj == kTile) {  // source rows j0.., destination rows i0..
        using Row = vector_math::Vector<uint32_t, 8>;
        Row r[kTile];
        for (int64_t j = 0; j < kTile; ++j) std::memcpy(&r[j], src + i0 + (j0 + j) * src_col, sizeof(Row));
        transpose_8x8(r);
        for (int64_t i = 0; i < kTile; ++i) std::memcpy(dst + (i0 + i) * dst_row + j0, &r[i], sizeof(Row));
        continue;
      }
      if (ni == kTile && nj == kTile) {
        for (int64_t j = 0; j < kTile; ++j) {
          const U* s = src + i0 + (j0 + j) * src_col;
          for (int64_t i = 0; i < kTile; ++i) tile[i][j] = s[i];
        }
        for (int64_t i = 0; i < kTile; ++i) {
          U* d = dst + (i0 + i) * dst_row + j0;
          for (int64_t j = 0; j < kTile; ++j) d[j] = tile[i][j];
        }
        continue;
      }
      for (int64_t i = 0; i < ni; ++i) {
        for (int64_t j = 0; j < nj; ++j) dst[(i0 + i) * dst_row + j0 + j] = src[i0 + i + (j0 + j) * src_col];
      }
    }
  }
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
