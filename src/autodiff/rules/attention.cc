// Gradient rule of Attention (opset 23), for the training form: Q, K, V in 3-D or 4-D,
// grouped-query heads, a boolean or additive mask, is_causal, scale and softcap. The
// KV-cache form (past_key/past_value inputs, gradients of present_key, present_value or
// qk_matmul_output) and opset 24's nonpad_kv_seqlen are refused with an error.
//
// The backward pass recomputes the probabilities from Q and K (the forward keeps no
// intermediates), in 4-D, with each key/value head repeated over its query heads:
//   S = scale Q K^T + bias,  C = softcap tanh(S / softcap) (or S),  P = softmax(C),  Y = P V
//   dV = P^T dY,  dC = P (dP - rowsum(dP P)) with dP = dY V^T,  dS = dC (1 - tanh^2)
//   dQ = scale dS K,  dK = scale dS^T Q
// and the repeated heads' gradients summed back onto their key/value head. Every node is
// a standard ONNX op.
#include <cmath>

#include "autodiff/gradient_context.h"

namespace onnxtrain::autodiff {
namespace {

const std::vector<int64_t> kSwapHeadsAndSequence = {0, 2, 1, 3};
const std::vector<int64_t> kTransposeLast = {0, 1, 3, 2};

// [B, S, H * D] -> [B, H, S, D].
std::string to_4d(GradientContext& g, const std::string& x, int64_t heads) {
  const std::string split = g.emit("Reshape", {x, g.ints({0, 0, heads, -1})});
  return g.emit("Transpose", {split}, {attr("perm", kSwapHeadsAndSequence)});
}

// [B, H, S, D] -> the 3-D shape of `like`.
std::string to_3d(GradientContext& g, const std::string& x, const std::string& like) {
  const std::string swapped = g.emit("Transpose", {x}, {attr("perm", kSwapHeadsAndSequence)});
  return g.emit("Reshape", {swapped, g.shape_of(like)});
}

std::string transpose_last(GradientContext& g, const std::string& x) {
  return g.emit("Transpose", {x}, {attr("perm", kTransposeLast)});
}

// Slice [begin, end) of the run-time shape of x.
std::string dims_of(GradientContext& g, const std::string& x, int64_t begin, int64_t end) {
  return g.emit("Slice", {g.emit("Shape", {x}), g.ints({begin}), g.ints({end})});
}

// Key/value heads and how they map onto query heads.
struct HeadGroups {
  bool grouped = true;  // false when statically known to be one query head per kv head
  std::string query;    // a 4-D query tensor (for its head count at run time)
};

// [B, Hkv, T, D] -> [B, Hq, T, D], head h of the result being head h / (Hq / Hkv).
std::string repeat_heads(GradientContext& g, const HeadGroups& groups, const std::string& kv) {
  if (!groups.grouped) return kv;
  const std::string q_heads = dims_of(g, groups.query, 1, 2);
  const std::string kv_heads = dims_of(g, kv, 1, 2);
  const std::string repeats = g.emit("Div", {q_heads, kv_heads});
  const std::string expanded_shape =
      g.emit("Concat", {dims_of(g, kv, 0, 2), repeats, dims_of(g, kv, 2, 4)}, {attr("axis", 0)});
  const std::string expanded = g.emit("Expand", {g.emit("Unsqueeze", {kv, g.ints({2})}), expanded_shape});
  const std::string merged = g.emit("Concat", {g.ints({0, -1}), dims_of(g, kv, 2, 4)}, {attr("axis", 0)});
  return g.emit("Reshape", {expanded, merged});
}

// [B, Hq, T, D] -> [B, Hkv, T, D], summing each group of query heads.
std::string sum_heads(GradientContext& g, const HeadGroups& groups, const std::string& grad, const std::string& kv) {
  if (!groups.grouped) return grad;
  const std::string grouped_shape =
      g.emit("Concat", {dims_of(g, kv, 0, 2), g.ints({-1}), dims_of(g, kv, 2, 4)}, {attr("axis", 0)});
  return g.emit("ReduceSum", {g.emit("Reshape", {grad, grouped_shape}), g.ints({2})}, {attr("keepdims", 0)});
}

// The additive mask over [.., Sq, T] (-inf where a boolean mask is False), padded with
// -inf up to the total sequence when its last axis is shorter.
std::string mask_bias(GradientContext& g, const std::string& mask, const std::string& scores) {
  const std::string q = g.input(0);
  const std::string bias = g.dtype(mask) == DType::kBool
                               ? g.emit("Where", {mask, g.scalar(0.0, q), g.scalar(-INFINITY, q)})
                               : g.cast_like(mask, q);
  const std::string missing = g.emit("Sub", {dims_of(g, scores, 3, 4), dims_of(g, mask, -1, INT64_MAX)});
  const std::string leading = g.emit("Sub", {g.emit("Mul", {g.rank_of(mask), g.int_scalar(2)}), g.int_scalar(1)});
  const std::string zeros = g.emit("ConstantOfShape", {g.emit("Reshape", {leading, g.ints({1})})},
                                   {attr("value", Tensor::from_vector<int64_t>({1}, {0}))});
  const std::string pads = g.emit("Concat", {zeros, missing}, {attr("axis", 0)});
  return g.emit("Pad", {bias, pads, g.scalar(-INFINITY, q)});
}

// 0 where key j may attend query i (j <= i), -inf elsewhere: [Sq, T].
std::string causal_bias(GradientContext& g, const std::string& scores) {
  const std::string q = g.input(0);
  const std::string rows =
      g.emit("Range", {g.int_scalar(0), g.emit("Squeeze", {dims_of(g, scores, 2, 3)}), g.int_scalar(1)});
  const std::string cols =
      g.emit("Range", {g.int_scalar(0), g.emit("Squeeze", {dims_of(g, scores, 3, 4)}), g.int_scalar(1)});
  const std::string allowed = g.emit("LessOrEqual", {cols, g.emit("Unsqueeze", {rows, g.ints({1})})});
  return g.emit("Where", {allowed, g.scalar(0.0, q), g.scalar(-INFINITY, q)});
}

void check_training_form(GradientContext& g) {
  for (size_t i = 1; i < 4; ++i) {
    static const char* names[] = {"", "present_key", "present_value", "qk_matmul_output"};
    if (!g.grad_of_output(i).empty()) {
      g.fail(std::string("a differentiated value depends on ") + names[i] +
             "; onnxtrain differentiates Attention through Y only");
    }
  }
  if (g.has_input(4) || g.has_input(5)) {
    g.fail(
        "past_key/past_value (the KV cache) are given; onnxtrain differentiates Attention without a KV cache "
        "only (the training form: Q, K, V, attn_mask, is_causal, scale, softcap)");
  }
  if (g.has_input(6)) g.fail("nonpad_kv_seqlen is given; onnxtrain differentiates Attention without it");
}

void attention(GradientContext& g) {
  check_training_form(g);
  const std::string dy = g.grad_of_output(0);
  if (dy.empty()) return;
  const std::string q = g.input(0), k = g.input(1), v = g.input(2);
  const auto rank = g.rank(q);
  if (!rank || (*rank != 3 && *rank != 4)) g.fail("the rank of Q must be known (3 or 4) to differentiate Attention");
  const bool three_d = *rank == 3;
  const int64_t q_heads = g.attr_int("q_num_heads", 0), kv_heads = g.attr_int("kv_num_heads", 0);
  if (three_d && (q_heads <= 0 || kv_heads <= 0)) g.fail("3-D Attention needs q_num_heads and kv_num_heads");
  const std::string q4 = three_d ? to_4d(g, q, q_heads) : q;
  const std::string k4 = three_d ? to_4d(g, k, kv_heads) : k;
  const std::string v4 = three_d ? to_4d(g, v, kv_heads) : v;
  const HeadGroups groups{!(three_d && q_heads == kv_heads), q4};
  const std::string kr = repeat_heads(g, groups, k4), vr = repeat_heads(g, groups, v4);

  const std::string scale = g.has_attribute("scale")
                                ? g.scalar(g.attr_float("scale", 1.0f), q)
                                : g.emit("Reciprocal", {g.emit("Sqrt", {g.cast_like(dims_of(g, q4, 3, 4), q)})});
  const std::string raw = g.emit("MatMul", {q4, transpose_last(g, kr)});
  std::string scores = g.emit("Mul", {raw, scale});
  if (g.has_input(3)) scores = g.emit("Add", {scores, mask_bias(g, g.input(3), raw)});
  if (g.attr_int("is_causal", 0) != 0) scores = g.emit("Add", {scores, causal_bias(g, raw)});
  const float softcap = g.attr_float("softcap", 0.0f);
  std::string capped = scores, tanh_scores;
  if (softcap > 0) {
    const std::string cap = g.scalar(softcap, q);
    tanh_scores = g.emit("Tanh", {g.emit("Div", {scores, cap})});
    capped = g.emit("Mul", {tanh_scores, cap});
  }
  const std::string p = g.emit("Softmax", {capped}, {attr("axis", -1)});

  const std::string dy4 = three_d ? to_4d(g, dy, q_heads) : dy;
  if (g.needs_grad(2)) {
    const std::string dv = sum_heads(g, groups, g.emit("MatMul", {transpose_last(g, p), dy4}), v4);
    g.set_input_grad(2, three_d ? to_3d(g, dv, v) : dv);
  }
  if (!g.needs_grad(0) && !g.needs_grad(1) && !g.needs_grad(3)) return;
  const std::string dp = g.emit("MatMul", {dy4, transpose_last(g, vr)});
  const std::string row_sum = g.emit("ReduceSum", {g.emit("Mul", {dp, p}), g.ints({-1})}, {attr("keepdims", 1)});
  std::string d_scores = g.emit("Mul", {p, g.emit("Sub", {dp, row_sum})});
  if (softcap > 0) {
    const std::string slope = g.emit("Sub", {g.scalar(1.0, q), g.emit("Mul", {tanh_scores, tanh_scores})});
    d_scores = g.emit("Mul", {d_scores, slope});
  }
  if (g.needs_grad(3)) {  // an additive mask: its gradient is dS over the mask's own keys
    const std::string mask = g.input(3);
    const std::string kept = g.emit("Slice", {d_scores, g.ints({0}), dims_of(g, mask, -1, INT64_MAX), g.ints({-1})});
    g.set_input_grad(3, g.reduce_to_shape(kept, mask));
  }
  const std::string d_raw = g.emit("Mul", {d_scores, scale});
  if (g.needs_grad(0)) {
    const std::string dq = g.emit("MatMul", {d_raw, kr});
    g.set_input_grad(0, three_d ? to_3d(g, dq, q) : dq);
  }
  if (g.needs_grad(1)) {
    const std::string dk = sum_heads(g, groups, g.emit("MatMul", {transpose_last(g, d_raw), q4}), k4);
    g.set_input_grad(1, three_d ? to_3d(g, dk, k) : dk);
  }
}

const RuleRegistration kAttentionRules{{"Attention", attention}};

}  // namespace
}  // namespace onnxtrain::autodiff
