// Small tools the artifact builders share: typed constants, the types of a forward model's
// values (and ir::GraphEditor, which appends nodes under names nothing else uses).
#pragma once

#include <onnxtrain/tensor.h>

#include <map>
#include <span>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "ir/graph_editor.h"
#include "ir/shape_inference.h"

namespace onnxtrain::training {

// A scalar, or a 1-D tensor of `values`, of the floating-point type `dtype`.
Tensor float_scalar(DType dtype, double value);
Tensor float_vector(DType dtype, std::span<const double> values);
// `values` in `shape`, of the floating-point type `dtype`.
Tensor float_tensor(DType dtype, Shape shape, std::span<const double> values);

// The types of a forward model's values as the artifact builders see them: what inference
// proves from the graph inputs, completed by the model's declarations (outputs, value_info).
// Declared dimension names are not taken: exporters name output axes freely (a flattened
// [batch * seq, vocab] output may call its first axis "batch"), and a label input that reused
// such a name would be tied to the model input's axis of that name.
class ForwardTypes {
 public:
  explicit ForwardTypes(const ir::Model& model);
  ir::ValueType type_of(const std::string& name) const;

 private:
  const ir::Model& model_;
  std::map<std::string, ir::ValueType> inferred_;
};

}  // namespace onnxtrain::training
