// What Conv, ConvTranspose and the pools share about their sliding window: auto_pad and
// the checks of strides, dilations and pads.
#pragma once

#include <cstdint>
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

}  // namespace onnxtrain::window
