#include "autodiff/functions.h"

#include <onnxtrain/error.h>

#include <algorithm>

#include "autodiff/function_text.h"

namespace onnxtrain::autodiff {
namespace {

constexpr int64_t kFunctionIrVersion = 8;  // model-local functions need IR version 8

}  // namespace

FunctionLibrary& FunctionLibrary::global() {
  static FunctionLibrary library;
  return library;
}

void FunctionLibrary::add(std::string_view text, int64_t min_opset) {
  ir::Function function = parse_function(text, kGradientDomain);
  if (contains(function.name)) throw Error("org.onnxtrain function '" + function.name + "' defined twice");
  entries_.push_back({std::move(function), min_opset});
}

const FunctionLibrary::Entry& FunctionLibrary::entry(std::string_view name) const {
  for (const Entry& e : entries_) {
    if (e.function.name == name) return e;
  }
  throw Error("no org.onnxtrain function named '" + std::string(name) + "'");
}

const ir::Function& FunctionLibrary::get(std::string_view name) const {
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

void FunctionLibrary::add_to(ir::Model& model, std::string_view name) const {
  const int64_t opset = model.opset("").value_or(0);
  if (min_opset(name) > opset) {
    throw Error("org.onnxtrain::" + std::string(name) + " needs the default ONNX opset " +
                    std::to_string(min_opset(name)) + " or later; the model imports opset " + std::to_string(opset),
                ErrorKind::kInvalidModel);
  }
  const std::string domain(kGradientDomain);
  if (!model.opset(domain)) model.opset_imports.push_back({domain, 1});
  model.ir_version = std::max(model.ir_version, kFunctionIrVersion);
  if (model.function(domain, name)) return;
  ir::Function function = get(name);
  function.opset_imports = {{"", opset}};
  model.functions.push_back(std::move(function));
}

}  // namespace onnxtrain::autodiff
