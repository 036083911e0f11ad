// Gradient rule of Col2Im: Col2Im adds each block value into one image pixel (or drops it
// in the padding), so its adjoint, im2col, reads every block value's pixel back:
// dX[n, c K + k, l] = dY[n, c, pixel(k, l)], 0 in the padding. The pixel of each (k, l) is
// known while building when image_shape and block_shape are constants: one Gather by a
// constant table, whose padding entries point at an extra zero appended to dY.
#include <cstdint>

#include "autodiff/gradient_context.h"

namespace onnxtrain::autodiff {
namespace {

void col2im(GradientContext& g) {
  const std::string dy = g.grad_of_output(0);
  if (dy.empty() || !g.needs_grad(0)) return;
  const auto image = g.constant_ints(1);
  const auto block = g.constant_ints(2);
  if (!image || !block || image->size() != block->size() || image->empty()) {
    g.fail("the gradient needs image_shape and block_shape as constants of equal length");
  }
  const size_t r = image->size();
  const std::vector<int64_t> strides = g.attr_ints("strides", std::vector<int64_t>(r, 1));
  const std::vector<int64_t> dilations = g.attr_ints("dilations", std::vector<int64_t>(r, 1));
  const std::vector<int64_t> pads = g.attr_ints("pads", std::vector<int64_t>(2 * r, 0));
  if (strides.size() != r || dilations.size() != r || pads.size() != 2 * r) {
    g.fail("strides, dilations and pads do not fit image_shape");
  }
  std::vector<int64_t> blocks(r);
  int64_t kernel = 1, positions = 1, pixels = 1;
  for (size_t a = 0; a < r; ++a) {
    const int64_t room = (*image)[a] + pads[a] + pads[a + r] - dilations[a] * ((*block)[a] - 1) - 1;
    blocks[a] = room < 0 ? 0 : room / strides[a] + 1;
    kernel *= (*block)[a], positions *= blocks[a], pixels *= (*image)[a];
  }
  std::vector<int64_t> table(static_cast<size_t>(kernel * positions), pixels);  // pixels: the zero
  for (int64_t k = 0; k < kernel; ++k) {
    for (int64_t l = 0; l < positions; ++l) {
      int64_t at = 0, krest = k, lrest = l, scale = 1;
      bool inside = true;
      for (size_t a = r; a-- > 0;) {
        const int64_t ka = krest % (*block)[a], la = lrest % blocks[a];
        krest /= (*block)[a], lrest /= blocks[a];
        const int64_t p = la * strides[a] - pads[a] + ka * dilations[a];
        inside = inside && p >= 0 && p < (*image)[a];
        at += p * scale;
        scale *= (*image)[a];
      }
      if (inside) table[static_cast<size_t>(k * positions + l)] = at;
    }
  }
  const std::string flat = g.emit("Reshape", {dy, g.ints({0, 0, -1})});  // [N, C, pixels]
  const std::string zero_shape =
      g.emit("Concat", {g.emit("Shape", {flat}, {attr("end", int64_t{2})}), g.ints({1})}, {attr("axis", int64_t{0})});
  const std::string padded = g.emit("Concat", {flat, g.zeros(zero_shape, dy)}, {attr("axis", int64_t{2})});
  const std::string picked = g.emit("Gather", {padded, g.ints(table)}, {attr("axis", int64_t{2})});
  g.set_input_grad(0, g.emit("Reshape", {picked, g.ints({0, -1, positions})}));
}

const RuleRegistration kCol2ImRules{{{"Col2Im", col2im}}};

}  // namespace
}  // namespace onnxtrain::autodiff
