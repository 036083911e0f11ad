// Conversion between onnx.ModelProto (files, bytes) and the IR. The only place that
// touches protobuf.
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>

#include "ir/graph.h"

namespace onnxtrain::ir {

// Loads a model file; external data is read relative to the file's folder (memory-mapped).
Model load_model(const std::filesystem::path& path);
// Loads a serialized model; external data, if any, is looked up under `base_dir`.
Model load_model(std::span<const std::byte> bytes, const std::filesystem::path& base_dir = {});

struct SaveOptions {
  // Tensors of at least this many bytes go to an external data file beside the model
  // (needed above protobuf's 2 GB limit). 0 disables external data.
  size_t external_data_threshold = 0;
  std::string external_data_file;  // default: "<model file name>.data"
};

// Writes atomically (temporary file, then rename). Models whose tensors exceed 2 GB are
// saved with external data even when no threshold was given.
void save_model(const Model& model, const std::filesystem::path& path, const SaveOptions& options = {});
// Serializes with all tensor data inline; fails above protobuf's 2 GB limit.
std::string serialize_model(const Model& model);

}  // namespace onnxtrain::ir
