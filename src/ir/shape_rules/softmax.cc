// Shapes of the softmax family (src/ops/cpu/softmax.cc).
#include "ir/shape_rules.h"

namespace onnxtrain::ir {
namespace {

const ShapeRuleRegistration kSoftmaxShapes{{
    {"Softmax", same_as_input},
    {"LogSoftmax", same_as_input},
    {"Hardmax", same_as_input},
}};

}  // namespace
}  // namespace onnxtrain::ir
