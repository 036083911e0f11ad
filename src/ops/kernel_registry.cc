#include "ops/kernel_registry.h"

#include <onnxtrain/error.h>

#include <algorithm>

#include "ir/graph.h"

namespace onnxtrain {

KernelRegistry& KernelRegistry::global() {
  static KernelRegistry registry;
  return registry;
}

namespace {

// Whether two kernels' element types meet (an empty list is every type).
bool dtypes_meet(const std::vector<DType>& a, const std::vector<DType>& b) {
  if (a.empty() || b.empty()) return true;
  return std::any_of(a.begin(), a.end(), [&](DType t) { return std::find(b.begin(), b.end(), t) != b.end(); });
}

}  // namespace

bool KernelDef::accepts(Device device, DType dtype) const {
  if (constraints.device.kind != device.kind) return false;
  const auto& types = constraints.dtypes;
  return dtype == DType::kUndefined || types.empty() || std::find(types.begin(), types.end(), dtype) != types.end();
}

void KernelRegistry::add(KernelDef def) {
  for (const KernelDef& d : defs_) {
    const bool overlaps = d.since_version <= def.until_version && def.since_version <= d.until_version &&
                          d.constraints.device.kind == def.constraints.device.kind &&
                          dtypes_meet(d.constraints.dtypes, def.constraints.dtypes);
    if (d.domain == def.domain && d.op_type == def.op_type && overlaps) {
      throw Error("kernel for " + def.op_type + " registered twice for overlapping opsets, device and types");
    }
  }
  defs_.push_back(std::move(def));
}

const KernelDef* KernelRegistry::find(std::string_view domain, std::string_view op_type, int64_t opset, Device device,
                                      DType dtype) const {
  domain = ir::canonical_domain(domain);
  for (const KernelDef& d : defs_) {
    if (d.domain == domain && d.op_type == op_type && d.since_version <= opset && opset <= d.until_version &&
        d.accepts(device, dtype)) {
      return &d;
    }
  }
  return nullptr;
}

KernelFactory same_kernel_as(std::string domain, std::string op_type, int opset) {
  return [domain = std::move(domain), op_type = std::move(op_type), opset](const KernelInfo& info) {
    const KernelDef* def = KernelRegistry::global().find(domain, op_type, opset);
    if (def == nullptr) info.fail("no kernel " + domain + "::" + op_type + " to share");
    return def->create(info);
  };
}

}  // namespace onnxtrain
