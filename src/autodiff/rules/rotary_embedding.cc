// Gradient rule of RotaryEmbedding (opset 23).
//
// The op is linear in X: each pair (x1, x2) is multiplied by the rotation
// [[c, -s], [s, c]] and the features past rotary_embedding_dim pass through. The
// transpose of a rotation is the rotation by the opposite angle, so dX is RotaryEmbedding
// itself applied to dY with -sin_cache, the same caches, positions and attributes: one
// standard node, no function body needed.
#include "autodiff/gradient_context.h"

namespace onnxtrain::autodiff {
namespace {

void rotary_embedding(GradientContext& g) {
  const std::string dy = g.grad_of_output(0);
  if (dy.empty()) return;
  for (size_t i : {1, 2}) {
    if (g.needs_grad(i)) {
      g.fail(std::string(i == 1 ? "cos_cache" : "sin_cache") +
             " depends on a differentiated value; onnxtrain differentiates RotaryEmbedding with respect to X only "
             "(the caches are expected to be constants or computed from positions)");
    }
  }
  if (!g.needs_grad(0)) return;
  std::vector<ir::Attribute> attributes;
  for (const char* name : {"interleaved", "rotary_embedding_dim", "num_heads"}) {
    if (g.has_attribute(name)) attributes.push_back(attr(name, g.attr_int(name, 0)));
  }
  std::vector<std::string> inputs = {dy, g.input(1), g.emit("Neg", {g.input(2)})};
  if (g.has_input(3)) inputs.push_back(g.input(3));
  g.set_input_grad(0, g.emit("RotaryEmbedding", std::move(inputs), std::move(attributes)));
}

const RuleRegistration kRotaryEmbeddingRules{{"RotaryEmbedding", rotary_embedding}};

}  // namespace
}  // namespace onnxtrain::autodiff
