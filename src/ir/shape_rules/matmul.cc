// Shapes of MatMul and Gemm (src/ops/cpu/matmul.cc).
#include "ir/shape_rules.h"

namespace onnxtrain::ir {
std::optional<SymbolicShape> matmul_shape(const SymbolicShape* a, const SymbolicShape* b) {
  if (!a || !b || a->empty() || b->empty()) return std::nullopt;
  SymbolicShape sa = *a, sb = *b;
  const bool a_vector = sa.size() == 1, b_vector = sb.size() == 1;
  if (a_vector) sa.insert(sa.begin(), known(1));
  if (b_vector) sb.push_back(known(1));
  const SymbolicShape batch_a(sa.begin(), sa.end() - 2), batch_b(sb.begin(), sb.end() - 2);
  SymbolicShape out = *broadcast({&batch_a, &batch_b});
  if (!a_vector) out.push_back(sa[sa.size() - 2]);
  if (!b_vector) out.push_back(sb.back());
  return out;
}

namespace {

void matmul(ShapeContext& c) {
  c.set(0, c.dtype(0), matmul_shape(c.shape(0), c.shape(1)));
}

void gemm(ShapeContext& c) {
  const SymbolicShape* a = c.shape(0);
  const SymbolicShape* b = c.shape(1);
  if (!a || !b || a->size() != 2 || b->size() != 2) return c.set(0, c.dtype(0));
  const bool ta = c.int_attribute("transA").value_or(0), tb = c.int_attribute("transB").value_or(0);
  c.set(0, c.dtype(0), SymbolicShape{(*a)[ta ? 1 : 0], (*b)[tb ? 0 : 1]});
}

const ShapeRuleRegistration kMatMulShapes{{{"MatMul", matmul}, {"Gemm", gemm}}};

}  // namespace
}  // namespace onnxtrain::ir
