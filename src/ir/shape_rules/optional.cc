// The shapes of OptionalHasElement and OptionalGetElement on tensors (src/ops/cpu/optional.cc).
#include "ir/shape_rules.h"

namespace onnxtrain::ir {
namespace {

void has_element(ShapeContext& c) {
  c.set(0, DType::kBool, SymbolicShape{});
}

const ShapeRuleRegistration kOptionalShapes{
    {{"OptionalHasElement", has_element}, {"OptionalGetElement", same_as_input}}};

}  // namespace
}  // namespace onnxtrain::ir
