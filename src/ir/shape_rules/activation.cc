// Shapes of the activations (src/ops/cpu/activation.cc): each keeps its input's shape.
#include "ir/shape_rules.h"

namespace onnxtrain::ir {
namespace {

// Dropout (data, ratio, training_mode) => (output, mask): the mask is bool.
void dropout(ShapeContext& c) {
  same_as_input(c);
  c.set(1, DType::kBool, c.shape(0) ? std::optional(*c.shape(0)) : std::nullopt);
}

const ShapeRuleRegistration kActivationShapes{{
    {"Relu", same_as_input},
    {"LeakyRelu", same_as_input},
    {"Elu", same_as_input},
    {"Selu", same_as_input},
    {"Celu", same_as_input},
    {"ThresholdedRelu", same_as_input},
    {"Sigmoid", same_as_input},
    {"HardSigmoid", same_as_input},
    {"HardSwish", same_as_input},
    {"Softplus", same_as_input},
    {"Softsign", same_as_input},
    {"Mish", same_as_input},
    {"Gelu", same_as_input},
    {"Shrink", same_as_input},
    {"PRelu", broadcasting},
    {"Swish", same_as_input},
    {"Dropout", dropout},
}};

}  // namespace
}  // namespace onnxtrain::ir
