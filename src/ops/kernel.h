// What a kernel sees: KernelInfo when it is created for a node (attributes, constant
// inputs), KernelContext each time it runs (input tensors, output allocation).
#pragma once

#include <onnxtrain/tensor.h>

#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ir/graph.h"

namespace onnxtrain {

class KernelContext;

// A graph attribute of a control-flow node (If's branches, Loop's and Scan's body), compiled
// by the runtime once, when the node's kernel is created, into the plan the main graph runs
// on. The values the body reads from enclosing scopes reach the node as implicit inputs,
// after its own: KernelContext::input(node().inputs.size() + k).
class Subgraph {
 public:
  virtual ~Subgraph() = default;
  virtual const ir::Graph& graph() const = 0;
  // Runs the body once: inputs[i] feeds the body's input i; returns its outputs in order.
  virtual std::vector<Tensor> run(KernelContext& context, std::span<const Tensor> inputs) = 0;
};

// Built once per node. Reads and validates attributes; errors name the node.
class KernelInfo {
 public:
  using ConstantLookup = std::function<const Tensor*(std::string_view)>;
  using ReaderCount = std::function<size_t(std::string_view)>;
  using SubgraphCompiler = std::function<std::unique_ptr<Subgraph>(const ir::Graph&)>;

  KernelInfo(const ir::Node& node, int64_t opset, ConstantLookup constants, ReaderCount readers = nullptr)
      : node_(node), opset_(opset), constants_(std::move(constants)), readers_(std::move(readers)) {}

  const ir::Node& node() const { return node_; }
  int64_t opset() const { return opset_; }
  size_t input_count() const { return node_.inputs.size(); }
  bool has_input(size_t i) const { return i < node_.inputs.size() && !node_.inputs[i].empty(); }
  size_t output_count() const { return node_.outputs.size(); }
  bool has_output(size_t i) const { return i < node_.outputs.size() && !node_.outputs[i].empty(); }
  // The value of input i when it is a constant (an initializer that no feed can override).
  const Tensor* constant_input(size_t i) const;
  // constant_input(i) when no other node reads that constant: a kernel may then keep a copy
  // in the layout it computes in. When others read it too (a convolution's weights in a
  // gradient graph, which ConvGrad reads), the original stays in use and a packed copy
  // would double the weights' memory.
  const Tensor* packable_constant_input(size_t i) const;

  bool has_attribute(std::string_view name) const { return node_.attribute(name) != nullptr; }
  int64_t int_attribute(std::string_view name, std::optional<int64_t> fallback = std::nullopt) const;
  // An int attribute the spec uses as a flag: 0 or 1, anything else is an error naming it.
  bool bool_attribute(std::string_view name, std::optional<bool> fallback = std::nullopt) const;
  float float_attribute(std::string_view name, std::optional<float> fallback = std::nullopt) const;
  std::string string_attribute(std::string_view name, std::optional<std::string> fallback = std::nullopt) const;
  std::vector<int64_t> ints_attribute(std::string_view name,
                                      std::optional<std::vector<int64_t>> fallback = std::nullopt) const;
  std::vector<float> floats_attribute(std::string_view name,
                                      std::optional<std::vector<float>> fallback = std::nullopt) const;
  const Tensor* tensor_attribute(std::string_view name) const;
  // Graph attribute `name`, compiled by the runtime (fails when the node lacks it).
  std::unique_ptr<Subgraph> subgraph(std::string_view name) const;
  void set_subgraph_compiler(SubgraphCompiler compiler) { subgraphs_ = std::move(compiler); }

  // Throws an Error (kInvalidModel) that names the node.
  [[noreturn]] void fail(const std::string& message) const;

 private:
  const ir::Attribute& typed_attribute(std::string_view name, ir::AttributeType type) const;

  const ir::Node& node_;
  int64_t opset_;
  ConstantLookup constants_;
  ReaderCount readers_;         // how many node inputs read a value; null: unknown
  SubgraphCompiler subgraphs_;  // null where no runtime compiles subgraphs
};

// Implemented by the runtime: where output and scratch buffers come from.
class BufferSource {
 public:
  virtual ~BufferSource() = default;
  virtual Tensor allocate_output(size_t output_index, DType dtype, Shape shape) = 0;
  // Output `output_index` in the buffer of input `input_index` when that input dies here
  // and its buffer is large enough; otherwise a fresh buffer.
  virtual Tensor allocate_output_in_place(size_t output_index, size_t input_index, DType dtype, Shape shape) = 0;
  virtual Tensor allocate_scratch(DType dtype, Shape shape) = 0;
};

// Where and how a kernel runs: its device, and what runs work there (threads on the CPU; a
// device executor adds its stream).
struct ExecutionContext {
  Device device = Device::cpu();
  int num_threads = 1;
  void* stream = nullptr;  // a device stream; null on the CPU
};

// One run of one kernel.
class KernelContext {
 public:
  KernelContext(const ir::Node& node, std::span<const Tensor* const> inputs, std::span<Tensor> outputs,
                BufferSource& buffers, const ExecutionContext& execution)
      : node_(node), inputs_(inputs), outputs_(outputs), buffers_(buffers), execution_(execution) {}

  const ir::Node& node() const { return node_; }
  size_t input_count() const { return inputs_.size(); }
  bool has_input(size_t i) const { return i < inputs_.size() && inputs_[i] != nullptr; }
  // Input i; throws an Error naming the node when a required input is missing.
  const Tensor& input(size_t i) const;
  size_t output_count() const { return outputs_.size(); }
  // False for an optional output the graph does not use.
  bool has_output(size_t i) const { return i < node_.outputs.size() && !node_.outputs[i].empty(); }

  Tensor& allocate_output(size_t i, DType dtype, Shape shape);
  // For kernels that may write output i over input j element by element.
  Tensor& allocate_output_in_place(size_t i, size_t j, DType dtype, Shape shape);
  // Output i is `tensor` itself (a view of an input, e.g. Reshape, or a tensor the kernel made).
  void set_output(size_t i, Tensor tensor);
  Tensor allocate_scratch(DType dtype, Shape shape) { return buffers_.allocate_scratch(dtype, std::move(shape)); }

  const ExecutionContext& execution() const { return execution_; }
  int num_threads() const { return execution_.num_threads; }
  // Throws an Error (kInvalidArgument) that names the node.
  [[noreturn]] void fail(const std::string& message) const;
  // Fails unless `a` and `b` have one shape and one element type (a gradient and the value
  // it is the gradient of); `what` names the check in the message.
  void require_alike(const Tensor& a, const Tensor& b, std::string_view what) const;

 private:
  const ir::Node& node_;
  std::span<const Tensor* const> inputs_;
  std::span<Tensor> outputs_;
  BufferSource& buffers_;
  const ExecutionContext& execution_;
};

class OpKernel {
 public:
  virtual ~OpKernel() = default;
  virtual void compute(KernelContext& context) = 0;
};

// A kernel whose compute step is a function object (attributes captured at creation).
class LambdaKernel final : public OpKernel {
 public:
  explicit LambdaKernel(std::function<void(KernelContext&)> compute) : compute_(std::move(compute)) {}
  void compute(KernelContext& context) override { compute_(context); }

 private:
  std::function<void(KernelContext&)> compute_;
};

inline std::unique_ptr<OpKernel> make_kernel(std::function<void(KernelContext&)> compute) {
  return std::make_unique<LambdaKernel>(std::move(compute));
}

}  // namespace onnxtrain
