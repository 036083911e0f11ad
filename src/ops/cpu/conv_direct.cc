// Conv and ConvTranspose by direct loops over the window (float64, and the reference for
// cases oneDNN does not take): one loop over three spatial axes serves 1-D to 3-D.
#include <algorithm>
#include <utility>

#include "core/parallel.h"
#include "ops/cpu/conv.h"

namespace onnxtrain {
namespace {

// The output range [lo, hi) of a conv axis whose input index o * stride - pad + offset
// stays inside [0, in).
std::pair<int64_t, int64_t> valid_outputs(int64_t out, int64_t in, int64_t stride, int64_t pad, int64_t offset) {
  const int64_t shift = offset - pad;  // input index = o * stride + shift
  int64_t lo = shift >= 0 ? 0 : (-shift + stride - 1) / stride;
  int64_t hi = in - shift <= 0 ? 0 : (in - shift - 1) / stride + 1;
  return {std::min(lo, out), std::clamp<int64_t>(hi, 0, out)};
}

template <typename T>
void conv_loop(const ConvGeometry& g, const T* x, const T* w, const T* bias, T* y) {
  const window::Window3 q(g);
  const int64_t in_per_group = g.c / g.group, out_per_group = g.m / g.group;
  const int64_t ks = q.kernel_size(), is = q.in_size(), os = q.out_size();
  parallel_for(g.n * g.m, 1, [&](int64_t begin, int64_t end) {
    for (int64_t nm = begin; nm < end; ++nm) {
      const int64_t n = nm / g.m, m = nm % g.m, group = m / out_per_group;
      T* yp = y + nm * os;
      std::fill(yp, yp + os, bias ? bias[m] : T(0));
      for (int64_t ci = 0; ci < in_per_group; ++ci) {
        const T* xp = x + (n * g.c + group * in_per_group + ci) * is;
        const T* wp = w + (m * in_per_group + ci) * ks;
        for (int64_t kd = 0; kd < q.kernel[0]; ++kd) {
          auto [d0, d1] = valid_outputs(q.out[0], q.in[0], q.stride[0], q.pad_begin[0], kd * q.dilation[0]);
          for (int64_t kh = 0; kh < q.kernel[1]; ++kh) {
            auto [h0, h1] = valid_outputs(q.out[1], q.in[1], q.stride[1], q.pad_begin[1], kh * q.dilation[1]);
            for (int64_t kw = 0; kw < q.kernel[2]; ++kw) {
              auto [w0, w1] = valid_outputs(q.out[2], q.in[2], q.stride[2], q.pad_begin[2], kw * q.dilation[2]);
              const T wv = wp[(kd * q.kernel[1] + kh) * q.kernel[2] + kw];
              for (int64_t od = d0; od < d1; ++od) {
                const int64_t id = od * q.stride[0] - q.pad_begin[0] + kd * q.dilation[0];
                for (int64_t oh = h0; oh < h1; ++oh) {
                  const int64_t ih = oh * q.stride[1] - q.pad_begin[1] + kh * q.dilation[1];
                  const T* xr = xp + (id * q.in[1] + ih) * q.in[2] - q.pad_begin[2] + kw * q.dilation[2];
                  T* yr = yp + (od * q.out[1] + oh) * q.out[2];
                  for (int64_t ow = w0; ow < w1; ++ow) yr[ow] += wv * xr[ow * q.stride[2]];
                }
              }
            }
          }
        }
      }
    }
  });
}

// ConvTranspose as a scatter: each input element adds w * x to the outputs its kernel
// covers. One thread owns one output channel plane, so the adds never race.
template <typename T>
void conv_transpose_loop(const ConvGeometry& g, const T* x, const T* w, const T* bias, T* y) {
  const window::Window3 q(g);
  const int64_t in_per_group = g.c / g.group, out_per_group = g.m / g.group;
  const int64_t ks = q.kernel_size(), is = q.in_size(), os = q.out_size();
  parallel_for(g.n * g.m, 1, [&](int64_t begin, int64_t end) {
    for (int64_t nm = begin; nm < end; ++nm) {
      const int64_t n = nm / g.m, m = nm % g.m, group = m / out_per_group, mg = m % out_per_group;
      T* yp = y + nm * os;
      std::fill(yp, yp + os, bias ? bias[m] : T(0));
      for (int64_t ci = 0; ci < in_per_group; ++ci) {
        const int64_t c = group * in_per_group + ci;
        const T* xp = x + (n * g.c + c) * is;
        const T* wp = w + (c * out_per_group + mg) * ks;
        for (int64_t kd = 0; kd < q.kernel[0]; ++kd)
          for (int64_t kh = 0; kh < q.kernel[1]; ++kh)
            for (int64_t kw = 0; kw < q.kernel[2]; ++kw) {
              const T wv = wp[(kd * q.kernel[1] + kh) * q.kernel[2] + kw];
              // output index = i * stride - pad + k * dilation; the inputs that land inside
              // are those of valid_outputs with the roles of in and out swapped.
              auto [d0, d1] = valid_outputs(q.in[0], q.out[0], q.stride[0], q.pad_begin[0], kd * q.dilation[0]);
              auto [h0, h1] = valid_outputs(q.in[1], q.out[1], q.stride[1], q.pad_begin[1], kh * q.dilation[1]);
              auto [w0, w1] = valid_outputs(q.in[2], q.out[2], q.stride[2], q.pad_begin[2], kw * q.dilation[2]);
              for (int64_t id = d0; id < d1; ++id) {
                const int64_t od = id * q.stride[0] - q.pad_begin[0] + kd * q.dilation[0];
                for (int64_t ih = h0; ih < h1; ++ih) {
                  const int64_t oh = ih * q.stride[1] - q.pad_begin[1] + kh * q.dilation[1];
                  const T* xr = xp + (id * q.in[1] + ih) * q.in[2];
                  T* yr = yp + (od * q.out[1] + oh) * q.out[2] - q.pad_begin[2] + kw * q.dilation[2];
                  for (int64_t iw = w0; iw < w1; ++iw) yr[iw * q.stride[2]] += wv * xr[iw];
                }
              }
            }
      }
    }
  });
}

}  // namespace

template <typename T>
void direct_conv(const ConvGeometry& g, const T* x, const T* w, const T* bias, T* y, bool transpose) {
  if (transpose) {
    conv_transpose_loop<T>(g, x, w, bias, y);
  } else {
    conv_loop<T>(g, x, w, bias, y);
  }
}

template void direct_conv<float>(const ConvGeometry&, const float*, const float*, const float*, float*, bool);
template void direct_conv<double>(const ConvGeometry&, const double*, const double*, const double*, double*, bool);

}  // namespace onnxtrain
