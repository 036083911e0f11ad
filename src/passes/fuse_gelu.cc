#include "passes/fuse_gelu.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "ir/functions.h"
#include "passes/value_reads.h"

namespace onnxtrain::passes {
namespace {

// The fused ops for models older than opset 20, with the bodies exporters write.
const ir::FunctionRegistration kGelu{R"(
Gelu (X) => (Y) {
  half_d = Constant <value = double {0.5}> ()
  one_d = Constant <value = double {1}> ()
  sqrt_half_d = Constant <value = double {0.70710678118654752}> ()
  half = CastLike (half_d, X)
  one = CastLike (one_d, X)
  sqrt_half = CastLike (sqrt_half_d, X)
  scaled = Mul (X, sqrt_half)
  erf = Erf (scaled)
  erf_1 = Add (erf, one)
  half_x = Mul (X, half)
  Y = Mul (half_x, erf_1)
}
)"};

const ir::FunctionRegistration kGeluTanh{R"(
GeluTanh (X) => (Y) {
  half_d = Constant <value = double {0.5}> ()
  one_d = Constant <value = double {1}> ()
  three_d = Constant <value = double {3}> ()
  c_d = Constant <value = double {0.044715}> ()
  k_d = Constant <value = double {0.79788456080286536}> ()
  half = CastLike (half_d, X)
  one = CastLike (one_d, X)
  three = CastLike (three_d, X)
  c = CastLike (c_d, X)
  k = CastLike (k_d, X)
  cube = Pow (X, three)
  c_cube = Mul (cube, c)
  inner = Add (X, c_cube)
  u = Mul (inner, k)
  t = Tanh (u)
  t_1 = Add (t, one)
  half_x = Mul (X, half)
  Y = Mul (half_x, t_1)
}
)"};

constexpr int64_t kStandardGeluOpset = 20;

// What the matcher needs to know about the graph: who produces and who reads each value,
// and the scalar constants.
class GraphIndex {
 public:
  GraphIndex(const ir::Graph& graph, std::span<const std::string> keep)
      : graph_(graph), reads_(count_reads(graph, keep)) {
    for (size_t i = 0; i < graph.nodes.size(); ++i) {
      const ir::Node& node = graph.nodes[i];
      for (const std::string& out : node.outputs) producer_[out] = i;
      if (node.op_type == "Constant" && node.domain.empty() && node.outputs.size() == 1 &&
          node.attributes.size() == 1) {
        const ir::Attribute& a = node.attributes[0];
        if (a.name == "value" && a.t.defined() && a.t.numel() == 1) scalars_[node.outputs[0]] = a.t.item_as_double();
        if (a.name == "value_float") scalars_[node.outputs[0]] = a.f;
      }
    }
    std::unordered_set<std::string> inputs;
    for (const ir::ValueInfo& v : graph.inputs) inputs.insert(v.name);
    for (const auto& [name, tensor] : graph.initializers) {
      if (!inputs.contains(name) && tensor.numel() == 1 && is_float(tensor.dtype()))
        scalars_[name] = tensor.item_as_double();
    }
  }

  // The node producing `value` when it is an `op_type` of the default domain and `value`
  // has no reader but the one the pattern follows.
  const ir::Node* single_use(const std::string& value, std::string_view op_type) const {
    auto it = producer_.find(value);
    if (it == producer_.end() || reads(value) != 1) return nullptr;
    const ir::Node& node = graph_.nodes[it->second];
    return node.op_type == op_type && node.domain.empty() ? &node : nullptr;
  }

  // The only reader of `value` when it is an `op_type` of the default domain.
  const ir::Node* only_reader(const std::string& value, std::string_view op_type) const {
    if (reads(value) != 1) return nullptr;
    for (const ir::Node& node : graph_.nodes) {
      if (node.op_type != op_type || !node.domain.empty()) continue;
      for (const std::string& in : node.inputs) {
        if (in == value) return &node;
      }
    }
    return nullptr;
  }

  // Whether `value` is a one-element constant equal to `expected` (to float precision).
  bool is_constant(const std::string& value, double expected) const {
    auto it = scalars_.find(value);
    return it != scalars_.end() && std::abs(it->second - expected) <= 1e-6 * std::abs(expected);
  }

  // For a two-input node with `constant` on either side: the other input.
  std::optional<std::string> other_than(const ir::Node& node, double constant, bool commutes = true) const {
    if (node.inputs.size() != 2) return std::nullopt;
    if (is_constant(node.inputs[1], constant)) return node.inputs[0];
    if (commutes && is_constant(node.inputs[0], constant)) return node.inputs[1];
    return std::nullopt;
  }

  size_t reads(const std::string& value) const {
    auto it = reads_.find(value);
    return it == reads_.end() ? 0 : it->second;
  }

