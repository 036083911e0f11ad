// The shape of ImageDecoder (src/ops/cpu/image.cc): uint8 [H, W, 3], or [H, W, 1] for
// pixel_format Grayscale; H and W are known only once the image is decoded.
#include "ir/shape_rules.h"

namespace onnxtrain::ir {
namespace {

void image_decoder(ShapeContext& c) {
  const bool gray = c.string_attribute("pixel_format").value_or("RGB") == "Grayscale";
  c.set(0, DType::kUInt8, SymbolicShape{Dim{}, Dim{}, known(gray ? 1 : 3)});
}

const ShapeRuleRegistration kImageShapes{{{"ImageDecoder", image_decoder}}};

}  // namespace
}  // namespace onnxtrain::ir
