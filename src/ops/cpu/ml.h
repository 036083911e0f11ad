// What the ai.onnx.ml kernels (ml.cc, ml_trees.cc) share.
#pragma once

#include <string_view>
#include <vector>

#include "core/dispatch.h"
#include "ops/kernel.h"

namespace onnxtrain::ml {

inline constexpr const char* kMl = "ai.onnx.ml";

// A float-typed tensor attribute as doubles; empty when absent.
inline std::vector<double> doubles_of(const KernelInfo& info, std::string_view name) {
  const Tensor* t = info.tensor_attribute(name);
  if (t == nullptr) return {};
  std::vector<double> out(static_cast<size_t>(t->numel()));
  dispatch<ONNXTRAIN_NUMERIC_TYPES>(t->dtype(), name, [&]<typename T>() {
    const T* v = t->data<T>();
    for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<double>(static_cast<compute_type_t<T>>(v[i]));
  });
  return out;
}

}  // namespace onnxtrain::ml
