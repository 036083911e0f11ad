#include "ir/functions.h"

#include <onnxtrain/error.h>

#include <algorithm>
#include <unordered_map>

#include "ir/function_text.h"

namespace onnxtrain::ir {
namespace {

constexpr int64_t kFunctionIrVersion = 8;  // model-local functions need IR version 8

}  // namespace

FunctionLibrary& FunctionLibrary::global() {
  static FunctionLibrary library;
  return library;
}

void FunctionLibrary::add(std::string_view text, int64_t min_opset) {
  Function function = parse_function(text, kOnnxtrainDomain);
  if (contains(function.name)) throw Error("org.onnxtrain function '" + function.name + "' defined twice");
  entries_.push_back({std::move(function), min_opset});
}

const FunctionLibrary::Entry& FunctionLibrary::entry(std::string_view name) const {
  for (const Entry& e : entries_) {
    if (e.function.name == name) return e;
  }
  throw Error("no org.onnxtrain function named '" + std::string(name) + "'");
}

const Function& FunctionLibrary::get(std::string_view name) const {
  return entry(name).function;
}

int64_t FunctionLibrary::min_opset(std::string_view name) const {
  return entry(name).min_opset;
}

bool FunctionLibrary::contains(std::string_view name) const {
  for (const Entry& e : entries_) {
    if (e.function.name == name) return true;
  }
  return false;
}

std::vector<std::string> FunctionLibrary::names() const {
  std::vector<std::string> names;
  for (const Entry& e : entries_) names.push_back(e.function.name);
  return names;
}

void FunctionLibrary::add_to(Model& model, std::string_view name) const {
  const int64_t opset = model.opset("").value_or(0);
  if (min_opset(name) > opset) {
    throw Error("org.onnxtrain::" + std::string(name) + " needs the default ONNX opset " +
                    std::to_string(min_opset(name)) + " or later; the model imports opset " + std::to_string(opset),
                ErrorKind::kInvalidModel);
  }
  const std::string domain(kOnnxtrainDomain);
  if (!model.opset(domain)) model.opset_imports.push_back({domain, 1});
  model.ir_version = std::max(model.ir_version, kFunctionIrVersion);
  if (model.function(domain, name)) return;
  Function function = get(name);
  function.opset_imports = {{"", opset}};
  model.functions.push_back(std::move(function));
}

std::vector<Node> expand_call(const Function& function, const Node& call, const std::string& prefix) {
  std::unordered_map<std::string, std::string> rename;
  for (size_t i = 0; i < function.inputs.size(); ++i) {
    rename[function.inputs[i]] = i < call.inputs.size() ? call.inputs[i] : "";
  }
  for (size_t i = 0; i < function.outputs.size(); ++i) {
    rename[function.outputs[i]] = i < call.outputs.size() ? call.outputs[i] : "";
  }
  auto value_name = [&](const std::string& name) {
    if (name.empty()) return name;
    auto it = rename.find(name);
    return it != rename.end() ? it->second : prefix + name;
  };
  auto imported_opset = [&](const std::string& domain) -> int64_t {
    for (const OpsetImport& o : function.opset_imports) {
      if (canonical_domain(o.domain) == canonical_domain(domain)) return o.version;
    }
    return 0;
  };
  std::vector<Node> body;
  for (const Node& inner : function.nodes) {
    Node node = inner;
    node.name = prefix + inner.name;
    for (auto& in : node.inputs) in = value_name(in);
    for (auto& out : node.outputs) out = value_name(out);
    node.opset = imported_opset(inner.domain);
    std::vector<Attribute> attributes;
    for (const Attribute& a : inner.attributes) {
      if (a.ref_attr_name.empty()) {
        attributes.push_back(a);
        continue;
      }
      const Attribute* bound = call.attribute(a.ref_attr_name);
      if (bound == nullptr) {
        for (const Attribute& d : function.attribute_defaults) {
          if (d.name == a.ref_attr_name) bound = &d;
        }
      }
      if (bound == nullptr) continue;  // an optional attribute the caller left out
      Attribute copy = *bound;
      copy.name = a.name;
      attributes.push_back(std::move(copy));
    }
    node.attributes = std::move(attributes);
    rename_outer_scope_reads(node, value_name);  // a Loop's body reading the function's values
    body.push_back(std::move(node));
  }
  return body;
}

std::string kernel_function_name(std::string_view kernel, uint64_t configuration) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string name(kernel);
  name += '_';
  for (int shift = 60; shift >= 0; shift -= 4) name += kHex[(configuration >> shift) & 0xF];
  return name;
}

std::string_view kernel_of_function(std::string_view function_name) {
  constexpr size_t kDigits = 16;
  if (function_name.size() < kDigits + 2) return {};
  const size_t underscore = function_name.size() - kDigits - 1;
  if (function_name[underscore] != '_') return {};
  for (char ch : function_name.substr(underscore + 1)) {
    if (!((ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'f'))) return {};
  }
  return function_name.substr(0, underscore);
}

}  // namespace onnxtrain::ir
