#include "autodiff/functions.h"

#include <onnxtrain/error.h>

#include "autodiff/function_text.h"

namespace onnxtrain::autodiff {

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

}  // namespace onnxtrain::autodiff
