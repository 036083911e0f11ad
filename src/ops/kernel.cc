#include "ops/kernel.h"

#include <algorithm>

namespace onnxtrain {

const Tensor* KernelInfo::constant_input(size_t i) const {
  return has_input(i) && constants_ ? constants_(node_.inputs[i]) : nullptr;
}

const Tensor* KernelInfo::packable_constant_input(size_t i) const {
  const Tensor* constant = constant_input(i);
  if (constant == nullptr || !readers_) return constant;
  const auto here = static_cast<size_t>(std::count(node_.inputs.begin(), node_.inputs.end(), node_.inputs[i]));
  return readers_(node_.inputs[i]) > here ? nullptr : constant;
}

std::unique_ptr<Subgraph> KernelInfo::subgraph(std::string_view name) const {
  const ir::Attribute* a = node_.attribute(name);
  if (a == nullptr || a->type != ir::AttributeType::kGraph || !a->g) {
    fail("graph attribute '" + std::string(name) + "' is missing");
  }
  if (!subgraphs_) fail("subgraphs run in an executor only");
  return subgraphs_(*a->g);
}

void KernelInfo::fail(const std::string& message) const {
  throw Error(node_.describe() + ": " + message, ErrorKind::kInvalidModel);
}

const ir::Attribute& KernelInfo::typed_attribute(std::string_view name, ir::AttributeType type) const {
  const ir::Attribute* a = node_.attribute(name);
  if (a->type != type) {
    fail("attribute '" + std::string(name) + "' has type " + std::to_string(static_cast<int>(a->type)) + ", expected " +
         std::to_string(static_cast<int>(type)));
  }
  return *a;
}

int64_t KernelInfo::int_attribute(std::string_view name, std::optional<int64_t> fallback) const {
  if (!has_attribute(name)) {
    if (!fallback) fail("required attribute '" + std::string(name) + "' is missing");
    return *fallback;
  }
  return typed_attribute(name, ir::AttributeType::kInt).i;
}

bool KernelInfo::bool_attribute(std::string_view name, std::optional<bool> fallback) const {
  const int64_t value = int_attribute(name, fallback ? std::optional<int64_t>(*fallback ? 1 : 0) : std::nullopt);
  if (value != 0 && value != 1) {
    fail("attribute '" + std::string(name) + "' is " + std::to_string(value) + ", expected 0 or 1");
  }
  return value == 1;
}

float KernelInfo::float_attribute(std::string_view name, std::optional<float> fallback) const {
  if (!has_attribute(name)) {
    if (!fallback) fail("required attribute '" + std::string(name) + "' is missing");
    return *fallback;
  }
  return typed_attribute(name, ir::AttributeType::kFloat).f;
}

std::string KernelInfo::string_attribute(std::string_view name, std::optional<std::string> fallback) const {
  if (!has_attribute(name)) {
    if (!fallback) fail("required attribute '" + std::string(name) + "' is missing");
    return *fallback;
  }
  return typed_attribute(name, ir::AttributeType::kString).s;
}

std::vector<int64_t> KernelInfo::ints_attribute(std::string_view name,
                                                std::optional<std::vector<int64_t>> fallback) const {
  if (!has_attribute(name)) {
    if (!fallback) fail("required attribute '" + std::string(name) + "' is missing");
    return *fallback;
  }
  return typed_attribute(name, ir::AttributeType::kInts).ints;
}

std::vector<float> KernelInfo::floats_attribute(std::string_view name,
                                                std::optional<std::vector<float>> fallback) const {
  if (!has_attribute(name)) {
    if (!fallback) fail("required attribute '" + std::string(name) + "' is missing");
    return *fallback;
  }
  return typed_attribute(name, ir::AttributeType::kFloats).floats;
}

const Tensor* KernelInfo::tensor_attribute(std::string_view name) const {
  if (!has_attribute(name)) return nullptr;
  return &typed_attribute(name, ir::AttributeType::kTensor).t;
}

const Tensor& KernelContext::input(size_t i) const {
  if (!has_input(i)) fail("required input " + std::to_string(i) + " is missing");
  return *inputs_[i];
}

Tensor& KernelContext::allocate_output(size_t i, DType dtype, Shape shape) {
  outputs_[i] = buffers_.allocate_output(i, dtype, std::move(shape));
  return outputs_[i];
}

Tensor& KernelContext::allocate_output_in_place(size_t i, size_t j, DType dtype, Shape shape) {
  outputs_[i] = buffers_.allocate_output_in_place(i, j, dtype, std::move(shape));
  return outputs_[i];
}

void KernelContext::set_output(size_t i, Tensor tensor) {
  outputs_[i] = std::move(tensor);
}

void KernelContext::fail(const std::string& message) const {
  throw Error(node_.describe() + ": " + message, ErrorKind::kInvalidArgument);
}

void KernelContext::require_alike(const Tensor& a, const Tensor& b, std::string_view what) const {
  if (a.shape() != b.shape()) {
    fail(std::string(what) + ": shapes " + shape_string(a.shape()) + " and " + shape_string(b.shape()) + " differ");
  }
  if (a.dtype() != b.dtype()) {
    fail(std::string(what) + ": element types " + std::string(dtype_name(a.dtype())) + " and " +
         std::string(dtype_name(b.dtype())) + " differ");
  }
}

}  // namespace onnxtrain
