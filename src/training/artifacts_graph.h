// Small tools the artifact builders share: a GraphEditor that appends nodes to a graph
// under names nothing else uses, and typed constants.
#pragma once

#include <onnxtrain/tensor.h>

#include <span>
#include <string>
#include <unordered_set>
#include <vector>

#include "ir/graph.h"

namespace onnxtrain::training {

class GraphEditor {
 public:
  // `prefix` starts the names of the nodes and values it adds ("loss" -> "loss/Sub").
  GraphEditor(ir::Graph& graph, std::string prefix);

  bool taken(const std::string& name) const { return names_.contains(name); }
  // Claims `name` for an interface value (a graph input or output the artifacts define);
  // throws an Error (kInvalidArgument) saying `why` when the model already uses it.
  void reserve(const std::string& name, const std::string& why);
  // `base` when nothing uses it, else `base_1`, `base_2`, ...
  std::string fresh_name(const std::string& base);

  // Appends a node; its output is `output` when given (claimed with reserve()), else a
  // fresh name. Returns the output's name.
  std::string add(std::string op_type, std::vector<std::string> inputs, std::vector<ir::Attribute> attributes = {},
                  const std::string& output = "", std::string domain = "");
  // A Constant node holding `value`.
  std::string constant(Tensor value);

  ir::Graph& graph() { return graph_; }

 private:
  void collect_names(const ir::Graph& graph);

  ir::Graph& graph_;
  std::string prefix_;
  std::unordered_set<std::string> names_;
};


// A scalar, or a 1-D tensor of `values`, of the floating-point type `dtype`.
Tensor float_scalar(DType dtype, double value);
Tensor float_vector(DType dtype, std::span<const float> values);

}  // namespace onnxtrain::training
