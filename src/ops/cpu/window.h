// What Conv, ConvTranspose and the pools share about their sliding window: auto_pad and
// the checks of strides, dilations and pads.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <numeric>
#include <string>
#include <vector>

#include "ops/kernel.h"

namespace onnxtrain::window {

enum class AutoPad { kNotSet, kSameUpper, kSameLower, kValid };

inline AutoPad parse_auto_pad(const KernelInfo& info) {
  const std::string s = info.string_attribute("auto_pad", "NOTSET");
  if (s == "NOTSET" || s.empty()) return AutoPad::kNotSet;
  if (s == "SAME_UPPER") return AutoPad::kSameUpper;
  if (s == "SAME_LOWER") return AutoPad::kSameLower;
  if (s == "VALID") return AutoPad::kValid;
  info.fail("auto_pad is '" + s + "', expected NOTSET, SAME_UPPER, SAME_LOWER or VALID");
}

// Strides and dilations must be 1 or more, pads not negative; the error names the node.
inline void check_steps_and_pads(const KernelInfo& info, const std::vector<int64_t>& strides,
                                 const std::vector<int64_t>& dilations, const std::vector<int64_t>& pads) {
  for (int64_t s : strides)
    if (s < 1) info.fail("strides " + shape_string(strides) + " must all be 1 or more");
  for (int64_t d : dilations)
    if (d < 1) info.fail("dilations " + shape_string(dilations) + " must all be 1 or more");
  for (int64_t p : pads)
    if (p < 0) info.fail("pads " + shape_string(pads) + " must not be negative");
}

// An optional per-axis attribute: absent means `fallback` on every axis; otherwise one
// value per spatial axis, or `ctx` fails naming it.
inline std::vector<int64_t> per_axis(const KernelContext& ctx, const std::vector<int64_t>& v, size_t axes,
                                     int64_t fallback, const char* name) {
  if (v.empty()) return std::vector<int64_t>(axes, fallback);
  if (v.size() != axes) {
    ctx.fail(std::string(name) + " " + shape_string(v) + " has " + std::to_string(v.size()) + " values, expected " +
             std::to_string(axes) + " (one per spatial axis)");
  }
  return v;
}

// The sliding window of one call of a convolution or pool, per spatial axis (any number).
// Pads may be negative (ConvTranspose with an output_shape larger than the full result).
struct Window {
  std::vector<int64_t> in, kernel, out, strides, dilations, pad_begin, pad_end;

  size_t spatial() const { return in.size(); }
  int64_t in_size() const { return std::accumulate(in.begin(), in.end(), int64_t{1}, std::multiplies<>()); }
  int64_t out_size() const { return std::accumulate(out.begin(), out.end(), int64_t{1}, std::multiplies<>()); }
  int64_t kernel_size() const { return std::accumulate(kernel.begin(), kernel.end(), int64_t{1}, std::multiplies<>()); }
};

// A window padded to exactly 3 spatial axes (leading axes of size 1), so that one loop
// serves 1-D, 2-D and 3-D.
struct Window3 {
  std::array<int64_t, 3> in{1, 1, 1}, kernel{1, 1, 1}, out{1, 1, 1}, stride{1, 1, 1}, dilation{1, 1, 1},
      pad_begin{0, 0, 0}, pad_end{0, 0, 0};

  Window3() = default;
  explicit Window3(const Window& w) {
    const size_t off = 3 - w.spatial();
    for (size_t i = 0; i < w.spatial(); ++i) {
      in[off + i] = w.in[i];
      kernel[off + i] = w.kernel[i];
      out[off + i] = w.out[i];
      stride[off + i] = w.strides[i];
      dilation[off + i] = w.dilations[i];
      pad_begin[off + i] = w.pad_begin[i];
      pad_end[off + i] = i < w.pad_end.size() ? w.pad_end[i] : 0;
    }
  }
  int64_t in_size() const { return in[0] * in[1] * in[2]; }
  int64_t out_size() const { return out[0] * out[1] * out[2]; }
  int64_t kernel_size() const { return kernel[0] * kernel[1] * kernel[2]; }
  // True when a (ceil-mode) window runs past the end pad on some axis.
  bool overhangs() const {
    for (size_t i = 0; i < 3; ++i)
      if ((out[i] - 1) * stride[i] + (kernel[i] - 1) * dilation[i] + 1 > in[i] + pad_begin[i] + pad_end[i]) return true;
    return false;
  }
};

// For every (output position, kernel offset) pair: the input position; -2 where the window
// lies in the padding (counted by count_include_pad, but holding no input), -3 where it
// lies beyond the padding (a ceil-mode window's overhang).
inline std::vector<int64_t> window_map(const Window& g) {
  const size_t rank = g.in.size();
  const int64_t os = g.out_size(), ks = g.kernel_size();
  std::vector<int64_t> map(static_cast<size_t>(os * ks));
  std::vector<int64_t> o(rank), k(rank);
  for (int64_t oi = 0; oi < os; ++oi) {
    int64_t rest = oi;
    for (size_t d = rank; d-- > 0;) {
      o[d] = rest % g.out[d];
      rest /= g.out[d];
    }
    for (int64_t ki = 0; ki < ks; ++ki) {
      int64_t krest = ki;
      for (size_t d = rank; d-- > 0;) {
        k[d] = krest % g.kernel[d];
        krest /= g.kernel[d];
      }
      int64_t at = 0;
      bool padding = false, beyond = false;
      for (size_t d = 0; d < rank; ++d) {
        const int64_t pos = o[d] * g.strides[d] + k[d] * g.dilations[d] - g.pad_begin[d];
        if (pos < 0 || pos >= g.in[d]) {
          padding = true;
          const int64_t end = g.in[d] + (d < g.pad_end.size() ? g.pad_end[d] : 0);
          if (pos < -g.pad_begin[d] || pos >= end) beyond = true;
        }
        at = at * g.in[d] + pos;
      }
      map[static_cast<size_t>(oi * ks + ki)] = beyond ? -3 : padding ? -2 : at;
    }
  }
  return map;
}

}  // namespace onnxtrain::window
