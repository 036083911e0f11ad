// Small builders for hand-made ONNX models in the C++ tests.
#pragma once

#include <onnxtrain/tensor.h>

#include <initializer_list>
#include <string>
#include <vector>

#include "onnx/onnx-ml.pb.h"

namespace onnxtrain::testing {

inline onnx::ValueInfoProto tensor_value(const std::string& name, int elem_type,
                                         std::initializer_list<std::string> dims) {
  onnx::ValueInfoProto v;
  v.set_name(name);
  auto* t = v.mutable_type()->mutable_tensor_type();
  t->set_elem_type(elem_type);
  auto* shape = t->mutable_shape();
  for (const std::string& d : dims) {
    auto* dim = shape->add_dim();
    if (!d.empty() && std::isdigit(static_cast<unsigned char>(d[0])))
      dim->set_dim_value(std::stoll(d));
    else
      dim->set_dim_param(d);
  }
  return v;
}

inline onnx::NodeProto node(const std::string& op, std::vector<std::string> inputs, std::vector<std::string> outputs,
                            const std::string& name = "") {
  onnx::NodeProto n;
  n.set_op_type(op);
  if (!name.empty()) n.set_name(name);
  for (auto& i : inputs) n.add_input(i);
  for (auto& o : outputs) n.add_output(o);
  return n;
}

inline onnx::ModelProto model(int opset = 17) {
  onnx::ModelProto m;
  m.set_ir_version(8);
  auto* o = m.add_opset_import();
  o->set_domain("");
  o->set_version(opset);
  m.mutable_graph()->set_name("test");
  return m;
}

inline std::string bytes_of(const onnx::ModelProto& m) {
  return m.SerializeAsString();
}

inline std::span<const std::byte> as_span(const std::string& s) {
  return std::as_bytes(std::span(s.data(), s.size()));
}

}  // namespace onnxtrain::testing
