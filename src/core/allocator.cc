#include "core/allocator.h"

namespace onnxtrain {
namespace {

// Aligned heap blocks; large ones are mapped and kept for reuse (see Storage::allocate).
class CpuAllocator final : public Allocator {
 public:
  Device device() const override { return Device::cpu(); }
  std::shared_ptr<Storage> allocate(size_t bytes) override { return Storage::allocate(bytes); }
};

}  // namespace

Allocator& Allocator::of(Device device) {
  static CpuAllocator cpu;
  if (device.is_cpu()) return cpu;
  throw Error("no allocator for device " + device.to_string() + ": this build of onnxtrain runs on the CPU only",
              ErrorKind::kNotImplemented);
}

}  // namespace onnxtrain
