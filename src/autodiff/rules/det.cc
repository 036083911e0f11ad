// Gradient rule of Det: d det(X) / d X_ij is the cofactor C_ij = (-1)^(i+j) det(X without
// row i and column j), so dX = dY C. The minors come from two Gathers by the table
// rows[i] = (0, .., i - 1, i + 1, .., M - 1) (computed at run time) and one Det, in
// standard ONNX; unlike det X^-T, the cofactors stay finite for singular matrices.
#include <cstdint>

#include "autodiff/gradient_context.h"

namespace onnxtrain::autodiff {
namespace {

void det(GradientContext& g) {
  const std::string dy = g.grad_of_output(0);
  if (dy.empty() || !g.needs_grad(0)) return;
  const std::string x = g.input(0);
  const auto rank = g.rank(x);
  if (!rank || *rank < 2) g.fail("the gradient needs the rank of X (2 or more)");
  const int64_t batch = static_cast<int64_t>(*rank) - 2;
  const std::string m = g.emit("Gather", {g.shape_of(x), g.int_scalar(-1)});  // scalar M
  const std::string one = g.int_scalar(1);
  const std::string rows = g.emit("Range", {g.int_scalar(0), m, one});                        // i
  const std::string kept = g.emit("Range", {g.int_scalar(0), g.emit("Sub", {m, one}), one});  // k
  const std::string column_i = g.emit("Unsqueeze", {rows, g.ints({1})});                      // [M, 1]
  // table[i, k] = k + (k >= i): the rows (or columns) that the minor of i keeps.
  const std::string table =
      g.emit("Add", {kept, g.emit("Cast", {g.emit("GreaterOrEqual", {kept, column_i})}, {attr("to", int64_t{7})})});
  const std::string picked_rows = g.emit("Gather", {x, table}, {attr("axis", int64_t{-2})});       // [.., i, k, M]
  const std::string picked = g.emit("Gather", {picked_rows, table}, {attr("axis", int64_t{-1})});  // [.., i, k, j, l]
  std::vector<int64_t> perm;
  for (int64_t a = 0; a < batch; ++a) perm.push_back(a);
  for (int64_t a : {0, 2, 1, 3}) perm.push_back(batch + a);
  const std::string minors = g.emit("Det", {g.emit("Transpose", {picked}, {attr("perm", perm)})});  // [.., i, j]
  const std::string parity = g.emit("Mod", {g.emit("Add", {column_i, rows}), g.int_scalar(2)});     // (i + j) % 2
  const std::string sign = g.cast_like(g.emit("Sub", {one, g.emit("Mul", {parity, g.int_scalar(2)})}), x);
  const std::string cofactors = g.emit("Mul", {minors, sign});
  g.set_input_grad(0, g.emit("Mul", {g.emit("Unsqueeze", {dy, g.ints({-1, -2})}), cofactors}));
}

const RuleRegistration kDetRules{{{"Det", det}}};

}  // namespace
}  // namespace onnxtrain::autodiff
