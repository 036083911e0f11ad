// onnxtrain._C: gradient graphs.
#include <nanobind/nanobind.h>
#include <nanobind/stl/filesystem.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>
#include <onnxtrain/gradient.h>

#include "bindings/bindings.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace onnxtrain::bindings {

void bind_autodiff(nb::module_& m) {
  m.def(
      "build_gradient_graph",
      [](nb::object model, std::vector<std::string> wrt, std::string loss, std::vector<std::string> outputs) {
        GradientRequest request{std::move(wrt), std::move(loss), std::move(outputs)};
        const std::string result =
            with_model_source(model, [&](const auto& source) { return build_gradient_graph(source, request); });
        return nb::bytes(result.data(), result.size());
      },
      "model"_a, "wrt"_a, "loss"_a = "", "outputs"_a = std::vector<std::string>{},
      "The serialized gradient model of a serialized model (bytes) or a model file (path).");

  m.def("differentiable_ops", &differentiable_ops,
        "(domain, op type) of every op a gradient can flow through (those with a gradient rule).");
  // For tests and `onnxtrain convert`: every org.onnxtrain function (gradients, fused ops,
  // gradient accumulation, optimizer steps), as the functions of an otherwise empty
  // serialized model whose default opset is `opset`.
  m.def(
      "functions",
      [](int64_t opset) {
        const std::string bytes = function_library(opset);
        return nb::bytes(bytes.data(), bytes.size());
      },
      "opset"_a = 17);
}

}  // namespace onnxtrain::bindings
