// Allocator: hands out Storage on one device. The runtime allocates its arenas and outputs
// through the allocator of the device it runs on; a device executor brings its own.
#pragma once

#include <onnxtrain/device.h>
#include <onnxtrain/tensor.h>

#include <cstddef>
#include <memory>

namespace onnxtrain {

class Allocator {
 public:
  virtual ~Allocator() = default;
  virtual Device device() const = 0;
  virtual std::shared_ptr<Storage> allocate(size_t bytes) = 0;

  // The allocator of `device`; an Error (kNotImplemented) when this build has none.
  static Allocator& of(Device device);
};

}  // namespace onnxtrain