 private:
  static bool is_float(DType dtype) {
    return dtype == DType::kFloat32 || dtype == DType::kFloat64 || dtype == DType::kFloat16 ||
           dtype == DType::kBFloat16;
  }

  const ir::Graph& graph_;
  std::unordered_map<std::string, size_t> producer_;
  std::unordered_map<std::string, size_t> reads_;
  std::unordered_map<std::string, double> scalars_;
};

struct Match {
  std::string x;         // the GELU's input
  const ir::Node* last;  // the node whose output becomes the Gelu's
  std::vector<const ir::Node*> nodes;
};

// The end of the pattern, from `one_plus` = 1 + erf(..) or 1 + tanh(..): x * 0.5 * one_plus
// in any association of the two products.
bool match_product(const GraphIndex& index, const std::string& one_plus, Match& match) {
  const ir::Node* first = index.only_reader(one_plus, "Mul");
  if (first == nullptr || first->inputs.size() != 2) return false;
  const std::string& other = first->inputs[0] == one_plus ? first->inputs[1] : first->inputs[0];
  match.nodes.push_back(first);
  if (other == match.x || index.is_constant(other, 0.5)) {  // (x * one_plus) * 0.5, (0.5 * one_plus) * x
    const ir::Node* second = index.only_reader(first->outputs[0], "Mul");
    if (second == nullptr || second->inputs.size() != 2) return false;
    const std::string& rest = second->inputs[0] == first->outputs[0] ? second->inputs[1] : second->inputs[0];
    const bool completes = other == match.x ? index.is_constant(rest, 0.5) : rest == match.x;
    if (!completes) return false;
    match.nodes.push_back(second);
    match.last = second;
    return true;
  }
  const ir::Node* half_x = index.single_use(other, "Mul");  // (x * 0.5) * one_plus
  if (half_x == nullptr || index.other_than(*half_x, 0.5) != match.x) return false;
  match.nodes.push_back(half_x);
  match.last = first;
  return true;
}

// x * 0.5 * (1 + erf(x / sqrt 2)), anchored at the Erf node.
std::optional<Match> match_erf(const GraphIndex& index, const ir::Node& erf) {
  if (erf.inputs.size() != 1 || erf.outputs.size() != 1) return std::nullopt;
  Match match;
  match.nodes.push_back(&erf);
  if (const ir::Node* div = index.single_use(erf.inputs[0], "Div");
      div && index.other_than(*div, std::sqrt(2.0), false)) {
    match.x = div->inputs[0];
    match.nodes.push_back(div);
  } else if (const ir::Node* mul = index.single_use(erf.inputs[0], "Mul")) {
    const auto x = index.other_than(*mul, std::sqrt(0.5));
    if (!x) return std::nullopt;
    match.x = *x;
    match.nodes.push_back(mul);
  } else {
    return std::nullopt;
  }
  const ir::Node* add = index.only_reader(erf.outputs[0], "Add");
  if (add == nullptr || !index.other_than(*add, 1.0)) return std::nullopt;
  match.nodes.push_back(add);
  if (!match_product(index, add->outputs[0], match)) return std::nullopt;
  return match;
}

// `cube` = x^3 as Pow(x, 3) or x * (x * x); appends its nodes.
bool match_cube(const GraphIndex& index, const std::string& cube, const std::string& x,
                std::vector<const ir::Node*>& nodes) {
  if (const ir::Node* pow = index.single_use(cube, "Pow")) {
    if (pow->inputs.size() != 2 || pow->inputs[0] != x || !index.is_constant(pow->inputs[1], 3.0)) return false;
    nodes.push_back(pow);
    return true;
  }
  const ir::Node* outer = index.single_use(cube, "Mul");
  if (outer == nullptr || outer->inputs.size() != 2) return false;
  const std::string& square = outer->inputs[0] == x ? outer->inputs[1] : outer->inputs[0];
  const ir::Node* inner = index.single_use(square, "Mul");
  if ((outer->inputs[0] != x && outer->inputs[1] != x) || inner == nullptr || inner->inputs.size() != 2 ||
      inner->inputs[0] != x || inner->inputs[1] != x) {
    return false;
  }
  nodes.insert(nodes.end(), {outer, inner});
  return true;
}

// x * 0.5 * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3))), anchored at the Tanh node.
std::optional<Match> match_tanh(const GraphIndex& index, const ir::Node& tanh) {
  if (tanh.inputs.size() != 1 || tanh.outputs.size() != 1) return std::nullopt;
  Match match;
  match.nodes.push_back(&tanh);
  const ir::Node* scale = index.single_use(tanh.inputs[0], "Mul");
  const auto inner = scale ? index.other_than(*scale, std::sqrt(2.0 / 3.14159265358979323846)) : std::nullopt;
  const ir::Node* sum = inner ? index.single_use(*inner, "Add") : nullptr;
  if (sum == nullptr || sum->inputs.size() != 2) return std::nullopt;
  for (int side = 0; side < 2 && match.x.empty(); ++side) {
    const ir::Node* cubic = index.single_use(sum->inputs[1 - side], "Mul");
    const auto cube = cubic ? index.other_than(*cubic, 0.044715) : std::nullopt;
    if (cube && match_cube(index, *cube, sum->inputs[side], match.nodes)) {
      match.x = sum->inputs[side];
      match.nodes.insert(match.nodes.end(), {scale, sum, cubic});
    }
  }
  if (match.x.empty()) return std::nullopt;
  const ir::Node* add = index.only_reader(tanh.outputs[0], "Add");
  if (add == nullptr || !index.other_than(*add, 1.0)) return std::nullopt;
  match.nodes.push_back(add);
  if (!match_product(index, add->outputs[0], match)) return std::nullopt;
  return match;
}

// Removes Constant nodes and initializers that nothing reads any more.
void remove_unread_constants(ir::Model& model, const std::set<std::string>& candidates) {
  ir::Graph& graph = model.graph;
  const GraphIndex index(graph, {});
  std::erase_if(graph.nodes, [&](const ir::Node& node) {
    return node.op_type == "Constant" && node.domain.empty() && node.outputs.size() == 1 &&
           candidates.contains(node.outputs[0]) && index.reads(node.outputs[0]) == 0;
  });
  std::unordered_set<std::string> inputs;
  for (const ir::ValueInfo& v : graph.inputs) inputs.insert(v.name);
  std::erase_if(graph.initializers, [&](const auto& named) {
    return candidates.contains(named.first) && !inputs.contains(named.first) && index.reads(named.first) == 0;
  });
}

}  // namespace

size_t fuse_gelu(ir::Model& model, std::span<const std::string> keep) {
  ir::Graph& graph = model.graph;
  const int64_t opset = model.opset("").value_or(0);
  std::vector<Match> matches;  // their node pointers stay valid until the rewrite below
  {
    const GraphIndex index(graph, keep);
    for (const ir::Node& node : graph.nodes) {
      if (!node.domain.empty() || (node.op_type != "Erf" && node.op_type != "Tanh")) continue;
      std::optional<Match> match = node.op_type == "Erf" ? match_erf(index, node) : match_tanh(index, node);
      if (match) matches.push_back(std::move(*match));
    }
  }
  if (matches.empty()) return 0;

  std::set<size_t> removed;
  std::unordered_map<size_t, ir::Node> replacement;  // at the index of each match's last node
  std::set<std::string> constants;                   // inputs of removed nodes, perhaps unread now
  std::set<std::string> intermediates;               // values that no longer exist
  const ir::Node* base = graph.nodes.data();
  for (const Match& match : matches) {
    const bool tanh =
        std::any_of(match.nodes.begin(), match.nodes.end(), [](const ir::Node* n) { return n->op_type == "Tanh"; });
    ir::Node gelu;
    gelu.name = match.last->name;
    gelu.inputs = {match.x};
    gelu.outputs = {match.last->outputs[0]};
    if (opset >= kStandardGeluOpset) {
      gelu.op_type = "Gelu";
      if (tanh) gelu.attributes.push_back(ir::attr("approximate", "tanh"));
    } else {
      gelu.op_type = tanh ? "GeluTanh" : "Gelu";
      gelu.domain = std::string(ir::kOnnxtrainDomain);
      ir::FunctionLibrary::global().add_to(model, gelu.op_type);
    }
    for (const ir::Node* n : match.nodes) {
      const size_t at = static_cast<size_t>(n - base);
      removed.insert(at);
      for (const std::string& in : n->inputs) {
        if (in != match.x) constants.insert(in);
      }
      if (n != match.last) intermediates.insert(n->outputs.begin(), n->outputs.end());
    }
    replacement.emplace(static_cast<size_t>(match.last - base), std::move(gelu));
  }
  std::vector<ir::Node> nodes;
  nodes.reserve(graph.nodes.size());
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    if (auto it = replacement.find(i); it != replacement.end()) {
      nodes.push_back(std::move(it->second));
    } else if (!removed.contains(i)) {
      nodes.push_back(std::move(graph.nodes[i]));
    }
  }
  graph.nodes = std::move(nodes);
  std::erase_if(graph.value_info, [&](const ir::ValueInfo& v) { return intermediates.contains(v.name); });
  for (const std::string& value : intermediates) constants.erase(value);
  remove_unread_constants(model, constants);
  return matches.size();
}

}  // namespace onnxtrain::passes
