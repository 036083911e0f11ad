// Static dtype and shape inference with symbolic dimensions ("batch", "seq").
//
// Fills Graph::value_info with what it can prove about every node output: the element
// type always (when the inputs' types are known), the shape where a rule for the op exists
// and the inputs' shapes are known. Dimensions stay symbolic: MatMul of [batch, seq, 64]
// and [64, 128] is [batch, seq, 128]. Unknowable dimensions get no value and no name. The
// runtime does not depend on it (it plans memory from the concrete shapes of each run); the
// CLI, autodiff and the training builders read it.
#pragma once

#include <map>
#include <string>

#include "ir/graph.h"

namespace onnxtrain::ir {

// What is known of one value.
struct ValueType {
  DType dtype = DType::kUndefined;
  std::optional<std::vector<Dim>> shape;
};

// Infers the types of every value of the model's main graph; returns them by name (graph
// inputs, initializers and node outputs).
std::map<std::string, ValueType> infer_types(const Model& model);

// infer_types, written into model.graph.value_info (replacing entries for node outputs).
void annotate_types(Model& model);

}  // namespace onnxtrain::ir
