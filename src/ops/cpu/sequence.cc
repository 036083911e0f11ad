// Sequences of tensors (ONNX's seq(tensor)) and optionals. A sequence is a value of dtype
// kSequence (Tensor::sequence); its tensors are shared between the sequences that hold them,
// never changed in place: SequenceInsert and SequenceErase make a new sequence. An optional
// is its value when it has one, Tensor::none() when it has none, or an omitted input.
//
//   SequenceEmpty, SequenceConstruct, SequenceInsert, SequenceErase, SequenceAt,
//   SequenceLength, SplitToSequence, ConcatFromSequence, SequenceMap (a body run per
//   element), Optional, OptionalHasElement, OptionalGetElement.
#include <string>
#include <vector>

#include "ops/cpu/axis.h"
#include "ops/cpu/data_movement.h"
#include "ops/cpu/layout.h"
#include "ops/kernel_registry.h"

namespace onnxtrain {
namespace {

constexpr KernelConstraints kContainers{.containers = true};

const TensorSequence& sequence_input(const KernelContext& ctx, size_t i) {
  const Tensor& value = ctx.input(i);
  if (!value.is_sequence()) {
    ctx.fail("input " + std::to_string(i) + " is a " + std::string(dtype_name(value.dtype())) +
             (value.is_none() ? " optional" : " tensor") + ", expected a sequence");
  }
  return value.sequence();
}

const Tensor& tensor_input(const KernelContext& ctx, size_t i) {
  const Tensor& value = ctx.input(i);
  if (is_container(value.dtype())) {
    ctx.fail("input " + std::to_string(i) + " is " + (value.is_sequence() ? "a sequence" : "an empty optional") +
             ", expected a tensor");
  }
  return value;
}

// The position input `i` (an int32 or int64 scalar) in [-size, size - 1], or [-size, size]
// where `insert` (one past the end appends), mapped to [0, size]; `fallback` when omitted.
size_t position(const KernelContext& ctx, size_t i, size_t size, bool insert, int64_t fallback) {
  int64_t p = fallback;
  if (ctx.has_input(i)) {
    const Tensor& t = tensor_input(ctx, i);
    if ((t.dtype() != DType::kInt64 && t.dtype() != DType::kInt32) || t.numel() != 1) {
      ctx.fail("position is " + std::string(dtype_name(t.dtype())) + shape_string(t.shape()) +
               ", expected an int32 or int64 scalar");
    }
    p = t.item_as_int64();
  }
  const auto n = static_cast<int64_t>(size);
  const int64_t last = insert ? n : n - 1;
  if (p < -n || p > last) {
    ctx.fail("position " + std::to_string(p) + " is out of range for a sequence of " + std::to_string(n) +
             " tensors (expected " + std::to_string(-n) + ".." + std::to_string(last) + ")");
  }
  return static_cast<size_t>(p < 0 ? p + n : p);
}

// The element type a node's `dtype` attribute names (SequenceEmpty: float by default).
DType dtype_attribute(const KernelInfo& info) {
  const auto dtype = dtype_from_onnx(static_cast<int32_t>(info.int_attribute("dtype", 1)));
  if (!is_supported(dtype))
    info.fail("dtype " + std::to_string(info.int_attribute("dtype")) + " is not an element type");
  return dtype;
}

const KernelRegistration kSequenceEmpty{
    "", "SequenceEmpty", 11, kLatestOpset, kContainers, [](const KernelInfo& info) {
      const DType dtype = dtype_attribute(info);
      return make_kernel([dtype](KernelContext& ctx) { ctx.set_output(0, Tensor::sequence(dtype, {})); });
    }};

const KernelRegistration kSequenceConstruct{
    "", "SequenceConstruct", 11, kLatestOpset, kContainers, [](const KernelInfo& info) {
      if (info.input_count() == 0) info.fail("SequenceConstruct takes one tensor or more");
      return make_kernel([](KernelContext& ctx) {
        std::vector<Tensor> tensors;
        for (size_t i = 0; i < ctx.input_count(); ++i) {
          const Tensor& t = tensor_input(ctx, i);
          if (t.dtype() != ctx.input(0).dtype()) {
            ctx.fail("input " + std::to_string(i) + " is " + std::string(dtype_name(t.dtype())) + ", input 0 " +
                     std::string(dtype_name(ctx.input(0).dtype())) + ": a sequence holds one element type");
          }
          tensors.push_back(t);
        }
        ctx.set_output(0, Tensor::sequence(ctx.input(0).dtype(), std::move(tensors)));
      });
    }};

const KernelRegistration kSequenceInsert{
    "", "SequenceInsert", 11, kLatestOpset, kContainers, [](const KernelInfo&) {
      return make_kernel([](KernelContext& ctx) {
        const TensorSequence& sequence = sequence_input(ctx, 0);
        const Tensor& t = tensor_input(ctx, 1);
        if (t.dtype() != sequence.element_dtype) {
          ctx.fail("cannot insert a " + std::string(dtype_name(t.dtype())) + " tensor into a sequence of " +
                   std::string(dtype_name(sequence.element_dtype)) + " tensors");
        }
        const size_t at =
            position(ctx, 2, sequence.tensors.size(), true, static_cast<int64_t>(sequence.tensors.size()));
        std::vector<Tensor> tensors = sequence.tensors;
        tensors.insert(tensors.begin() + static_cast<std::ptrdiff_t>(at), t);
        ctx.set_output(0, Tensor::sequence(sequence.element_dtype, std::move(tensors)));
      });
    }};

const KernelRegistration kSequenceErase{"", "SequenceErase", 11, kLatestOpset, kContainers, [](const KernelInfo&) {
                                          return make_kernel([](KernelContext& ctx) {
                                            const TensorSequence& sequence = sequence_input(ctx, 0);
                                            if (sequence.tensors.empty())
                                              ctx.fail("cannot erase from an empty sequence");
                                            const size_t at = position(ctx, 1, sequence.tensors.size(), false, -1);
                                            std::vector<Tensor> tensors = sequence.tensors;
                                            tensors.erase(tensors.begin() + static_cast<std::ptrdiff_t>(at));
                                            ctx.set_output(
                                                0, Tensor::sequence(sequence.element_dtype, std::move(tensors)));
                                          });
                                        }};

const KernelRegistration kSequenceAt{"", "SequenceAt", 11, kLatestOpset, kContainers, [](const KernelInfo& info) {
                                       if (!info.has_input(1)) info.fail("SequenceAt needs its position input");
                                       return make_kernel([](KernelContext& ctx) {
                                         const TensorSequence& sequence = sequence_input(ctx, 0);
                                         const size_t at = position(ctx, 1, sequence.tensors.size(), false, 0);
                                         ctx.set_output(0, sequence.tensors[at]);
                                       });
                                     }};

const KernelRegistration kSequenceLength{"", "SequenceLength", 11, kLatestOpset, kContainers, [](const KernelInfo&) {
                                           return make_kernel([](KernelContext& ctx) {
                                             const auto n = static_cast<int64_t>(sequence_input(ctx, 0).tensors.size());
                                             *ctx.allocate_output(0, DType::kInt64, {}).data<int64_t>() = n;
                                           });
                                         }};

// SplitToSequence: `split` a scalar (parts of that length, the last one shorter), a 1-D list
// of lengths, or omitted (parts of length 1, without the axis unless keepdims).
const KernelRegistration kSplitToSequence{
    "", "SplitToSequence", 11, kLatestOpset, kContainers, [](const KernelInfo& info) {
      const int64_t axis_attribute = info.int_attribute("axis", 0);
      const bool keepdims = info.bool_attribute("keepdims", true);
      return make_kernel([=](KernelContext& ctx) {
        const Tensor& x = tensor_input(ctx, 0);
        if (x.rank() == 0) ctx.fail("cannot split a scalar");
        const auto axis = static_cast<size_t>(normalize_axis(ctx, axis_attribute, static_cast<int64_t>(x.rank())));
        const int64_t dim = x.shape()[axis];
        std::vector<int64_t> lengths;
        bool drop_axis = false;
        if (!ctx.has_input(1)) {
          lengths.assign(static_cast<size_t>(dim), 1);
          drop_axis = !keepdims;
        } else if (const Tensor& split = tensor_input(ctx, 1); split.rank() == 0) {
          const int64_t length = split.item_as_int64();
          if (length <= 0) ctx.fail("split is " + std::to_string(length) + ", expected a positive length");
          for (int64_t start = 0; start < dim; start += length) lengths.push_back(std::min(length, dim - start));
        } else {
          lengths = data_movement::int64_values(ctx, split, "split");
          int64_t total = 0;
          for (int64_t n : lengths) {
            if (n < 0) ctx.fail("split " + shape_string(lengths) + " has a negative length");
            total += n;
          }
          if (total != dim) {
            ctx.fail("split " + shape_string(lengths) + " sums to " + std::to_string(total) + ", expected the size " +
                     std::to_string(dim) + " of axis " + std::to_string(axis));
          }
        }
        const std::vector<int64_t> strides = contiguous_strides(x.shape());
        std::vector<Tensor> parts;
        int64_t start = 0;
        for (int64_t length : lengths) {
          data_movement::StridedView view{x.shape(), strides, start * strides[axis]};
          view.shape[axis] = length;
          start += length;
          Tensor part = Tensor::empty(x.dtype(), view.shape);
          data_movement::copy_strided(part.raw_data(), x.raw_data(), data_movement::collapse(view),
                                      dtype_size(x.dtype()));
          if (drop_axis) {
            Shape shape = part.shape();
            shape.erase(shape.begin() + static_cast<std::ptrdiff_t>(axis));
            part = part.reshaped(std::move(shape));
          }
          parts.push_back(std::move(part));
        }
        ctx.set_output(0, Tensor::sequence(x.dtype(), std::move(parts)));
      });
    }};

// ConcatFromSequence: the tensors joined along `axis`, or stacked along a new one (new_axis 1,
// where axis may also be rank: a new last axis).
const KernelRegistration kConcatFromSequence{
    "", "ConcatFromSequence", 11, kLatestOpset, kContainers, [](const KernelInfo& info) {
      const int64_t axis_attribute = info.int_attribute("axis");
      const bool new_axis = info.bool_attribute("new_axis", false);
      return make_kernel([=](KernelContext& ctx) {
        const TensorSequence& sequence = sequence_input(ctx, 0);
        if (sequence.tensors.empty()) ctx.fail("cannot concatenate an empty sequence (its shape is unknown)");
        const auto rank = static_cast<int64_t>(sequence.tensors.front().rank());
        if (!new_axis && rank == 0) ctx.fail("cannot concatenate scalars; set new_axis to 1 to stack them");
        const auto axis = static_cast<size_t>(normalize_axis(ctx, axis_attribute, new_axis ? rank + 1 : rank));
        std::vector<Tensor> stacked;  // with the new axis of length 1
        std::vector<const Tensor*> parts;
        for (const Tensor& t : sequence.tensors) {
          if (!new_axis) {
            parts.push_back(&t);
            continue;
          }
          Shape shape = t.shape();
          shape.insert(shape.begin() + static_cast<std::ptrdiff_t>(std::min(axis, shape.size())), 1);
          stacked.push_back(t.reshaped(std::move(shape)));
        }
        for (const Tensor& t : stacked) parts.push_back(&t);
        if (new_axis) {
          for (size_t k = 0; k < parts.size(); ++k) {
            if (sequence.tensors[k].shape() != sequence.tensors[0].shape()) {
              ctx.fail("element " + std::to_string(k) + " has shape " + shape_string(sequence.tensors[k].shape()) +
                       ", element 0 " + shape_string(sequence.tensors[0].shape()) +
                       ": stacked tensors must have one shape");
            }
          }
        }
        Tensor& out = ctx.allocate_output(0, sequence.element_dtype,
                                          data_movement::concatenated_shape(ctx, parts, axis, "element"));
        data_movement::concatenate(parts, axis, out);
      });
    }};

// SequenceMap: runs the body once per element of the input sequence. The additional inputs
// that are sequences (as long as the first) give their element of that position; tensors
// are passed whole. Each body output is collected into an output sequence.
class SequenceMapKernel final : public OpKernel {
 public:
  explicit SequenceMapKernel(const KernelInfo& info) : body_(info.subgraph("body")) {
    const ir::Graph& g = body_->graph();
    if (g.inputs.size() != info.input_count() || g.outputs.size() != info.output_count()) {
      info.fail("body has " + std::to_string(g.inputs.size()) + " inputs and " + std::to_string(g.outputs.size()) +
                " outputs; this node needs " + std::to_string(info.input_count()) + " and " +
                std::to_string(info.output_count()));
    }
  }

