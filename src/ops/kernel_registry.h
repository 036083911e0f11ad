// Every kernel, registered once next to its code by (domain, op type, opset range), and
// optionally by what it accepts — its device, its element types, the inputs it reads on the
// host (shapes, axes: a device kernel still reads them from host memory):
//
//   const KernelRegistration kRelu{"", "Relu", 6, kLatestOpset, [](const KernelInfo& info) {
//     return make_kernel([](KernelContext& ctx) { ... });
//   }};
//   const KernelRegistration kReshape{"", "Reshape", 5, kLatestOpset, {.host_inputs = {1}}, factory};
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "ir/opset.h"
#include "ops/kernel.h"

namespace onnxtrain {

// The last opset a kernel without a later version was checked against: the newest the
// loader accepts (a kernel's range is capped there, not left open to opsets that may change it).
inline constexpr int kLatestOpset = ir::kNewestOnnxOpset;

using KernelFactory = std::function<std::unique_ptr<OpKernel>(const KernelInfo&)>;

struct KernelConstraints {
  Device device = Device::cpu();
  std::vector<DType> dtypes;        // the element types of input 0 it computes; empty: any it checks itself
  std::vector<size_t> host_inputs;  // inputs read on the host whatever the device
  // Takes inputs of the packed 4-bit types (dtype.h: is_packed). The executor refuses them
  // to every other kernel, whose loops assume a byte or more per element.
  bool packed_types = false;
  // Takes sequences and empty optionals (dtype.h: is_container), which the executor refuses
  // to every other kernel.
  bool containers = false;
};

struct KernelDef {
  std::string domain;  // "" is the default ONNX domain
  std::string op_type;
  int since_version = 1;
  int until_version = kLatestOpset;  // inclusive
  KernelFactory create;
  KernelConstraints constraints;

  bool accepts(Device device, DType dtype) const;
};

class KernelRegistry {
 public:
  static KernelRegistry& global();

  void add(KernelDef def);
  // The kernel for `op_type` of `domain` at the model's `opset` on `device` for input 0 of
  // `dtype` (kUndefined: not known yet), or nullptr.
  const KernelDef* find(std::string_view domain, std::string_view op_type, int64_t opset, Device device = Device::cpu(),
                        DType dtype = DType::kUndefined) const;
  const std::vector<KernelDef>& all() const { return defs_; }

 private:
  std::vector<KernelDef> defs_;
};

// A factory that creates the kernel of `domain`::`op_type` (at `opset`): an op another domain
// names differently (com.microsoft's gradient ops) runs the same kernel. The kernel is looked
// up when one is created, so the files registering the two may load in either order.
KernelFactory same_kernel_as(std::string domain, std::string op_type, int opset = 1);

// Registers a kernel while the library loads.
struct KernelRegistration {
  KernelRegistration(std::string domain, std::string op_type, int since_version, int until_version,
                     KernelFactory create)
      : KernelRegistration(std::move(domain), std::move(op_type), since_version, until_version, {}, std::move(create)) {
  }
  KernelRegistration(std::string domain, std::string op_type, int since_version, int until_version,
                     KernelConstraints constraints, KernelFactory create) {
    KernelRegistry::global().add({std::move(domain), std::move(op_type), since_version, until_version,
                                  std::move(create), std::move(constraints)});
  }
};

}  // namespace onnxtrain
