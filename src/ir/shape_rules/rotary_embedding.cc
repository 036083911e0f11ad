// The shape of RotaryEmbedding (src/ops/cpu/rotary_embedding.cc): the input's.
#include "ir/shape_rules.h"

namespace onnxtrain::ir {
namespace {

const ShapeRuleRegistration kRotaryEmbeddingShapes{{{"RotaryEmbedding", same_as_input}}};

}  // namespace
}  // namespace onnxtrain::ir
