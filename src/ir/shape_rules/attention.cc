// The shape of Attention (src/ops/cpu/attention.cc).
#include "ir/shape_rules.h"

namespace onnxtrain::ir {
namespace {

// (Q, K, V, attn_mask, past_key, past_value) => (Y, present_key, present_value,
// qk_matmul_output). 4-D: Q [B, Hq, Sq, D], K [B, Hkv, Skv, D], V [B, Hkv, Skv, Dv],
// Y [B, Hq, Sq, Dv], present [B, Hkv, past + Skv, D or Dv], qk [B, Hq, Sq, past + Skv].
// 3-D: [B, S, H * D], and Y [B, Sq, Hq * Dv].
void attention(ShapeContext& c) {
  const SymbolicShape* q = c.shape(0);
  const SymbolicShape* k = c.shape(1);
  const SymbolicShape* v = c.shape(2);
  const SymbolicShape* past = c.shape(4);
  const bool four_d = q && q->size() == 4;
  std::optional<SymbolicShape> y;
  if (q && v && v->size() == q->size()) {
    y = *q;
    if (four_d) {
      y->back() = v->back();
    } else {  // V's hidden size equal to K's makes Y's equal to Q's
      y->back() = k && dims_equal(k->back(), v->back()) ? q->back() : Dim{};
    }
  }
  c.set(0, c.dtype(0), y);
  Dim total;
  if (k && k->size() >= 3) {
    const Dim& kv = (*k)[k->size() == 4 ? 2 : 1];
    if (!c.has_input(4) && kv.value) total = kv;
    if (past && past->size() == 4 && (*past)[2].value && kv.value) total = known(*(*past)[2].value + *kv.value);
  }
  auto present = [&](const SymbolicShape* s) -> std::optional<SymbolicShape> {
    if (!s || s->size() != 4 || !four_d) return std::nullopt;
    return SymbolicShape{(*s)[0], (*s)[1], total, (*s)[3]};
  };
  c.set(1, c.dtype(1), present(k));
  c.set(2, c.dtype(2), present(v));
  c.set(3, c.dtype(0), four_d ? std::optional(SymbolicShape{(*q)[0], (*q)[1], (*q)[2], total}) : std::nullopt);
}

const ShapeRuleRegistration kAttentionShapes{{{"Attention", attention}}};

}  // namespace
}  // namespace onnxtrain::ir
