// Static element-type and shape inference with symbolic dimensions ("batch", "seq"): the one
// inference of onnxtrain, used by the executor (the types of a model's outputs), the
// gradient builder (as it emits nodes) and the artifact builders.
//
// It knows what it can prove about every value: the element type always (when the inputs'
// types are known), the shape where a rule for the op exists and the inputs' shapes are
// known. Dimensions stay symbolic: MatMul of [batch, seq, 64] and [64, 128] is
// [batch, seq, 128]. An unknowable dimension has no value and no name. The rules live by op
// family in src/ir/shape_rules/ (see shape_rules.h); a call of a function (an org.onnxtrain
// op, a model-local function) without a rule of its own is inferred through its body.
// Nothing here needs a concrete size; "unknown" only costs precision, never correctness.
#pragma once

#include <onnxtrain/dtype.h>
#include <onnxtrain/inference_session.h>
#include <onnxtrain/tensor.h>

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "ir/graph.h"

namespace onnxtrain::ir {

using SymbolicShape = std::vector<Dim>;

// What is known of one value.
struct ValueType {
  DType dtype = DType::kUndefined;
  std::optional<SymbolicShape> shape;  // nullopt: not even the rank is known
};

// True when both dimensions are the same fixed size, or the same symbolic name.
bool dims_equal(const Dim& a, const Dim& b);

class ShapeInference {
 public:
  // The value of a constant input (an initializer no feed overrides, a Constant's output).
  using ConstantLookup = std::function<const Tensor*(const std::string&)>;
  // The definition of a function op, or nullptr.
  using FunctionLookup = std::function<const Function*(std::string_view domain, std::string_view name)>;

  // Starts from what `graph` declares (initializers, inputs, value_info, outputs). Without a
  // constant lookup, the initializers that no graph input overrides are the constants;
  // Constant nodes add theirs as they are inferred. Without a function lookup, the
  // org.onnxtrain library is asked. `default_opset` is the default domain's opset (0:
  // unknown), which decides between an attribute and an input in ops that moved one.
  ShapeInference(const Graph& graph, int64_t default_opset, ConstantLookup constants = {},
                 FunctionLookup functions = {});

  // Sets the types of `node`'s outputs from its inputs. A declared shape keeps what inference
  // cannot prove, and gives way to a more precise inferred one.
  void infer(const Node& node);
  // Infers every node of the graph it was made from, in topological order.
  void infer_graph(const Graph& graph);

  // The element type of `value`, when it is not known yet.
  void set_dtype(const std::string& value, DType dtype);
  // `value` has the element type and shape of `like` (a gradient and its value).
  void set_type_like(const std::string& value, const std::string& like);

  const ValueType* find(const std::string& value) const;
  DType dtype(const std::string& value) const;
  const std::optional<SymbolicShape>& shape(const std::string& value) const;
  std::optional<size_t> rank(const std::string& value) const;
  // True when both shapes are statically known and equal, dimension by dimension.
  bool same_shape(const std::string& a, const std::string& b) const;
  // Every value known so far, by name.
  std::map<std::string, ValueType> types() const;

 private:
  struct Entry {
    ValueType type;
    bool shape_declared = false;
  };
  void declare(const ValueInfo& info);
  void set(const std::string& value, const ValueType& type);
  void set_shape(Entry& entry, std::optional<SymbolicShape> shape);
  std::vector<ValueType> infer_call(const Node& node, const Function& function, int depth) const;
  std::vector<ValueType> infer_outputs(const Node& node, int depth) const;
  const Tensor* constant(const std::string& value) const;

  int64_t default_opset_;
  ConstantLookup constants_;
  FunctionLookup functions_;
  std::unordered_map<std::string, Entry> entries_;
  // Constant nodes' values, and without a constant lookup the initializers no input overrides.
  std::unordered_map<std::string, Tensor> own_constants_;
};

// The types of every value of the model's main graph, by name: what the model declares,
// refined by inference over its nodes.
std::map<std::string, ValueType> infer_types(const Model& model);

// How the public API describes a value's type (-1 for a size not known).
ValueMetadata metadata_of(const std::string& name, const ValueType& type);

}  // namespace onnxtrain::ir
