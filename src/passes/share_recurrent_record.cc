#include "passes/share_recurrent_record.h"

#include <set>
#include <string>
#include <vector>

#include "ir/functions.h"

namespace onnxtrain::passes {
namespace {

struct Cell {
  const char* op;
  size_t inputs;        // of the forward op
  size_t outputs;       // of the forward op; the record follows
  size_t record_input;  // of the gradient: after the forward's inputs and its outputs' gradients
};

constexpr Cell kCells[] = {{"RNN", 6, 2, 8}, {"GRU", 6, 2, 8}, {"LSTM", 8, 3, 11}};

const Cell* cell_of(const ir::Node& node) {
  if (!node.domain.empty()) return nullptr;
  for (const Cell& c : kCells) {
    if (node.op_type == c.op) return &c;
  }
  return nullptr;
}

// The recurrent ops' attributes are numbers, strings and lists of them.
bool same_attribute(const ir::Attribute& x, const ir::Attribute& y) {
  return x.name == y.name && x.type == y.type && x.f == y.f && x.i == y.i && x.s == y.s && x.floats == y.floats &&
         x.ints == y.ints && x.strings == y.strings && x.ref_attr_name == y.ref_attr_name;
}

// Whether `grad` differentiates `forward`: the same inputs (omitted ones alike) and attributes.
bool differentiates(const ir::Node& grad, const ir::Node& forward, const Cell& cell) {
  if (grad.domain != ir::kOnnxtrainDomain || grad.op_type != std::string(cell.op) + "Grad") return false;
  if (grad.inputs.size() > cell.record_input) return false;  // it has a record already
  for (size_t i = 0; i < cell.inputs; ++i) {
    const std::string none;
    const std::string& a = i < forward.inputs.size() ? forward.inputs[i] : none;
    const std::string& b = i < grad.inputs.size() ? grad.inputs[i] : none;
    if (a != b) return false;
  }
  if (forward.inputs.size() > cell.inputs || grad.attributes.size() != forward.attributes.size()) return false;
  for (const ir::Attribute& a : forward.attributes) {
    const ir::Attribute* b = grad.attribute(a.name);
    if (b == nullptr || !same_attribute(a, *b)) return false;
  }
  return true;
}

}  // namespace

size_t share_recurrent_record(ir::Model& model) {
  ir::Graph& graph = model.graph;
  std::set<std::string> names;
  for (const ir::ValueInfo& v : graph.inputs) names.insert(v.name);
  for (const auto& [name, tensor] : graph.initializers) names.insert(name);
  for (const ir::Node& node : graph.nodes) names.insert(node.outputs.begin(), node.outputs.end());
  size_t shared = 0;
  for (ir::Node& forward : graph.nodes) {
    const Cell* cell = cell_of(forward);
    if (cell == nullptr || forward.outputs.size() > cell->outputs) continue;
    std::vector<ir::Node*> grads;
    for (ir::Node& node : graph.nodes) {
      if (differentiates(node, forward, *cell)) grads.push_back(&node);
    }
    if (grads.empty()) continue;
    std::string record = (forward.name.empty() ? std::string(cell->op) : forward.name) + "_record";
    for (int k = 1; names.contains(record); ++k) record += std::to_string(k);
    names.insert(record);
    forward.domain = ir::kOnnxtrainDomain;
    forward.op_type = std::string(cell->op) + "Training";
    forward.opset = 1;  // the model need not import the domain
    forward.outputs.resize(cell->outputs);
    forward.outputs.push_back(record);
    for (ir::Node* grad : grads) {
      grad->inputs.resize(cell->record_input);
      grad->inputs.push_back(record);
    }
    ++shared;
  }
  return shared;
}

}  // namespace onnxtrain::passes
