// Gradient graphs: turn a forward ONNX model into one that also computes gradients.
//
//   onnxtrain::GradientRequest request;
//   request.wrt = {"fc1.weight", "fc1.bias"};
//   request.loss = "loss";                       // a scalar output, seeded with 1
//   std::string model = onnxtrain::build_gradient_graph("model.onnx", request);
//
// The result is the forward model plus one output per differentiated value, named
// "<value>_grad", holding d(loss)/d(value) — or, when the request names `outputs`
// instead of a loss, the vector-Jacobian product with incoming gradients fed as new graph
// inputs named "<output>_grad" (what a PyTorch autograd.Function's backward receives).
//
// The gradient model is plain ONNX: the ops onnxtrain adds that standard ONNX lacks
// (ReluGrad, ConvGrad, ReduceToShape, ...) live in the domain "org.onnxtrain" and are
// written into the model as model-local functions whose bodies use standard ONNX ops, so
// any ONNX runtime runs it; onnxtrain runs fused kernels for them. No static shapes are
// needed: dynamic batch and sequence axes stay dynamic.
//
// Semantics:
// - A gradient that does not exist (the value does not reach the loss, or reaches it
//   only through integer or boolean values, which stop gradients) is absent: the model
//   gets no "<value>_grad" output for it, rather than a tensor of zeros.
// - Contributions of a value used several times are summed.
// - Forward nodes may gain optional outputs that their gradient needs (MaxPool's
//   Indices, LayerNormalization's Mean and InvStdDev, Dropout's mask).
// - BatchNormalization in training mode is differentiated through its batch
//   statistics; its running-statistics outputs are not differentiated.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace onnxtrain {

struct GradientRequest {
  // The values to differentiate: initializers, graph inputs, or any other value.
  std::vector<std::string> wrt;
  // Start from this scalar output (seeded with 1 of its element type). When both `loss`
  // and `outputs` are empty, the model's only graph output is the loss.
  std::string loss;
  // Or start from these outputs: each gets a graph input "<output>_grad" of its type and
  // shape that carries the incoming gradient.
  std::vector<std::string> outputs;
};

// Builds the gradient model of a serialized model and returns it serialized. Throws
// onnxtrain::Error when a name is unknown, the loss is not a scalar, a differentiated
// value is not of a floating-point type, or a differentiated value reaches an op that has
// no gradient rule (the message names the op, the node and the path from the value to
// the output).
std::string build_gradient_graph(std::span<const std::byte> model_bytes, const GradientRequest& request);
// The same for a model file (external data is read beside it).
std::string build_gradient_graph(const std::filesystem::path& model_path, const GradientRequest& request);
// Reads `model_path`, writes the gradient model to `output_path` (large tensors go to
// external data beside it when the model exceeds protobuf's 2 GB limit).
void build_gradient_graph(const std::filesystem::path& model_path, const std::filesystem::path& output_path,
                          const GradientRequest& request);

// The ops a gradient can flow through: (domain, op type) of every gradient rule, "" being
// ONNX's default domain. A differentiated value reaching any other op is an error.
std::vector<std::pair<std::string, std::string>> differentiable_ops();

// Every org.onnxtrain function (gradient ops, fused ops, gradient accumulation, optimizer
// steps) as the model-local functions of an otherwise empty serialized model whose default
// ONNX opset is `opset` — the definitions onnxtrain copies into the models it writes.
std::string function_library(int64_t opset);

}  // namespace onnxtrain
