// Replaces calls to model-local functions by their bodies, where no kernel runs the call.
#pragma once

#include <functional>

#include "ir/graph.h"

namespace onnxtrain::passes {

// `has_kernel(node, opset)` says whether the runtime runs `node` itself. Calls to a
// model-local function without a kernel are inlined (recursively); their body nodes keep
// the function's opset imports. A call of a function that stands for a kernel
// (ir::kernel_function_name: "LSTMGrad_<16 hex digits>") becomes a node of that kernel
// ("LSTMGrad") where `has_kernel` has it, so the passes after this one and the executor see
// the kernel's op type.
void inline_functions(ir::Model& model, const std::function<bool(const ir::Node&, int64_t)>& has_kernel);

// Turns Constant nodes into initializers, so that kernels see constant inputs.
void constants_to_initializers(ir::Model& model);

}  // namespace onnxtrain::passes