  void compute(KernelContext& ctx) override {
    const ir::Graph& g = body_->graph();
    const size_t n = sequence_input(ctx, 0).tensors.size();
    const size_t inputs = g.inputs.size();
    for (size_t j = 1; j < inputs; ++j) {
      const Tensor& extra = ctx.input(j);
      if (extra.is_sequence() && extra.sequence().tensors.size() != n) {
        ctx.fail("input " + std::to_string(j) + " is a sequence of " + std::to_string(extra.sequence().tensors.size()) +
                 " tensors, input 0 of " + std::to_string(n) + "; mapped sequences must be as long");
      }
    }
    std::vector<std::vector<Tensor>> results(g.outputs.size());
    std::vector<Tensor> feeds(inputs);
    for (size_t i = 0; i < n; ++i) {
      for (size_t j = 0; j < inputs; ++j) {
        const Tensor& value = ctx.input(j);
        feeds[j] = value.is_sequence() ? value.sequence().tensors[i] : value;
      }
      std::vector<Tensor> out = body_->run(ctx, feeds);
      for (size_t k = 0; k < out.size(); ++k) results[k].push_back(std::move(out[k]));
    }
    for (size_t k = 0; k < results.size(); ++k) {
      if (!ctx.has_output(k)) continue;
      const DType declared = g.outputs[k].dtype;
      const DType element = !results[k].empty()             ? results[k].front().dtype()
                            : declared != DType::kUndefined ? declared
                                                            : DType::kFloat32;
      ctx.set_output(k, Tensor::sequence(element, std::move(results[k])));
    }
  }

