// What a gradient rule sees: one forward node, the gradients of its outputs, and helpers
// that emit the nodes computing the gradients of its inputs.
//
// A rule reads `grad_of_output(i)` ("" when that gradient is absent), and for each input
// with `needs_grad(i)` computes a contribution of the input's shape and passes it to
// `set_input_grad(i, value)`. It never needs static shapes: where a size matters it emits
// `shape_of(value)` and computes with standard ONNX ops at run time.
//
//   void relu(GradientContext& g) {
//     g.set_input_grad(0, g.call("ReluGrad", {g.grad_of_output(0), g.output(0)}));
//   }
#pragma once

#include <onnxtrain/tensor.h>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ir/functions.h"
#include "ir/graph.h"
#include "ir/shape_inference.h"

namespace onnxtrain::autodiff {

class GradientBuilder;

using ir::attr;  // attributes for emitted nodes
// Rules define the org.onnxtrain functions they emit next to themselves.
using ir::FunctionLibrary;
using ir::FunctionRegistration;
using ir::kOnnxtrainDomain;

class GradientContext {
 public:
  GradientContext(GradientBuilder& builder, size_t node_index) : builder_(builder), node_index_(node_index) {}

  // --- the forward node
  const ir::Node& node() const;
  // The opset of the node's domain.
  int64_t opset() const;
  size_t input_count() const { return node().inputs.size(); }
  size_t output_count() const { return node().outputs.size(); }
  bool has_input(size_t i) const { return i < input_count() && !node().inputs[i].empty(); }
  bool has_output(size_t i) const { return i < output_count() && !node().outputs[i].empty(); }
  // Name of input/output i; "" when omitted.
  const std::string& input(size_t i) const;
  const std::string& output(size_t i) const;
  // Output i, which the rule needs from the forward pass: when the node omits it (an
  // optional output such as MaxPool's Indices), it is added under a new name.
  std::string require_output(size_t i, std::string_view hint);
  // Makes the forward node compute more, for a rule that needs values from inside a
  // subgraph (Scan and Loop save the state entering each iteration as extra scan outputs):
  // `attributes` replace the node's attributes of the same names (or are added), and `count`
  // new outputs, named from `hint`, become outputs first, first + 1, ... (outputs the node
  // omits before `first` stay omitted). Returns the new outputs' names. What the node
  // computed before keeps its name and value.
  std::vector<std::string> extend_node(std::vector<ir::Attribute> attributes, size_t first, size_t count,
                                       std::string_view hint);

  bool has_attribute(std::string_view name) const { return node().attribute(name) != nullptr; }
  int64_t attr_int(std::string_view name, int64_t fallback) const;
  float attr_float(std::string_view name, float fallback) const;
  std::string attr_string(std::string_view name, std::string fallback) const;
  std::vector<int64_t> attr_ints(std::string_view name, std::vector<int64_t> fallback = {}) const;
  // The value of input i when it is known while building (an initializer no feed can
  // override, or a Constant node's output); nullptr otherwise.
  const Tensor* constant_input(size_t i) const;
  // Input i read as integers, when it is a constant.
  std::optional<std::vector<int64_t>> constant_ints(size_t i) const;

  // --- static knowledge (may be missing; never required for correctness)
  DType dtype(const std::string& value) const;
  std::optional<size_t> rank(const std::string& value) const;

  // --- gradients
  // The gradient flowing into output i (the sum of its contributions); "" when absent.
  std::string grad_of_output(size_t i);
  // True when some differentiated value depends on input i and the output needs it.
  bool needs_grad(size_t i) const;
  // Adds `grad` (the shape of input i) to the gradient of input i.
  void set_input_grad(size_t i, const std::string& grad);
  // The same for any value of the graph: the outer-scope values a control-flow node's
  // subgraphs read (ir::outer_scope_reads), which are not among its inputs.
  bool needs_grad_of(const std::string& value) const;
  void add_grad(const std::string& value, const std::string& grad);
  // A value name no other value of the model has, from `hint`.
  std::string fresh_name(const std::string& hint);
  // Defines the org.onnxtrain function `name` in the model (a subgraph's gradient calls it).
  void use_function(const std::string& name);
  // The same for a function a subgraph's gradient model defines: a library function by its
  // name, one built for a node (call_function) by its definition.
  void use_function(const ir::Function& function);
  // The model being differentiated (its opsets and functions, for a subgraph's gradient).
  const ir::Model& model() const;
  // What static inference knows of `value`; nullptr when nothing.
  const ir::ValueType* type_of(const std::string& value) const;

  // --- emitting nodes (default domain, at the model's opset)
  std::string emit(std::string op_type, std::vector<std::string> inputs, std::vector<ir::Attribute> attributes = {});
  std::vector<std::string> emit_n(std::string op_type, std::vector<std::string> inputs,
                                  std::vector<ir::Attribute> attributes, size_t output_count);
  // A call of the org.onnxtrain function `name` (its definition is added to the model).
  std::string call(std::string name, std::vector<std::string> inputs, std::vector<ir::Attribute> attributes = {});
  // `wanted[i]` false leaves output i out (""), so a fused kernel may skip computing it.
  std::vector<std::string> call_n(std::string name, std::vector<std::string> inputs,
                                  std::vector<ir::Attribute> attributes, size_t output_count,
                                  const std::vector<bool>& wanted = {});

