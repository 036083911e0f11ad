#include <onnxtrain/inference_session.h>

#include "ir/onnx_io.h"
#include "ops/kernel_registry.h"
#include "runtime/executor.h"

namespace onnxtrain {

InferenceSession::InferenceSession(const std::filesystem::path& model_path, SessionOptions options)
    : executor_(std::make_unique<runtime::Executor>(ir::load_model(model_path), options)) {}

InferenceSession::InferenceSession(std::span<const std::byte> model_bytes, SessionOptions options,
                                   const std::filesystem::path& base_dir)
    : executor_(std::make_unique<runtime::Executor>(ir::load_model(model_bytes, base_dir), options)) {}

InferenceSession::InferenceSession(InferenceSession&&) noexcept = default;
InferenceSession& InferenceSession::operator=(InferenceSession&&) noexcept = default;
InferenceSession::~InferenceSession() = default;

std::vector<Tensor> InferenceSession::run(const NamedTensors& feeds, const std::vector<std::string>& output_names) {
  return executor_->run(feeds, output_names);
}

const std::vector<ValueMetadata>& InferenceSession::inputs() const {
  return executor_->inputs();
}
const std::vector<ValueMetadata>& InferenceSession::outputs() const {
  return executor_->outputs();
}

std::string InferenceSession::end_profiling() {
  return executor_->end_profiling();
}

std::vector<OpSupport> supported_ops() {
  std::vector<OpSupport> ops;
  for (const KernelDef& def : KernelRegistry::global().all()) {
    ops.push_back({def.domain, def.op_type, def.since_version, def.until_version});
  }
  return ops;
}

}  // namespace onnxtrain
