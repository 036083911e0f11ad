#include "training/artifacts_graph.h"

#include <onnxtrain/error.h>

#include "core/dispatch.h"

namespace onnxtrain::training {

Tensor float_scalar(DType dtype, double value) {
  return dispatch<ONNXTRAIN_FLOAT_TYPES>(dtype, "a constant", [&]<typename T>() {
    return Tensor::scalar<T>(static_cast<T>(static_cast<compute_type_t<T>>(value)));
  });
}

Tensor float_vector(DType dtype, std::span<const double> values) {
  return float_tensor(dtype, {static_cast<int64_t>(values.size())}, values);
}

Tensor float_tensor(DType dtype, Shape shape, std::span<const double> values) {
  return dispatch<ONNXTRAIN_FLOAT_TYPES>(dtype, "a constant", [&]<typename T>() {
    std::vector<T> typed;
    for (double v : values) typed.push_back(static_cast<T>(static_cast<compute_type_t<T>>(v)));
    return Tensor::from_vector<T>(shape, typed);
  });
}

namespace {

// What inference proves from the graph inputs alone (infer_types lets declarations win).
std::map<std::string, ir::ValueType> infer_undeclared_types(const ir::Model& model) {
  ir::Model probe = model;
  probe.graph.value_info.clear();
  for (ir::ValueInfo& v : probe.graph.outputs) v.shape.reset();
  return ir::infer_types(probe);
}

}  // namespace

ForwardTypes::ForwardTypes(const ir::Model& model) : model_(model), inferred_(infer_undeclared_types(model)) {}

ir::ValueType ForwardTypes::type_of(const std::string& name) const {
  ir::ValueType type;
  if (auto it = inferred_.find(name); it != inferred_.end()) type = it->second;
  std::vector<const ir::ValueInfo*> declared;
  for (const ir::ValueInfo& v : model_.graph.outputs) declared.push_back(&v);
  for (const ir::ValueInfo& v : model_.graph.value_info) declared.push_back(&v);
  for (const ir::ValueInfo* info : declared) {
    const ir::ValueInfo& v = *info;
    if (v.name != name) continue;
    if (type.dtype == DType::kUndefined) type.dtype = v.dtype;
    if (!v.shape) continue;
    if (!type.shape) {
      type.shape.emplace();
      for (const ir::Dim& d : *v.shape) type.shape->push_back({d.value, ""});
    } else if (type.shape->size() == v.shape->size()) {
      for (size_t i = 0; i < v.shape->size(); ++i) {
        ir::Dim& dim = (*type.shape)[i];
        if (!dim.value && (*v.shape)[i].value) dim = {(*v.shape)[i].value, ""};
      }
    }
  }
  return type;
}

}  // namespace onnxtrain::training
