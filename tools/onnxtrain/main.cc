// The onnxtrain command line: `onnxtrain inspect model.onnx`.
#include <onnxtrain/inference_session.h>

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "ir/onnx_io.h"
#include "ir/shape_inference.h"
#include "ops/kernel_registry.h"

namespace {

using onnxtrain::ir::Model;

std::string type_text(const onnxtrain::ir::ValueInfo& v) {
  std::string text(onnxtrain::dtype_name(v.dtype));
  if (!v.shape) return text + "[?]";
  text += "[";
  for (size_t i = 0; i < v.shape->size(); ++i) {
    const auto& d = (*v.shape)[i];
    text += (i ? ", " : "") + (d.value ? std::to_string(*d.value) : d.param.empty() ? "?" : d.param);
  }
  return text + "]";
}

void count_ops(const Model& model, const std::vector<onnxtrain::ir::Node>& nodes,
               std::map<std::string, int>& histogram, std::map<std::string, std::string>& missing) {
  const auto& registry = onnxtrain::KernelRegistry::global();
  for (const auto& node : nodes) {
    const std::string op = (node.domain.empty() ? "" : node.domain + "::") + node.op_type;
    ++histogram[op];
    const int64_t opset = model.opset(node.domain).value_or(0);
    if (registry.find(node.domain, node.op_type, opset) != nullptr) continue;
    if (const auto* f = model.function(node.domain, node.op_type)) {
      count_ops(model, f->nodes, histogram, missing);  // inlined at load
      continue;
    }
    missing[op] = "opset " + std::to_string(opset);
  }
}

int inspect(const std::string& path) {
  const Model model = onnxtrain::ir::load_model(path);
  std::printf("model: %s\n", path.c_str());
  std::printf("producer: %s %s, ir_version %lld\n", model.producer_name.c_str(), model.producer_version.c_str(),
              static_cast<long long>(model.ir_version));
  std::printf("opsets:");
  for (const auto& o : model.opset_imports) {
    std::printf(" %s=%lld", o.domain.empty() ? "ai.onnx" : o.domain.c_str(), static_cast<long long>(o.version));
  }
  std::printf("\n\ninputs:\n");
  for (const auto& v : model.graph.inputs) {
    if (model.graph.initializer(v.name) == nullptr) std::printf("  %s: %s\n", v.name.c_str(), type_text(v).c_str());
  }
  std::printf("outputs (declared, or inferred where the model leaves the shape out):\n");
  const auto inferred = onnxtrain::ir::infer_types(model);
  for (const auto& v : model.graph.outputs) {
    onnxtrain::ir::ValueInfo shown = v;
    if (auto it = inferred.find(v.name); !v.shape && it != inferred.end()) {
      shown.dtype = it->second.dtype;
      shown.shape = it->second.shape;
    }
    std::printf("  %s: %s\n", v.name.c_str(), type_text(shown).c_str());
  }

  int64_t parameters = 0;
  size_t bytes = 0;
  for (const auto& [name, t] : model.graph.initializers) {
    parameters += t.numel();
    bytes += t.nbytes();
  }
  std::printf("\nparameters: %lld in %zu initializers, %.2f MB\n", static_cast<long long>(parameters),
              model.graph.initializers.size(), static_cast<double>(bytes) / 1e6);

  std::map<std::string, int> histogram;
  std::map<std::string, std::string> missing;
  count_ops(model, model.graph.nodes, histogram, missing);
  std::vector<std::pair<std::string, int>> ops(histogram.begin(), histogram.end());
  std::stable_sort(ops.begin(), ops.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  std::printf("\nops (%zu nodes):\n", model.graph.nodes.size());
  for (const auto& [op, n] : ops) std::printf("  %6d  %s\n", n, op.c_str());
  std::printf("\nops without a kernel: %s\n", missing.empty() ? "none" : "");
  for (const auto& [op, opset] : missing) std::printf("  %s (%s)\n", op.c_str(), opset.c_str());
  return 0;
}

void usage() {
  std::fprintf(stderr,
               "usage: onnxtrain <command> [args]\n"
               "commands:\n"
               "  inspect MODEL.onnx   opsets, inputs, outputs, parameters, op histogram, ops without a kernel\n");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    usage();
    return 2;
  }
  const std::string command = argv[1];
  try {
    if (command == "inspect" && argc == 3) return inspect(argv[2]);
    if (command == "--help" || command == "-h") {
      usage();
      return 0;
    }
    usage();
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "onnxtrain %s: error: %s\n", command.c_str(), e.what());
    return 1;
  }
}
