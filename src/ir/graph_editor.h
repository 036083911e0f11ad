// Adding to a graph under names nothing else uses: one NameSet for every builder that emits
// nodes (the gradient builder, the artifact builders, the passes), and a GraphEditor that
// appends single-output nodes with it.
#pragma once

#include <onnxtrain/tensor.h>

#include <string>
#include <unordered_set>
#include <vector>

#include "ir/graph.h"

namespace onnxtrain::ir {

// The node and value names of a graph (its subgraphs' too) and those handed out since.
class NameSet {
 public:
  NameSet() = default;
  explicit NameSet(const Graph& graph) { add_graph(graph); }

  void add_graph(const Graph& graph);
  bool contains(const std::string& name) const { return names_.contains(name); }
  // Claims `name`; false when it is taken.
  bool claim(const std::string& name) { return names_.insert(name).second; }
  // Claims `name` for an interface value (a graph input or output a builder defines); throws
  // an Error (kInvalidArgument) saying `why` when the model already uses it.
  void reserve(const std::string& name, const std::string& why);
  // `base` when nothing uses it, else `base_1`, `base_2`, ...; claimed.
  std::string fresh(const std::string& base);

 private:
  std::unordered_set<std::string> names_;
};

class GraphEditor {
 public:
  // `prefix` starts the names of the nodes and values it adds ("loss" -> "loss/Sub").
  GraphEditor(Graph& graph, std::string prefix) : graph_(graph), prefix_(std::move(prefix)), names_(graph) {}

  bool taken(const std::string& name) const { return names_.contains(name); }
  void reserve(const std::string& name, const std::string& why) { names_.reserve(name, why); }
  std::string fresh_name(const std::string& base) { return names_.fresh(base); }

  // Appends a node; its output is `output` when given (claimed with reserve()), else a
  // fresh name. Returns the output's name.
  std::string add(std::string op_type, std::vector<std::string> inputs, std::vector<Attribute> attributes = {},
                  const std::string& output = "", std::string domain = "");
  // A Constant node holding `value`.
  std::string constant(Tensor value);

  Graph& graph() { return graph_; }

 private:
  Graph& graph_;
  std::string prefix_;
  NameSet names_;
};

}  // namespace onnxtrain::ir
