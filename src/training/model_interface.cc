#include "training/model_interface.h"

#include <algorithm>
#include <map>
#include <set>
#include <utility>

#include "ir/shape_inference.h"

namespace onnxtrain::training {
namespace {

std::optional<std::string> strip_suffix(std::string_view name, std::string_view suffix) {
  if (name.size() <= suffix.size() || !name.ends_with(suffix)) return std::nullopt;
  return std::string(name.substr(0, name.size() - suffix.size()));
}

using FunctionKey = std::pair<std::string, std::string>;  // (domain, name)

// The model-local functions that `nodes` call, directly or through other functions.
std::set<FunctionKey> called_functions(const ir::Model& model, const std::vector<ir::Node>& nodes) {
  std::set<FunctionKey> called;
  std::vector<const std::vector<ir::Node>*> pending{&nodes};
  while (!pending.empty()) {
    const std::vector<ir::Node>* body = pending.back();
    pending.pop_back();
    for (const ir::Node& node : *body) {
      const ir::Function* f = model.function(node.domain, node.op_type);
      if (f == nullptr || !called.emplace(f->domain, f->name).second) continue;
      pending.push_back(&f->nodes);
    }
  }
  return called;
}

}  // namespace

std::optional<std::string> trained_parameter_of_buffer(std::string_view input) {
  return strip_suffix(input, kGradientBufferSuffix);
}

std::optional<std::string> trained_parameter_of_output(std::string_view output) {
  return strip_suffix(output, kAccumulatedGradientSuffix);
}

std::optional<std::string> running_statistic_of_output(std::string_view output) {
  return strip_suffix(output, kRunningStatisticSuffix);
}

void prune_for_inference(ir::Model& model, const std::vector<std::string>& outputs, const CheckpointState& state,
                         const std::string& file) {
  ir::Graph& graph = model.graph;
  if (outputs.empty())
    throw Error("export_model_for_inferencing: name at least one graph output", ErrorKind::kInvalidArgument);

  // Any value of the model may become an output (the forward model's outputs are inner
  // values of the eval model, which ends in the loss).
  std::map<std::string, ir::ValueType> types;
  std::vector<ir::ValueInfo> kept_outputs;
  for (const std::string& name : outputs) {
    auto declared = std::find_if(graph.outputs.begin(), graph.outputs.end(),
                                 [&](const ir::ValueInfo& v) { return v.name == name; });
    if (declared != graph.outputs.end()) {
      kept_outputs.push_back(*declared);
      continue;
    }
    const bool produced = std::any_of(graph.nodes.begin(), graph.nodes.end(), [&](const ir::Node& node) {
      return std::find(node.outputs.begin(), node.outputs.end(), name) != node.outputs.end();
    });
    if (!produced) {
      std::string known;
      for (const auto& v : graph.outputs) known += (known.empty() ? "" : ", ") + v.name;
      throw Error(
          "export_model_for_inferencing: no node of " + file + " computes '" + name + "' (its outputs: " + known + ")",
          ErrorKind::kInvalidArgument);
    }
    if (types.empty()) types = ir::infer_types(model);
    ir::ValueInfo info;
    info.name = name;
    if (auto it = types.find(name); it != types.end()) {
      info.dtype = it->second.dtype;
      info.shape = it->second.shape;
    }
    kept_outputs.push_back(std::move(info));
  }

  // Walk back from the outputs in reverse topological order.
  std::set<std::string> needed(outputs.begin(), outputs.end());
  std::vector<bool> keep(graph.nodes.size(), false);
  const std::vector<size_t> order = ir::topological_order(graph);
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    const ir::Node& node = graph.nodes[*it];
    const bool used = std::any_of(node.outputs.begin(), node.outputs.end(),
                                  [&](const std::string& out) { return !out.empty() && needed.contains(out); });
    if (!used) continue;
    keep[*it] = true;
    for (const std::string& in : node.inputs) {
      if (!in.empty()) needed.insert(in);
    }
  }
  std::vector<ir::Node> nodes;
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    if (keep[i]) nodes.push_back(std::move(graph.nodes[i]));
  }
  graph.nodes = std::move(nodes);
  graph.outputs = std::move(kept_outputs);

  std::vector<std::pair<std::string, Tensor>> initializers;
  for (auto& [name, tensor] : graph.initializers) {
    if (needed.contains(name) && !state.has_parameter(name)) initializers.emplace_back(name, std::move(tensor));
  }
  std::vector<ir::ValueInfo> inputs;
  for (ir::ValueInfo& input : graph.inputs) {
    if (!needed.contains(input.name)) continue;
    if (const Parameter* p = state.find_parameter(input.name)) {
      initializers.emplace_back(input.name, p->data.clone());
      continue;
    }
    if (graph.initializer(input.name) == nullptr) inputs.push_back(std::move(input));
  }
  graph.initializers = std::move(initializers);
  graph.inputs = std::move(inputs);
  std::erase_if(graph.value_info, [&](const ir::ValueInfo& v) { return !needed.contains(v.name); });

  const std::set<FunctionKey> called = called_functions(model, graph.nodes);
  std::erase_if(model.functions, [&](const ir::Function& f) { return !called.contains({f.domain, f.name}); });
}

}  // namespace onnxtrain::training
