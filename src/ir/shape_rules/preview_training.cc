// Shapes of the ai.onnx.preview.training optimizers (src/ops/cpu/preview_training.cc): with
// n optimized tensors, output g * n + i is like X_i (input 2 + i).
#include "ir/shape_rules.h"

namespace onnxtrain::ir {
namespace {

template <size_t Groups>
void like_optimized_tensors(ShapeContext& c) {
  if (c.input_count() < 2 + Groups) return;
  const size_t n = (c.input_count() - 2) / Groups;
  for (size_t out = 0; out < c.output_count(); ++out) c.set_like(out, 2 + out % n);
}

const ShapeRuleRegistration kPreviewTrainingShapes{{
                                                       {"Adagrad", like_optimized_tensors<3>},
                                                       {"Adam", like_optimized_tensors<4>},
                                                       {"Momentum", like_optimized_tensors<3>},
                                                   },
                                                   "ai.onnx.preview.training"};

}  // namespace
}  // namespace onnxtrain::ir
