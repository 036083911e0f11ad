#include "ops/kernel_registry.h"

#include <onnxtrain/error.h>

#include "ir/graph.h"

namespace onnxtrain {

KernelRegistry& KernelRegistry::global() {
  static KernelRegistry registry;
  return registry;
}

void KernelRegistry::add(KernelDef def) {
  for (const KernelDef& d : defs_) {
    const bool overlaps = d.since_version <= def.until_version && def.since_version <= d.until_version;
    if (d.domain == def.domain && d.op_type == def.op_type && overlaps) {
      throw Error("kernel for " + def.op_type + " registered twice for overlapping opsets");
    }
  }
  defs_.push_back(std::move(def));
}

const KernelDef* KernelRegistry::find(std::string_view domain, std::string_view op_type, int64_t opset) const {
  domain = ir::canonical_domain(domain);
  for (const KernelDef& d : defs_) {
    if (d.domain == domain && d.op_type == op_type && d.since_version <= opset && opset <= d.until_version) {
      return &d;
    }
  }
  return nullptr;
}

bool KernelRegistry::knows(std::string_view domain, std::string_view op_type) const {
  domain = ir::canonical_domain(domain);
  for (const KernelDef& d : defs_) {
    if (d.domain == domain && d.op_type == op_type) return true;
  }
  return false;
}

}  // namespace onnxtrain
