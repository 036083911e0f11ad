// The element types and shapes of a model's values, as far as they follow statically from
// what the model declares — the one inference the runtime, the gradient builder and the
// artifact builders use. Symbolic dimensions keep their names: MatMul of [batch, seq, 64]
// and [64, 128] is [batch, seq, 128]; a size that cannot be known is -1 without a name.
//
//   for (const onnxtrain::ValueMetadata& v : onnxtrain::infer_types("model.onnx")) {
//     std::cout << v.name << " " << onnxtrain::dtype_name(v.dtype) << "\n";
//   }
#pragma once

#include <onnxtrain/inference_session.h>

#include <cstddef>
#include <filesystem>
#include <span>
#include <vector>

namespace onnxtrain {

// Every value of the model's main graph whose element type or shape is known (inputs,
// initializers, node outputs), sorted by name. Throws onnxtrain::Error on a malformed model.
std::vector<ValueMetadata> infer_types(std::span<const std::byte> model_bytes);
// The same for a model file.
std::vector<ValueMetadata> infer_types(const std::filesystem::path& model_path);

}  // namespace onnxtrain
