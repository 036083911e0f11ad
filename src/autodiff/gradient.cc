// The public entry points (include/onnxtrain/gradient.h): ONNX bytes and files in and out.
#include <onnxtrain/gradient.h>

#include "autodiff/gradient_builder.h"
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

}  // namespace onnxtrain
