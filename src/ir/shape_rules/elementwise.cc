// Shapes of the element-wise ops (src/ops/cpu/elementwise.cc): numpy broadcasting.
#include "ir/shape_rules.h"

namespace onnxtrain::ir {
namespace {

void comparison(ShapeContext& c) {
  broadcasting(c);
  c.set(0, DType::kBool, c.outputs()[0].shape);
}

void predicate(ShapeContext& c) {
  c.set(0, DType::kBool, c.shape(0) ? std::optional(*c.shape(0)) : std::nullopt);
}

// Where (condition, X, Y): X's element type, the broadcast of all three.
void where(ShapeContext& c) {
  broadcasting(c);
  c.set(0, c.dtype(1), c.outputs()[0].shape);
}

const ShapeRuleRegistration kElementwiseShapes{{
    {"Add", broadcasting},
    {"Sub", broadcasting},
    {"Mul", broadcasting},
    {"Div", broadcasting},
    {"Pow", broadcasting},
    {"Mod", broadcasting},
    {"Min", broadcasting},
    {"Max", broadcasting},
    {"Sum", broadcasting},
    {"Mean", broadcasting},
    {"BitShift", broadcasting},
    {"Where", where},
    {"Equal", comparison},
    {"Less", comparison},
    {"LessOrEqual", comparison},
    {"Greater", comparison},
    {"GreaterOrEqual", comparison},
    {"And", comparison},
    {"Or", comparison},
    {"Xor", comparison},
    {"Not", predicate},
    {"IsNaN", predicate},
    {"IsInf", predicate},
    {"Neg", same_as_input},
    {"Abs", same_as_input},
    {"Sqrt", same_as_input},
    {"Exp", same_as_input},
    {"Log", same_as_input},
    {"Sin", same_as_input},
    {"Cos", same_as_input},
    {"Tan", same_as_input},
    {"Asin", same_as_input},
    {"Acos", same_as_input},
    {"Atan", same_as_input},
    {"Sinh", same_as_input},
    {"Cosh", same_as_input},
    {"Asinh", same_as_input},
    {"Acosh", same_as_input},
    {"Atanh", same_as_input},
    {"Tanh", same_as_input},
    {"Erf", same_as_input},
    {"Reciprocal", same_as_input},
    {"Floor", same_as_input},
    {"Ceil", same_as_input},
    {"Round", same_as_input},
    {"Sign", same_as_input},
    {"Identity", same_as_input},
    {"Clip", same_as_input},
}};

}  // namespace
}  // namespace onnxtrain::ir
