#include "training/artifacts_graph.h"

#include <onnxtrain/error.h>

#include "core/dispatch.h"

namespace onnxtrain::training {

Tensor float_scalar(DType dtype, double value) {
  return dispatch<ONNXTRAIN_FLOAT_TYPES>(dtype, "a constant", [&]<typename T>() {
    return Tensor::scalar<T>(static_cast<T>(static_cast<compute_type_t<T>>(value)));
  });
}

Tensor float_vector(DType dtype, std::span<const float> values) {
  return dispatch<ONNXTRAIN_FLOAT_TYPES>(dtype, "a constant", [&]<typename T>() {
    std::vector<T> typed;
    for (float v : values) typed.push_back(static_cast<T>(static_cast<compute_type_t<T>>(v)));
    return Tensor::from_vector<T>({static_cast<int64_t>(values.size())}, typed);
  });
}

}  // namespace onnxtrain::training
