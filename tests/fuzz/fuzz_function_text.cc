// libFuzzer target: ONNX-text function bodies (the org.onnxtrain library's format) -> the
// parser. Every outcome but onnxtrain::Error is a finding.
#include <onnxtrain/error.h>

#include <cstdint>
#include <string_view>

#include "ir/function_text.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    onnxtrain::ir::parse_function(std::string_view(reinterpret_cast<const char*>(data), size), "org.fuzz");
  } catch (const onnxtrain::Error&) {
  }
  return 0;
}
