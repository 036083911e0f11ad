// InferenceSession: loads an ONNX model and runs it on the CPU.
//
//   onnxtrain::InferenceSession session("model.onnx");
//   std::vector<onnxtrain::Tensor> outputs = session.run({{"input", tensor}});
#pragma once

#include <onnxtrain/tensor.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace onnxtrain {

namespace runtime {
class Executor;
}

// Which graph rewrites run when a model loads; the values are onnxruntime's. Every level
// inlines the functions onnxtrain has no kernel for and turns Constant nodes into
// initializers (the engine needs both). kBasic adds rewrites that only fold (BatchNorm into
// the Conv before it); kExtended and kAll add the fusions (GELU, Conv + Relu, Conv + MaxPool).
enum class GraphOptimizationLevel : int { kDisableAll = 0, kBasic = 1, kExtended = 2, kAll = 99 };

struct SessionOptions {
  // Threads for the work inside one op; 0 uses every core.
  int intra_op_num_threads = 0;
  GraphOptimizationLevel graph_optimization_level = GraphOptimizationLevel::kAll;
  // When not empty, the model as it runs (after the rewrites) is saved there when it loads,
  // for inspection; its fused ops are onnxtrain's own (org.onnxtrain).
  std::filesystem::path optimized_model_filepath;
  // Times every kernel of every run; end_profiling() writes the profile as Chrome-trace JSON
  // (chrome://tracing, Perfetto), named "<profile_file_prefix>_<date>_<time>.json".
  bool enable_profiling = false;
  std::string profile_file_prefix = "onnxtrain_profile";
};

// A graph input or output as the model declares it.
struct ValueMetadata {
  std::string name;
  DType dtype = DType::kUndefined;
  bool has_shape = false;
  // One entry per dimension: its size, or -1 when symbolic or unknown.
  std::vector<int64_t> shape;
  // One entry per dimension: the symbolic name ("batch"), or "" when fixed or unnamed.
  std::vector<std::string> dim_names;
  // A sequence of tensors has dtype kSequence and its tensors' type here.
  DType element_dtype = DType::kUndefined;
  // An optional(T) value: T, or none (Tensor::none(), or not fed).
  bool optional = false;
};

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

class InferenceSession {
 public:
  explicit InferenceSession(const std::filesystem::path& model_path, SessionOptions options = {});
  // `base_dir` is where external data files are looked up, if the model has any.
  InferenceSession(std::span<const std::byte> model_bytes, SessionOptions options = {},
                   const std::filesystem::path& base_dir = {});
  InferenceSession(InferenceSession&&) noexcept;
  InferenceSession& operator=(InferenceSession&&) noexcept;
  ~InferenceSession();

  // Runs the model. `output_names` empty means every graph output, in graph order. Feeds
  // are read in place (not copied); returned tensors are owned by the caller. Throws an
  // Error naming the input and what was expected when a feed has the wrong name, count,
  // shape or dtype. Runs of one session are serialized.
  std::vector<Tensor> run(const NamedTensors& feeds, const std::vector<std::string>& output_names = {});

  // Inputs the caller must feed (initializers that double as inputs are left out).
  const std::vector<ValueMetadata>& inputs() const;
  const std::vector<ValueMetadata>& outputs() const;

  // With SessionOptions::enable_profiling: writes what was timed since the session loaded
  // (or since the last call), returns the file's path, and starts a new profile. "" without.
  std::string end_profiling();

 private:
  std::unique_ptr<runtime::Executor> executor_;
};

// A registered kernel: `op_type` of `domain` ("" is ONNX's default domain) for opsets
// since_version..until_version (inclusive; kernels are checked up to the newest opset the loader accepts, 24).
struct OpSupport {
  std::string domain;
  std::string op_type;
  int since_version = 0;
  int until_version = 0;
};

std::vector<OpSupport> supported_ops();

}  // namespace onnxtrain
