// 2-D max pools that pool.cc runs for MaxPool and conv.cc for a convolution fused with the
// MaxPool after it (passes/fuse_conv_pool.h).
#pragma once

#include <cstdint>

namespace onnxtrain::pool {

// A 2-D max pool window without dilation, floor rounding: the output is out_h x out_w;
// windows start at -pad_top, -pad_left, and padding never wins.
struct MaxWindow {
  int64_t kernel_h = 2, kernel_w = 2, stride_h = 2, stride_w = 2, pad_top = 0, pad_left = 0;
  int64_t out_h = 0, out_w = 0;

  // A 2x2 window with stride 2 whose every window lies inside the h x w input, so it can be
  // read without bounds: bottom or right padding (or ceil rounding) makes the last window
  // overhang, and then the bounded loop must run.
  bool is_unbounded_2x2(int64_t h, int64_t w) const {
    return kernel_h == 2 && kernel_w == 2 && stride_h == 2 && stride_w == 2 && pad_top == 0 && pad_left == 0 &&
           2 * out_h <= h && 2 * out_w <= w;
  }
};

// x [planes, h, w] -> y [planes, out_h, out_w], in T (float, double, Float16, BFloat16).
template <typename T>
void max_2d(const T* x, T* y, int64_t planes, int64_t h, int64_t w, const MaxWindow& window);

// x in channel blocks ([n][ceil(c / block)][h][w][block], block 8 or 16: a convolution's
// float32 output in oneDNN's layout) -> y plain [n, c, out_h, out_w].
void max_2d_from_channel_blocks(const float* x, float* y, int64_t n, int64_t c, int64_t h, int64_t w, int64_t block,
                                const MaxWindow& window);

}  // namespace onnxtrain::pool
