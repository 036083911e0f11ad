// onnxtrain._C: gradient graphs.
#include <nanobind/nanobind.h>
#include <nanobind/stl/filesystem.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>
#include <onnxtrain/gradient.h>

#include "autodiff/functions.h"
#include "bindings/bindings.h"
#include "ir/onnx_io.h"

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

  // For tests: every org.onnxtrain function, as the functions of an otherwise empty
  // serialized model whose default opset is `opset`.
  m.def(
      "gradient_functions",
      [](int64_t opset) {
        ir::Model model;
        model.ir_version = 8;
        model.opset_imports = {{"", opset}, {std::string(autodiff::kGradientDomain), 1}};
        model.graph.name = "org.onnxtrain functions";
        const auto& library = autodiff::FunctionLibrary::global();
        for (const std::string& name : library.names()) {
          ir::Function f = library.get(name);
          f.opset_imports = {{"", opset}};
          model.functions.push_back(std::move(f));
        }
        const std::string bytes = ir::serialize_model(model);
        return nb::bytes(bytes.data(), bytes.size());
      },
      "opset"_a = 17);
}

}  // namespace onnxtrain::bindings
