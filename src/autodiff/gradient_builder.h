// Reverse-mode differentiation of an ir::Model (see include/onnxtrain/gradient.h for the
// contract). The walk:
//
// 1. Forward: the values that depend on a differentiated value through floating-point
//    values (integers and booleans stop gradients).
// 2. Backward: of those, the values that some start output depends on. Nodes producing
//    one of them are the nodes to differentiate.
// 3. In reverse topological order, each such node's rule reads the (summed) gradients of
//    its outputs and adds contributions to its inputs'.
// 4. The differentiated values' gradients become graph outputs "<value>_grad".
#pragma once

#include <onnxtrain/gradient.h>

#include <map>
#include <memory>
#include <set>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "autodiff/gradient_context.h"
#include "ir/graph.h"
#include "ir/graph_editor.h"
#include "ir/shape_inference.h"

namespace onnxtrain::autodiff {

ir::Model build_gradient_graph(ir::Model model, const GradientRequest& request);

class GradientBuilder {
 public:
  GradientBuilder(ir::Model model, GradientRequest request);
  ir::Model build();

 private:
  friend class GradientContext;
  struct Start {
    std::string output;
    std::string seed;  // the incoming gradient input, or "" for the loss
  };

  void check_request();
  void index_graph();
  void mark_differentiable_paths();
  void seed();
  void differentiate(size_t node_index);
  void finish();
  std::string path_through(size_t node_index) const;

  // Emitting.
  std::vector<std::string> add_node(std::string op_type, std::string domain, std::vector<std::string> inputs,
                                    std::vector<ir::Attribute> attributes, size_t output_count);
  std::string accumulated_grad(const std::string& value);
  std::string constant(Tensor value, const std::string& base);
  std::string shape_of(const std::string& value);
  // The shape of a graph input declared with fixed dimensions, or of an initializer.
  std::optional<Shape> fixed_shape(const std::string& value) const;
  void use_function(const std::string& name);
  // Adds a model-local org.onnxtrain function that is not in the library, unless the model
  // has one of that name.
  void define_function(ir::Function function);

  ir::Model model_;
  GradientRequest request_;
  int64_t opset_ = 0;
  std::vector<Start> starts_;
  std::vector<size_t> order_;
  std::unordered_map<std::string, size_t> producer_;
  std::unordered_map<std::string, const Tensor*> constants_;
  std::unique_ptr<ir::ShapeInference> types_;
  ir::NameSet names_;

  // Values depending on a differentiated value, and from where (for error paths).
  std::unordered_map<std::string, std::pair<std::string, size_t>> forward_parent_;
  std::unordered_set<std::string> forward_;
  // Values some start output depends on, and towards which output (for error paths).
  std::unordered_map<std::string, std::pair<size_t, std::string>> backward_child_;
  std::unordered_set<std::string> backward_;

  std::map<std::string, std::vector<std::string>> contributions_;
  std::vector<ir::Node> backward_nodes_;
  std::vector<ir::Node> before_forward_;
  std::map<size_t, std::vector<ir::Node>> after_forward_;
  std::map<std::string, std::string> shape_cache_;
  std::map<std::string, std::string> constant_cache_;
  std::set<std::string> used_functions_;
  std::string name_prefix_;  // of the node being differentiated
  size_t current_node_ = 0;
};

}  // namespace onnxtrain::autodiff
