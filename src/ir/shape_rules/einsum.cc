// The shape of Einsum (src/ops/cpu/einsum.cc), from its equation.
#include <algorithm>
#include <map>

#include "ir/shape_rules.h"

namespace onnxtrain::ir {
namespace {

// "ij,jk->ik": per input its letters ('.' stands for the ellipsis), and the output's.
struct Equation {
  std::vector<std::string> inputs;
  std::optional<std::string> output;  // nullopt: implicit (sorted letters used once)
};

std::optional<Equation> parse(std::string text) {
  std::erase(text, ' ');
  Equation e;
  const size_t arrow = text.find("->");
  std::string lhs = text.substr(0, arrow);
  if (arrow != std::string::npos) e.output = text.substr(arrow + 2);
  auto collapse = [](const std::string& s) -> std::optional<std::string> {
    std::string letters;
    for (size_t i = 0; i < s.size(); ++i) {
      const bool ellipsis = s.compare(i, 3, "...") == 0;
      letters += s[i];
      if (ellipsis) i += 2;
    }
    if (std::count(letters.begin(), letters.end(), '.') > 1) return std::nullopt;
    return letters;
  };
  size_t start = 0;
  while (true) {
    const size_t comma = lhs.find(',', start);
    auto term = collapse(lhs.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (!term) return std::nullopt;
    e.inputs.push_back(*term);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  if (e.output) {
    auto out = collapse(*e.output);
    if (!out) return std::nullopt;
    e.output = out;
  }
  return e;
}

void einsum(ShapeContext& c) {
  const auto equation = parse(c.string_attribute("equation").value_or(""));
  if (!equation || equation->inputs.size() != c.input_count()) return c.set(0, c.dtype(0));
  std::map<char, Dim> sizes;
  std::map<char, int> uses;
  std::vector<SymbolicShape> ellipses;
  for (size_t i = 0; i < c.input_count(); ++i) {
    const SymbolicShape* s = c.shape(i);
    const std::string& term = equation->inputs[i];
    if (!s) return c.set(0, c.dtype(0));
    const bool has_ellipsis = term.find('.') != std::string::npos;
    if (has_ellipsis ? s->size() + 1 < term.size() : s->size() != term.size()) return c.set(0, c.dtype(0));
    const size_t ellipsis_rank = s->size() + 1 - term.size();
    size_t axis = 0;
    for (char letter : term) {
      if (letter == '.') {
        ellipses.emplace_back(s->begin() + axis, s->begin() + axis + ellipsis_rank);
        axis += ellipsis_rank;
        continue;
      }
      const Dim& d = (*s)[axis++];
      ++uses[letter];
      auto [it, inserted] = sizes.try_emplace(letter, d);
      if (!inserted && !it->second.value && d.value) it->second = d;  // a size 1 broadcasts: keep the larger
      if (!inserted && it->second.value && d.value && *it->second.value == 1) it->second = d;
    }
  }
  std::vector<const SymbolicShape*> ellipsis_shapes;
  for (const SymbolicShape& s : ellipses) ellipsis_shapes.push_back(&s);
  const SymbolicShape ellipsis = ellipsis_shapes.empty() ? SymbolicShape{} : *broadcast(ellipsis_shapes);
  std::string output;
  if (equation->output) {
    output = *equation->output;
  } else {
    if (!ellipses.empty()) output += '.';
    for (const auto& [letter, count] : uses) {
      if (count == 1) output += letter;
    }
  }
  SymbolicShape out;
  for (char letter : output) {
    if (letter == '.') {
      out.insert(out.end(), ellipsis.begin(), ellipsis.end());
    } else if (auto it = sizes.find(letter); it != sizes.end()) {
      out.push_back(it->second);
    } else {
      return c.set(0, c.dtype(0));  // a letter no input has: the kernel reports it
    }
  }
  c.set(0, c.dtype(0), out);
}

const ShapeRuleRegistration kEinsumShapes{{{"Einsum", einsum}}};

}  // namespace
}  // namespace onnxtrain::ir
