// Element types and static shapes of a graph's values, as far as they can be known while
// building a gradient graph: declared types (inputs, outputs, value_info, initializers)
// plus a small propagation over the ops. Dimensions may be symbolic ("batch") or unknown;
// nothing here ever needs a concrete size, and "unknown" only makes the builder emit a
// run-time computation it could otherwise skip.
#pragma once

#include <onnxtrain/dtype.h>
#include <onnxtrain/tensor.h>

#include <functional>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "ir/graph.h"

namespace onnxtrain::autodiff {

using StaticShape = std::vector<ir::Dim>;

class ValueTypes {
 public:
  // The value of a constant (an initializer no feed overrides, a Constant's output).
  using ConstantLookup = std::function<const Tensor*(const std::string&)>;

  // Declared types of the graph's inputs, outputs, value_info and initializers, then
  // the types of every node output that follow from them, in `order`.
  ValueTypes(const ir::Graph& graph, const std::vector<size_t>& order, int64_t opset, ConstantLookup constants);

  // Sets the types of `node`'s outputs from its inputs (keeps declared ones).
  void infer(const ir::Node& node);
  void set_dtype(const std::string& value, DType dtype);
  // `value` has the shape of `like` (e.g. a gradient and its value).
  void set_shape_like(const std::string& value, const std::string& like);

  DType dtype(const std::string& value) const;
  const std::optional<StaticShape>& shape(const std::string& value) const;
  std::optional<size_t> rank(const std::string& value) const;
  // True when both shapes are statically known and equal, dimension by dimension.
  bool same_shape(const std::string& a, const std::string& b) const;
  // True when `value` holds a floating-point type, or its type is unknown.
  bool differentiable(const std::string& value) const;

 private:
  struct Entry {
    DType dtype = DType::kUndefined;
    std::optional<StaticShape> shape;
    bool shape_declared = false;
  };
  void declare(const ir::ValueInfo& info);
  void set_shape(const std::string& value, std::optional<StaticShape> shape);
  void infer_shape(const ir::Node& node);
  std::optional<std::vector<int64_t>> constant_ints(const std::string& value) const;

  std::unordered_map<std::string, Entry> entries_;
  int64_t opset_;
  ConstantLookup constants_;
};

bool dims_equal(const ir::Dim& a, const ir::Dim& b);

}  // namespace onnxtrain::autodiff