 private:
  std::unique_ptr<Subgraph> body_;
};

const KernelRegistration kSequenceMap{
    "",           "SequenceMap", 17,
    kLatestOpset, kContainers,   [](const KernelInfo& info) {
                                        return std::make_unique<SequenceMapKernel>(info); }};

// Optional: its input as a present optional, or (no input) an optional without a value.
const KernelRegistration kOptional{"", "Optional", 15, kLatestOpset, kContainers, [](const KernelInfo&) {
                                     return make_kernel([](KernelContext& ctx) {
                                       ctx.set_output(0, ctx.has_input(0) ? ctx.input(0) : Tensor::none());
                                     });
                                   }};

bool has_element(const KernelContext& ctx) {
  return ctx.has_input(0) && !ctx.input(0).is_none();
}

const KernelRegistration kOptionalHasElement{
    "", "OptionalHasElement", 15, kLatestOpset, kContainers, [](const KernelInfo&) {
      return make_kernel(
          [](KernelContext& ctx) { *ctx.allocate_output(0, DType::kBool, {}).data<bool>() = has_element(ctx); });
    }};

// From opset 18 a tensor or sequence that is not optional is its own element.
const KernelRegistration kOptionalGetElement{
    "", "OptionalGetElement", 15, kLatestOpset, kContainers, [](const KernelInfo&) {
      return make_kernel([](KernelContext& ctx) {
        if (!has_element(ctx)) ctx.fail("the optional input is empty; there is no element to get");
        ctx.set_output(0, ctx.input(0));
      });
    }};

}  // namespace
}  // namespace onnxtrain
