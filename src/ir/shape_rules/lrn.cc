// The shape of LRN (src/ops/cpu/lrn.cc): the input's.
#include "ir/shape_rules.h"

namespace onnxtrain::ir {
namespace {

const ShapeRuleRegistration kLrnShapes{{{"LRN", same_as_input}}};

}  // namespace
}  // namespace onnxtrain::ir