  // A call of `function`, an org.onnxtrain function built for this node because its body
  // depends on the node's attributes and inputs (the recurrent nets' gradients,
  // autodiff/recurrent_body.h; named by ir::kernel_function_name, so onnxtrain runs the
  // kernel it stands for). The model gets its definition unless it has it. `wanted` as in
  // call_n.
  std::vector<std::string> call_function(ir::Function function, std::vector<std::string> inputs,
                                         std::vector<ir::Attribute> attributes, size_t output_count,
                                         const std::vector<bool>& wanted = {});

  // A node of the org.onnxtrain op `name` that has a kernel (src/ops/cpu) and no body: a
  // recurrent net's gradient in a model whose opset is older than its body needs
  // (autodiff/recurrent_body.h) or whose element type the builder does not know. The gradient
  // graph then runs on onnxtrain only. `wanted` as in call_n.
  std::vector<std::string> emit_kernel_op(std::string name, std::vector<std::string> inputs,
                                          std::vector<ir::Attribute> attributes, size_t output_count,
                                          const std::vector<bool>& wanted = {});

  // --- helpers
  // Shape(value); emitted once per value, right after the value is computed, so that the
  // forward tensor itself need not stay alive for it.
  std::string shape_of(const std::string& value);
  // A 1-D int64 constant.
  std::string ints(const std::vector<int64_t>& values);
  // A scalar int64 constant.
  std::string int_scalar(int64_t value);
  // `value` converted to `like`'s element type (Cast when that type is known, else
  // CastLike, which needs opset 15).
  std::string cast_like(const std::string& value, const std::string& like);
  // A scalar constant of `like`'s element type.
  std::string scalar(double value, const std::string& like);
  // `grad` summed over the axes along which `value` was broadcast, so that it has
  // `value`'s shape; nothing is emitted when the shapes are statically equal.
  std::string reduce_to_shape(const std::string& grad, const std::string& value);
  // Zeros of `like`'s element type and the run-time shape `shape` (an int64 1-D value).
  std::string zeros(const std::string& shape, const std::string& like);
  // The rank of `value` as a scalar int64, at run time.
  std::string rank_of(const std::string& value);

  // An Error that names the node and the op (the model asks for something the rule does
  // not support).
  [[noreturn]] void fail(const std::string& message) const;

 private:
  // A node of the org.onnxtrain op `name` (a function call or a kernel-only op), with the
  // outputs `wanted` leaves out cleared ("", onnxruntime's inlining needs every declared one).
  std::vector<std::string> add_onnxtrain_node(std::string name, std::vector<std::string> inputs,
                                              std::vector<ir::Attribute> attributes, size_t output_count,
                                              const std::vector<bool>& wanted);

  GradientBuilder& builder_;
  size_t node_index_;
};

using GradientRule = void (*)(GradientContext&);

// One table, op type -> rule, filled by the family files (rules/*.cc), each with its own:
//   const RuleRegistration kElementwise{{{"Add", add}, {"Sub", sub}, ...}};
struct RuleEntry {
  std::string_view op_type;
  GradientRule rule;
  // The rule differentiates the op's integer outputs too, as if they were real numbers: the
  // straight-through estimator of QuantizeLinear, whose quantized output carries gradients
  // back to its float input (rules/quantize.cc).
  bool straight_through = false;
};

class RuleTable {
 public:
  static RuleTable& global();
  void add(std::string_view domain, const RuleEntry& entry);
  // The rule for op `op_type` of `domain`, or nullptr.
  GradientRule find(std::string_view domain, std::string_view op_type) const;
  // True when that rule differentiates integer outputs (RuleEntry::straight_through).
  bool straight_through(std::string_view domain, std::string_view op_type) const;
  std::vector<std::string> op_types(std::string_view domain) const;
  // (domain, op type) of every rule, in registration order.
  std::vector<std::pair<std::string, std::string>> all() const;

 private:
  struct Entry {
    std::string domain;
    std::string op_type;
    GradientRule rule;
    bool straight_through = false;
  };
  std::vector<Entry> entries_;
};

struct RuleRegistration {
  RuleRegistration(std::initializer_list<RuleEntry> entries, std::string_view domain = "") {
    for (const RuleEntry& e : entries) RuleTable::global().add(domain, e);
  }
};

// The rule for piecewise-constant ops (Floor, Ceil, Round, Sign): the gradient is zero almost
// everywhere, so input 0 gets zeros of its shape, as in torch (a requested gradient that
// reaches the outputs only through such ops is still an output of the gradient graph).
void piecewise_constant(GradientContext& g);

}  // namespace onnxtrain::autodiff
