// libFuzzer target: an ONNX model's bytes -> InferenceSession -> one run with small feeds.
// Every outcome but onnxtrain::Error is a finding (a crash, a sanitizer report, another
// exception escaping).
#include <onnxtrain/inference_session.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

namespace {

// A feed for `input`: its declared dtype, symbolic dimensions as 2, at most 4096 elements;
// contents from the fuzzer's bytes after the model is not known, so zeros and ones.
onnxtrain::Tensor feed_for(const onnxtrain::ValueMetadata& input) {
  onnxtrain::Shape shape;
  int64_t elements = 1;
  for (int64_t d : input.shape) {
    const int64_t size = d < 0 ? 2 : std::min<int64_t>(d, 64);
    shape.push_back(size);
    elements *= size;
  }
  if (elements > 4096) throw onnxtrain::Error("fuzz feed too large");
  onnxtrain::Tensor tensor = onnxtrain::Tensor::zeros(input.dtype, shape);
  auto* bytes = static_cast<unsigned char*>(tensor.raw_data());
  for (size_t i = 0; i < tensor.nbytes(); i += 3) bytes[i] = 1;
  return tensor;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    onnxtrain::InferenceSession session(std::span(reinterpret_cast<const std::byte*>(data), size),
                                        {.intra_op_num_threads = 1});
    onnxtrain::NamedTensors feeds;
    for (const onnxtrain::ValueMetadata& input : session.inputs()) feeds.emplace_back(input.name, feed_for(input));
    session.run(feeds);
  } catch (const onnxtrain::Error&) {
  }
  return 0;
}
