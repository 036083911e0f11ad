// Device: where a tensor's bytes live and where a kernel runs. onnxtrain runs on the CPU
// today; the kind and index are in the core so that a device executor (CUDA) can come
// without changing the types every layer passes around.
#pragma once

#include <string>

namespace onnxtrain {

enum class DeviceKind { kCpu, kCuda };

struct Device {
  DeviceKind kind = DeviceKind::kCpu;
  int index = 0;

  static constexpr Device cpu() { return {}; }
  bool is_cpu() const { return kind == DeviceKind::kCpu; }
  bool operator==(const Device&) const = default;
  // "cpu", "cuda:0"
  std::string to_string() const {
    return kind == DeviceKind::kCpu ? std::string("cpu") : "cuda:" + std::to_string(index);
  }
};

}  // namespace onnxtrain
