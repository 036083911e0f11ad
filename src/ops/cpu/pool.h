// The 2 x 2, stride 2 max pool (floor rounding, no padding) that pool.cc runs for MaxPool
// and conv.cc for a convolution fused with it (passes/fuse_conv_pool.h).
#pragma once

#include <cstdint>

namespace onnxtrain::pool {

// x [planes, h, w] -> y [planes, h / 2, w / 2], in T (float, double, Float16, BFloat16).
template <typename T>
void max_2x2(const T* x, T* y, int64_t planes, int64_t h, int64_t w);

// x in channel blocks ([n][ceil(c / block)][h][w][block], block 8 or 16: a convolution's
// float32 output in oneDNN's layout) -> y plain [n, c, h / 2, w / 2].
void max_2x2_from_channel_blocks(const float* x, float* y, int64_t n, int64_t c, int64_t h, int64_t w, int64_t block);

}  // namespace onnxtrain::pool
