// The public entry points (include/onnxtrain/gradient.h): ONNX bytes and files in and out.
#include <onnxtrain/gradient.h>

#include "autodiff/gradient_builder.h"
#include "autodiff/gradient_context.h"
#include "ir/functions.h"
#include "ir/onnx_io.h"

namespace onnxtrain {

std::string build_gradient_graph(std::span<const std::byte> model_bytes, const GradientRequest& request) {
  return ir::serialize_model(autodiff::build_gradient_graph(ir::load_model(model_bytes), request));
}

std::string build_gradient_graph(const std::filesystem::path& model_path, const GradientRequest& request) {
  return ir::serialize_model(autodiff::build_gradient_graph(ir::load_model(model_path), request));
}

void build_gradient_graph(const std::filesystem::path& model_path, const std::filesystem::path& output_path,
                          const GradientRequest& request) {
  ir::save_model(autodiff::build_gradient_graph(ir::load_model(model_path), request), output_path);
}

std::vector<std::pair<std::string, std::string>> differentiable_ops() {
  return autodiff::RuleTable::global().all();
}

std::string function_library(int64_t opset) {
  ir::Model model;
  model.ir_version = 8;
  model.opset_imports = {{"", opset}, {std::string(ir::kOnnxtrainDomain), 1}};
  model.graph.name = "org.onnxtrain functions";
  const ir::FunctionLibrary& library = ir::FunctionLibrary::global();
  for (const std::string& name : library.names()) {
    ir::Function f = library.get(name);
    f.opset_imports = {{"", opset}};
    model.functions.push_back(std::move(f));
  }
  return ir::serialize_model(model);
}

}  // namespace onnxtrain
