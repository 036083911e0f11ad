// The org.onnxtrain functions: ops that onnxtrain's graphs use and standard ONNX lacks
// (gradient ops, fused forward ops such as Gelu before opset 20, gradient accumulation and
// the optimizer steps). One library holds them all. Each is defined once, as text (see
// function_text.h), beside the code that emits it (src/autodiff/rules, src/passes,
// src/training); that code copies the definitions it used into the model as model-local
// functions, so any ONNX runtime can inline them, and the engine's kernels (src/ops/cpu)
// run them fused.
//
// Bodies use only standard ONNX ops whose schema is the same from opset 15 on (CastLike
// appeared in 15; ReduceSum takes axes as an input, ReduceMean only from 18, so bodies use
// ReduceSum; ScatterElements with reduction needs 16); the builder gives each function
// the model's own default-domain opset, as ONNX requires.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "ir/graph.h"

namespace onnxtrain::ir {

inline constexpr std::string_view kOnnxtrainDomain = "org.onnxtrain";

class FunctionLibrary {
 public:
  static FunctionLibrary& global();

  // Parses `text` and adds the function; names must be unique.
  void add(std::string_view text, int64_t min_opset);
  // The definition of org.onnxtrain::`name`; throws if there is none.
  const Function& get(std::string_view name) const;
  // The lowest default-domain opset the body of `name` is valid for.
  int64_t min_opset(std::string_view name) const;
  bool contains(std::string_view name) const;
  std::vector<std::string> names() const;
  // Adds the definition of org.onnxtrain::`name` to `model` unless it is there, with the
  // model's default-domain opset, and imports the domain (IR version 8 at least). Throws an
  // Error when the model's opset is older than the body needs.
  void add_to(Model& model, std::string_view name) const;

 private:
  struct Entry {
    Function function;
    int64_t min_opset = 15;
  };
  const Entry& entry(std::string_view name) const;
  std::vector<Entry> entries_;
};

// The body of `function` as `call` calls it: each body node with its attribute references
// bound to the call's attributes (or the function's defaults; an optional one the caller
// left out is dropped) and its `opset` set from the function's imports. The function's
// inputs and outputs take the call's names; every other value is prefixed with `prefix`.
std::vector<Node> expand_call(const Function& function, const Node& call, const std::string& prefix);

// A model-local org.onnxtrain function that stands for a kernel whose body depends on the
// call's attributes and on which of its inputs are present (the gradients of the recurrent
// nets): one function per such configuration, named "<kernel>_<16 hex digits>". ONNX's
// function overloads would say the same, but onnxruntime 1.23 and onnx.reference ignore a
// call's overload and run another overload's body. onnxtrain runs the kernel `<kernel>`
// for such a call (passes/inline_functions.h), any other runtime inlines the body.
std::string kernel_function_name(std::string_view kernel, uint64_t configuration);
// The kernel a function named by kernel_function_name stands for; empty for any other name.
std::string_view kernel_of_function(std::string_view function_name);

// Adds a function to the library while the library loads:
//   const FunctionRegistration kReluGrad{R"(ReluGrad (dY, Y) => (dX) { ... })"};
struct FunctionRegistration {
  explicit FunctionRegistration(std::string_view text, int64_t min_opset = 15) {
    FunctionLibrary::global().add(text, min_opset);
  }
};

}  // namespace onnxtrain::ir
