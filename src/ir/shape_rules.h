// The rules of the shape inference (shape_inference.h): one per op, in the file of the op's
// family under src/ir/shape_rules/ (the families of src/ops/cpu and src/autodiff/rules),
// each family registering its own:
//
//   void matmul(ShapeContext& c) { ... c.set(0, c.dtype(0), out); }
//   const ShapeRuleRegistration kMatMulShapes{{{"MatMul", matmul}, {"Gemm", gemm}}};
//
// A rule reads its node's input types (each may be unknown) and sets what it can prove of
// the outputs; it never throws for a malformed node (the kernel reports that) and never
// guesses a size.
#pragma once

#include <onnxtrain/tensor.h>

#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "ir/graph.h"
#include "ir/shape_inference.h"

namespace onnxtrain::ir {

// One node's view of the types known so far.
class ShapeContext {
 public:
  ShapeContext(const Node& node, int64_t opset, std::vector<const ValueType*> inputs,
               std::vector<const Tensor*> constants)
      : node_(node),
        opset_(opset),
        inputs_(std::move(inputs)),
        constants_(std::move(constants)),
        outputs_(node.outputs.size()) {}

  const Node& node() const { return node_; }
  // The opset of the node's domain; 0 when unknown.
  int64_t opset() const { return opset_; }
  size_t input_count() const { return node_.inputs.size(); }
  size_t output_count() const { return node_.outputs.size(); }
  bool has_input(size_t i) const { return i < node_.inputs.size() && !node_.inputs[i].empty(); }
  // What is known of input i; nullptr when it is omitted or nothing is known.
  const ValueType* input(size_t i) const { return i < inputs_.size() ? inputs_[i] : nullptr; }
  DType dtype(size_t i) const { return input(i) ? input(i)->dtype : DType::kUndefined; }
  const SymbolicShape* shape(size_t i) const {
    const ValueType* t = input(i);
    return t && t->shape ? &*t->shape : nullptr;
  }
  // The value of input i when it is a constant.
  const Tensor* constant(size_t i) const { return i < constants_.size() ? constants_[i] : nullptr; }
  // Input i read as integers, when it is a constant of an integer type.
  std::optional<std::vector<int64_t>> ints(size_t i) const;

  std::optional<int64_t> int_attribute(std::string_view name) const;
  std::optional<float> float_attribute(std::string_view name) const;
  std::optional<std::vector<int64_t>> ints_attribute(std::string_view name) const;
  std::optional<std::string> string_attribute(std::string_view name) const;
  // Axes from the attribute (older opsets) or from constant input `input_index` (newer ones).
  std::optional<std::vector<int64_t>> axes(size_t input_index) const;

  // What the inference around the node knows of `value`: the outer-scope values a control
  // flow node's subgraphs read. nullptr when nothing is known.
  const ValueType* scope_value(const std::string& value) const { return scope_ ? scope_->find(value) : nullptr; }
  void set_scope(const ShapeInference* scope) { scope_ = scope; }

  void set(size_t output, DType dtype, std::optional<SymbolicShape> shape = std::nullopt);
  // Output `output` has the element type and shape of input `input`.
  void set_like(size_t output, size_t input);
  const std::vector<ValueType>& outputs() const { return outputs_; }

 private:
  const Node& node_;
  int64_t opset_;
  std::vector<const ValueType*> inputs_;
  std::vector<const Tensor*> constants_;
  std::vector<ValueType> outputs_;
  const ShapeInference* scope_ = nullptr;
};

using ShapeRule = void (*)(ShapeContext&);

struct ShapeRuleEntry {
  std::string_view op_type;
  ShapeRule rule;
};

// One table, (domain, op type) -> rule, filled by the family files.
class ShapeRuleTable {
 public:
  static ShapeRuleTable& global();
  void add(std::string_view domain, const ShapeRuleEntry& entry);
  // The rule for op `op_type` of `domain` ("" and "ai.onnx" alike), or nullptr.
  ShapeRule find(std::string_view domain, std::string_view op_type) const;
  // The op types of `domain` that have a rule.
  std::vector<std::string> op_types(std::string_view domain) const;

 private:
  std::unordered_map<std::string, ShapeRule> rules_;  // key: domain '\n' op type
};

struct ShapeRuleRegistration {
  ShapeRuleRegistration(std::initializer_list<ShapeRuleEntry> entries, std::string_view domain = "") {
    for (const ShapeRuleEntry& e : entries) ShapeRuleTable::global().add(domain, e);
  }
};

// ---- pieces the families share

inline Dim known(int64_t value) {
  return Dim{value, {}};
}
inline bool is_one(const Dim& d) {
  return d.value && *d.value == 1;
}
// A shape of `rank` unknown dimensions.
inline SymbolicShape unknown_dims(size_t rank) {
  return SymbolicShape(rank);
}
// The numpy broadcast of `shapes`; nullopt when one is unknown.
std::optional<SymbolicShape> broadcast(const std::vector<const SymbolicShape*>& shapes);
// The product of dimensions [begin, end) when all are known.
std::optional<int64_t> product(const SymbolicShape& shape, size_t begin, size_t end);
// `axis` in [-rank, rank) as an index, or nullopt.
std::optional<size_t> axis_index(int64_t axis, size_t rank);

// A sliding window over the spatial axes of X [N, C, D1, ...] (Conv, ConvTranspose, the
// pools): the output [N, channels, O1, ...] from the node's strides, dilations, pads (each
// named with `prefix`), auto_pad, ceil_mode and output_padding; an unknowable size is left
// unknown. Defined in shape_rules/conv.cc.
struct WindowShape {
  std::vector<int64_t> kernel;  // spatial sizes; -1 where unknown
  Dim channels;
  bool transposed = false;
  std::string prefix;  // "pool_" for the MaxPool fused into org.onnxtrain::FusedConv
};
SymbolicShape windowed_shape(const ShapeContext& c, const SymbolicShape& x, const WindowShape& window);

// `x` without the axes marked in `reduced`, or with them as 1 (keep_dims). Defined in
// shape_rules/reduce.cc.
SymbolicShape reduced_shape(const SymbolicShape& x, const std::vector<bool>& reduced, bool keep_dims);

// X [N, C, D1...] through a convolution whose weights (W [M, C/group, k1...], ConvTranspose's
// [C, M/group, k1...]) are input `weight_input`. Defined in shape_rules/conv.cc.
std::optional<SymbolicShape> convolution_shape(const ShapeContext& c, size_t weight_input, bool transposed);
// numpy.matmul's result: a 1-D operand gains an axis that the result drops; batch axes
// broadcast. Defined in shape_rules/matmul.cc.
std::optional<SymbolicShape> matmul_shape(const SymbolicShape* a, const SymbolicShape* b);

// Output 0 has input 0's element type and shape.
void same_as_input(ShapeContext& c);
// Output 0 is the broadcast of every input, of input 0's element type.
void broadcasting(ShapeContext& c);

}  // namespace onnxtrain::ir
