// Shapes of the random generators (src/ops/cpu/random.cc).
#include "ir/shape_rules.h"

namespace onnxtrain::ir {
namespace {

// The `dtype` attribute, or `fallback` without one.
DType dtype_attribute(const ShapeContext& c, DType fallback) {
  const auto code = c.int_attribute("dtype");
  return code ? dtype_from_onnx(static_cast<int32_t>(*code)) : fallback;
}

// RandomUniform, RandomNormal: the shape attribute, of dtype (default float).
void from_attributes(ShapeContext& c) {
  const DType dtype = dtype_attribute(c, DType::kFloat32);
  const auto shape = c.ints_attribute("shape");
  if (!shape) return c.set(0, dtype);
  SymbolicShape out;
  for (int64_t d : *shape) out.push_back(known(d));
  c.set(0, dtype, out);
}

// The *Like forms and Bernoulli: the input's shape, of dtype (default the input's).
void like_input(ShapeContext& c) {
  const SymbolicShape* x = c.shape(0);
  const DType dtype = dtype_attribute(c, c.dtype(0));
  if (!x) return c.set(0, dtype);
  c.set(0, dtype, *x);
}

// Multinomial: [batch, sample_size] of dtype (default int32).
void multinomial(ShapeContext& c) {
  const DType dtype = dtype_attribute(c, DType::kInt32);
  const SymbolicShape* x = c.shape(0);
  const Dim batch = x && x->size() == 2 ? (*x)[0] : Dim{};
  c.set(0, dtype, SymbolicShape{batch, known(c.int_attribute("sample_size").value_or(1))});
}

const ShapeRuleRegistration kRandomShapes{{
    {"RandomUniform", from_attributes},
    {"RandomNormal", from_attributes},
    {"RandomUniformLike", like_input},
    {"RandomNormalLike", like_input},
    {"Bernoulli", like_input},
    {"Multinomial", multinomial},
}};

}  // namespace
}  // namespace onnxtrain::ir
