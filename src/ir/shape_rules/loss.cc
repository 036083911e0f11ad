// Shapes of the losses (src/ops/cpu/loss.cc).
#include "ir/shape_rules.h"

namespace onnxtrain::ir {
namespace {

// (scores [N, C, D...], labels [N, D...]) => (loss: a scalar, or [N, D...] with reduction
// "none"; SoftmaxCrossEntropyLoss's log_prob like the scores). com.microsoft's
// SoftmaxCrossEntropyLossInternal (shape_rules/microsoft.cc) computes the same.
void loss(ShapeContext& c) {
  const SymbolicShape* scores = c.shape(0);
  if (c.string_attribute("reduction").value_or("mean") != "none") {
    c.set(0, c.dtype(0), SymbolicShape{});
  } else if (scores && scores->size() >= 2) {
    SymbolicShape out{(*scores)[0]};
    out.insert(out.end(), scores->begin() + 2, scores->end());
    c.set(0, c.dtype(0), out);
  } else {
    c.set(0, c.dtype(0), c.shape(1) ? std::optional(*c.shape(1)) : std::nullopt);
  }
  if (c.node().op_type.starts_with("SoftmaxCrossEntropyLoss")) c.set_like(1, 0);  // and ORT's ...Internal
}

const ShapeRuleRegistration kLossShapes{{{"SoftmaxCrossEntropyLoss", loss}, {"NegativeLogLikelihoodLoss", loss}}};

}  // namespace
}  // namespace onnxtrain::ir
