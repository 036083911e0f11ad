// Shapes of the bitwise ops (src/ops/cpu/bitwise.cc).
#include "ir/shape_rules.h"

namespace onnxtrain::ir {
namespace {

const ShapeRuleRegistration kBitwiseShapes{{
    {"BitwiseAnd", broadcasting},
    {"BitwiseOr", broadcasting},
    {"BitwiseXor", broadcasting},
    {"BitwiseNot", same_as_input},
}};

}  // namespace
}  // namespace onnxtrain::ir
