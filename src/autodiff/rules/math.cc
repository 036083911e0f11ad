// Gradient rules of the linear-algebra ops: MatMul, Gemm, Einsum.
#include <algorithm>
#include <limits>
#include <map>
#include <optional>
#include <set>

#include "autodiff/gradient_context.h"

namespace onnxtrain::autodiff {
namespace {

// Swaps the last two axes of a value of rank >= 2. When the rank is not known statically,
// the leading axes are folded into one around a 3-D Transpose.
std::string transpose_last_two(GradientContext& g, const std::string& value, std::optional<size_t> rank) {
  if (rank) {
    std::vector<int64_t> perm;
    for (size_t i = 0; i < *rank; ++i) perm.push_back(static_cast<int64_t>(i));
    std::swap(perm[*rank - 1], perm[*rank - 2]);
    return g.emit("Transpose", {value}, {attr("perm", perm)});
  }
  const std::string shape = g.emit("Shape", {value});
  const std::string last_two = g.emit("Slice", {shape, g.ints({-2}), g.ints({std::numeric_limits<int64_t>::max()})});
  const std::string leading = g.emit("Slice", {shape, g.ints({0}), g.ints({-2})});
  const std::string folded = g.emit("Reshape", {value, g.emit("Concat", {g.ints({-1}), last_two}, {attr("axis", 0)})});
  const std::string swapped = g.emit("Transpose", {folded}, {attr("perm", std::vector<int64_t>{0, 2, 1})});
  const std::string swapped_last = g.emit(
      "Concat",
      {g.emit("Slice", {last_two, g.ints({1}), g.ints({2})}), g.emit("Slice", {last_two, g.ints({0}), g.ints({1})})},
      {attr("axis", 0)});
  return g.emit("Reshape", {swapped, g.emit("Concat", {leading, swapped_last}, {attr("axis", 0)})});
}

void matmul(GradientContext& g) {
  const std::string dy = g.grad_of_output(0);
  const std::string a = g.input(0);
  const std::string b = g.input(1);
  const auto ra = g.rank(a);
  const auto rb = g.rank(b);
  auto set = [&](size_t i, const std::string& grad) { g.set_input_grad(i, g.reduce_to_shape(grad, g.input(i))); };

  if (!ra || !rb) {
    // A rank not known statically: assume matrices or stacks of them (rank >= 2).
    if (g.needs_grad(0)) set(0, g.emit("MatMul", {dy, transpose_last_two(g, b, rb)}));
    if (g.needs_grad(1)) set(1, g.emit("MatMul", {transpose_last_two(g, a, ra), dy}));
    return;
  }
  if (*ra == 1 && *rb == 1) {
    if (g.needs_grad(0)) set(0, g.emit("Mul", {dy, b}));
    if (g.needs_grad(1)) set(1, g.emit("Mul", {dy, a}));
    return;
  }
  if (*ra == 1) {  // a: [K], b: [..., K, N], y: [..., N]
    const std::string dy_row = g.emit("Unsqueeze", {dy, g.ints({-2})});
    if (g.needs_grad(0)) set(0, g.emit("MatMul", {dy_row, transpose_last_two(g, b, *rb)}));
    if (g.needs_grad(1)) set(1, g.emit("MatMul", {g.emit("Unsqueeze", {a, g.ints({1})}), dy_row}));
    return;
  }
  if (*rb == 1) {  // a: [..., M, K], b: [K], y: [..., M]
    const std::string dy_column = g.emit("Unsqueeze", {dy, g.ints({-1})});
    if (g.needs_grad(0)) set(0, g.emit("MatMul", {dy_column, g.emit("Unsqueeze", {b, g.ints({0})})}));
    if (g.needs_grad(1)) set(1, g.emit("Mul", {a, dy_column}));
    return;
  }
  if (g.needs_grad(0)) set(0, g.emit("MatMul", {dy, transpose_last_two(g, b, *rb)}));
  if (!g.needs_grad(1)) return;
  if (*rb == 2 && *ra > 2) {
    // A stack times one matrix (x @ W): fold the stack into rows, one matrix product.
    const int64_t axis = static_cast<int64_t>(*ra) - 1;
    const std::string a_rows = g.emit("Flatten", {a}, {attr("axis", axis)});
    const std::string dy_rows = g.emit("Flatten", {dy}, {attr("axis", axis)});
    set(1, g.emit("Gemm", {a_rows, dy_rows}, {attr("transA", 1)}));
    return;
  }
  set(1, g.emit("MatMul", {transpose_last_two(g, a, *ra), dy}));
}

// Y = alpha * op(A) @ op(B) + beta * C, with op() transposing when transA/transB say so.
void gemm(GradientContext& g) {
  const std::string dy = g.grad_of_output(0);
  const std::string a = g.input(0);
  const std::string b = g.input(1);
  const bool ta = g.attr_int("transA", 0) != 0;
  const bool tb = g.attr_int("transB", 0) != 0;
  const float alpha = g.attr_float("alpha", 1.0f);
  const float beta = g.attr_float("beta", 1.0f);
  auto product = [&](const std::string& x, const std::string& y, bool tx, bool ty) {
    std::vector<ir::Attribute> attributes;
    if (tx) attributes.push_back(attr("transA", 1));
    if (ty) attributes.push_back(attr("transB", 1));
    if (alpha != 1.0f) attributes.push_back(attr("alpha", alpha));
    return g.emit("Gemm", {x, y}, std::move(attributes));
  };
  if (g.needs_grad(0)) {
    g.set_input_grad(0, ta ? product(b, dy, tb, true) : product(dy, b, false, !tb));
  }
  if (g.needs_grad(1)) {
    g.set_input_grad(1, tb ? product(dy, a, true, ta) : product(a, dy, !ta, false));
  }
  if (g.needs_grad(2)) {
    std::string dc = g.reduce_to_shape(dy, g.input(2));
    if (beta != 1.0f) dc = g.emit("Mul", {dc, g.scalar(beta, dy)});
    g.set_input_grad(2, dc);
  }
}

// Einsum subscripts of one term: letters, with "..." kept as the token '.'.
std::string compact_subscripts(const std::string& term) {
  std::string out;
  for (size_t i = 0; i < term.size(); ++i) {
    if (term[i] == '.') {
      out += '.';
      i += 2;
    } else if (term[i] != ' ') {
      out += term[i];
    }
  }
  return out;
}

std::string expand_subscripts(const std::string& compact) {
  std::string out;
  for (char c : compact) out += c == '.' ? std::string("...") : std::string(1, c);
  return out;
}

// For operand i with subscripts S: d(operand) = einsum(dY and the other operands -> S),
// then broadcast along letters that only operand i has (they were summed away), and
// reduced along ellipsis axes it was broadcast on.
void einsum(GradientContext& g) {
  std::string equation = g.attr_string("equation", "");
  equation.erase(std::remove(equation.begin(), equation.end(), ' '), equation.end());
  const size_t arrow = equation.find("->");
  const std::string lhs = equation.substr(0, arrow);
  std::vector<std::string> terms;
  for (size_t begin = 0;;) {
    const size_t comma = lhs.find(',', begin);
    terms.push_back(compact_subscripts(lhs.substr(begin, comma - begin)));
    if (comma == std::string::npos) break;
    begin = comma + 1;
  }
  std::string result;
  if (arrow != std::string::npos) {
    result = compact_subscripts(equation.substr(arrow + 2));
  } else {  // implicit output: letters used once, in order, after any ellipsis
    std::map<char, int> counts;
    bool ellipsis = false;
    for (const std::string& t : terms) {
      for (char c : t) {
        if (c == '.')
          ellipsis = true;
        else
          ++counts[c];
      }
    }
    if (ellipsis) result += '.';
    for (auto [c, n] : counts) {
      if (n == 1) result += c;
    }
  }
  const std::string dy = g.grad_of_output(0);
  for (size_t i = 0; i < terms.size(); ++i) {
    if (!g.needs_grad(i)) continue;
    const std::string& own = terms[i];
    std::set<char> elsewhere(result.begin(), result.end());
    for (size_t j = 0; j < terms.size(); ++j) {
      if (j != i) elsewhere.insert(terms[j].begin(), terms[j].end());
    }
    std::string target;
    std::vector<int64_t> summed_axes;  // positions of letters only this operand has
    const size_t ellipsis_at = own.find('.');
    for (size_t k = 0; k < own.size(); ++k) {
      const char c = own[k];
      if (c != '.' && std::count(own.begin(), own.end(), c) > 1) {
        g.fail("repeated subscript '" + std::string(1, c) + "' (a diagonal) in equation '" + equation + "'");
      }
      if (c == '.' || elsewhere.contains(c)) {
        target += c;
        continue;
      }
      const bool after_ellipsis = ellipsis_at != std::string::npos && k > ellipsis_at;
      summed_axes.push_back(after_ellipsis ? static_cast<int64_t>(k) - static_cast<int64_t>(own.size())
                                           : static_cast<int64_t>(k));
    }
    // ONNX wants the ellipsis in the output when an input has one: keep it, sum it below.
    const bool any_ellipsis =
        result.find('.') != std::string::npos || std::any_of(terms.begin(), terms.end(), [&](const std::string& t) {
          return &t != &terms[i] && t.find('.') != std::string::npos;
        });
    const bool sum_ellipsis = any_ellipsis && target.find('.') == std::string::npos;
    const size_t target_letters = target.size();
    if (sum_ellipsis) target = "." + target;
    std::vector<std::string> inputs = {dy};
    std::string sub_equation = expand_subscripts(result);
    for (size_t j = 0; j < terms.size(); ++j) {
      if (j == i) continue;
      inputs.push_back(g.input(j));
      sub_equation += ",";
      sub_equation += expand_subscripts(terms[j]);
    }
    sub_equation += "->" + expand_subscripts(target);
    std::string grad = g.emit("Einsum", inputs, {attr("equation", sub_equation)});
    if (sum_ellipsis) {
      std::string rows = g.ints({-1});
      if (target_letters > 0) {
        const std::string tail =
            g.emit("Slice", {g.emit("Shape", {grad}), g.ints({-static_cast<int64_t>(target_letters)}),
                             g.ints({std::numeric_limits<int64_t>::max()})});
        rows = g.emit("Concat", {rows, tail}, {attr("axis", 0)});
      }
      grad = g.emit("ReduceSum", {g.emit("Reshape", {grad, rows}), g.ints({0})}, {attr("keepdims", 0)});
    }
    if (!summed_axes.empty()) {
      grad = g.emit("Unsqueeze", {grad, g.ints(summed_axes)});
      grad = g.emit("Expand", {grad, g.shape_of(g.input(i))});
    }
    g.set_input_grad(i, g.reduce_to_shape(grad, g.input(i)));
  }
}

const RuleRegistration kMathRules{
    {"MatMul", matmul},
    {"Gemm", gemm},
    {"Einsum", einsum},
};

}  // namespace
}  // namespace onnxtrain::autodiff
