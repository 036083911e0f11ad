// libFuzzer target: a checkpoint file's bytes -> load_checkpoint (with and without
// verification). Every outcome but onnxtrain::Error is a finding.
#include <onnxtrain/checkpoint.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path =
      (std::filesystem::temp_directory_path() / ("onnxtrain-fuzz-checkpoint-" + std::to_string(getpid()))).string();
  FILE* file = std::fopen(path.c_str(), "wb");
  if (file == nullptr) return 0;
  std::fwrite(data, 1, size, file);
  std::fclose(file);
  for (bool verify : {true, false}) {
    try {
      onnxtrain::CheckpointState state = onnxtrain::load_checkpoint(path, verify);
    } catch (const onnxtrain::Error&) {
    }
  }
  return 0;
}
