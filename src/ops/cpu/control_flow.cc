// Control flow: If, Loop and Scan. Their graph attributes are compiled by the runtime once,
// when the kernel is created (KernelInfo::subgraph), into the same kind of plan the main
// graph runs on; each run of a body is a run of that plan. Values a body reads from the
// graphs around it arrive as the node's implicit inputs and are fed to the body by name.
//
//   If:   cond (bool, one element) picks then_branch or else_branch; the branches may give
//         outputs of different shapes (the same element types).
//   Loop: for (i = 0; i < M && cond; ++i) { cond, v..., scan... = body(i, cond, v...) }.
//         M and cond are optional; the body's condition output ends the loop even where the
//         cond input is omitted (as onnxruntime does; the spec's table says it is ignored
//         then); carried values may change shape between iterations; scan outputs are
//         stacked along a new first axis and must keep one shape.
//   Scan: (opset 9+) the scan inputs are sliced along scan_input_axes (backwards where
//         scan_input_directions is 1); the scan outputs are stacked along scan_output_axes
//         (in reverse where scan_output_directions is 1).
#include <algorithm>
#include <cstring>
#include <limits>
#include <memory>

#include "ops/kernel_registry.h"

namespace onnxtrain {
namespace {

std::string describe(const Tensor& t) {
  return std::string(dtype_name(t.dtype())) + shape_string(t.shape());
}

// A bool tensor of one element, read; `what` names it in the error.
bool read_condition(const KernelContext& ctx, const Tensor& t, const std::string& what) {
  if (t.dtype() != DType::kBool || t.numel() != 1) {
    ctx.fail(what + " is " + describe(t) + ", expected a bool scalar (one element)");
  }
  return *static_cast<const bool*>(t.raw_data());
}

// A tensor of `dtype` and one element, shaped like the body input `declared` says ([] or [1]).
Tensor scalar_like(const ir::ValueInfo& declared, DType dtype) {
  const bool one_d = declared.shape && declared.shape->size() == 1;
  return Tensor::zeros(dtype, one_d ? Shape{1} : Shape{});
}

size_t element_bytes(const KernelContext& ctx, const Tensor& t, const std::string& what) {
  if (t.dtype() == DType::kString || is_packed(t.dtype())) {
    ctx.fail(what + " is " + describe(t) + "; scanned values must be of a fixed-size element type");
  }
  return dtype_bytes(t.dtype(), 1);
}

// Slice `index` of `t` along `axis`, without that axis: a view along axis 0, a copy otherwise.
Tensor slice_along(const KernelContext& ctx, const Tensor& t, size_t axis, int64_t index) {
  const size_t bytes = element_bytes(ctx, t, "a scan input");
  Shape shape = t.shape();
  const int64_t length = shape[axis];
  shape.erase(shape.begin() + static_cast<std::ptrdiff_t>(axis));
  const auto inner = static_cast<size_t>(shape_size(std::span(shape).subspan(axis))) * bytes;
  if (axis == 0) return Tensor(t.dtype(), shape, t.storage(), t.byte_offset() + static_cast<size_t>(index) * inner);
  Tensor out = Tensor::empty(t.dtype(), shape);
  const auto outer = static_cast<size_t>(shape_size(std::span(shape).subspan(0, axis)));
  const auto* src = static_cast<const char*>(t.raw_data());
  auto* dst = static_cast<char*>(out.raw_data());
  for (size_t o = 0; o < outer; ++o) {
    std::memcpy(dst + o * inner, src + (o * static_cast<size_t>(length) + static_cast<size_t>(index)) * inner, inner);
  }
  return out;
}

// The per-iteration values `parts` stacked along a new axis `axis` (reversed when asked).
Tensor stack_along(const KernelContext& ctx, const std::vector<Tensor>& parts, size_t axis, bool reverse) {
  const Tensor& first = parts.front();
  const size_t bytes = element_bytes(ctx, first, "a scan output");
  const Shape& part_shape = first.shape();
  Shape shape = part_shape;
  const auto length = static_cast<int64_t>(parts.size());
  shape.insert(shape.begin() + static_cast<std::ptrdiff_t>(axis), length);
  Tensor out = Tensor::empty(first.dtype(), shape);
  const auto outer = static_cast<size_t>(shape_size(std::span(part_shape).subspan(0, axis)));
  const auto inner = static_cast<size_t>(shape_size(std::span(part_shape).subspan(axis))) * bytes;
  auto* dst = static_cast<char*>(out.raw_data());
  for (size_t t = 0; t < parts.size(); ++t) {
    const size_t at = reverse ? parts.size() - 1 - t : t;
    const auto* src = static_cast<const char*>(parts[t].raw_data());
    for (size_t o = 0; o < outer; ++o) {
      std::memcpy(dst + (o * parts.size() + at) * inner, src + o * inner, inner);
    }
  }
  return out;
}

// A scan output of no iterations: the body's declared per-iteration shape (unknown sizes as
// 0) with a 0-long axis inserted at `axis`.
Tensor empty_scan_output(const ir::ValueInfo& declared, size_t axis) {
  Shape shape;
  if (declared.shape) {
    for (const ir::Dim& d : *declared.shape) shape.push_back(d.value.value_or(0));
  }
  shape.insert(shape.begin() + static_cast<std::ptrdiff_t>(std::min(axis, shape.size())), 0);
  const DType dtype = declared.dtype == DType::kUndefined ? DType::kFloat32 : declared.dtype;
  return Tensor::empty(dtype, shape);
}

// Appends scan output `k`'s value of one iteration, which must keep the first one's type.
void collect(const KernelContext& ctx, std::vector<Tensor>& parts, Tensor value, size_t k) {
  if (!parts.empty() && (parts.front().dtype() != value.dtype() || parts.front().shape() != value.shape())) {
    ctx.fail("scan output " + std::to_string(k) + " is " + describe(value) + " in iteration " +
             std::to_string(parts.size()) + " but " + describe(parts.front()) +
             " in the first; every iteration must give one shape");
  }
  parts.push_back(std::move(value));
}

void check_counts(const KernelInfo& info, const Subgraph& body, const char* attribute, size_t inputs, size_t outputs) {
  const ir::Graph& g = body.graph();
  if (g.inputs.size() != inputs || g.outputs.size() != outputs) {
    info.fail(std::string(attribute) + " has " + std::to_string(g.inputs.size()) + " inputs and " +
              std::to_string(g.outputs.size()) + " outputs; this node needs " + std::to_string(inputs) +
              " inputs and " + std::to_string(outputs) + " outputs");
  }
}

class IfKernel final : public OpKernel {
 public:
  explicit IfKernel(const KernelInfo& info) : then_(info.subgraph("then_branch")), else_(info.subgraph("else_branch")) {
    const size_t n = info.output_count();
    check_counts(info, *then_, "then_branch", 0, n);
    check_counts(info, *else_, "else_branch", 0, n);
    for (size_t i = 0; i < n; ++i) {
      const DType a = then_->graph().outputs[i].dtype, b = else_->graph().outputs[i].dtype;
      if (a != DType::kUndefined && b != DType::kUndefined && a != b) {
        info.fail("output " + std::to_string(i) + " is " + std::string(dtype_name(a)) + " in then_branch but " +
                  std::string(dtype_name(b)) + " in else_branch; the branches must agree on element types");
      }
    }
  }

  void compute(KernelContext& ctx) override {
    const bool cond = read_condition(ctx, ctx.input(0), "cond");
    std::vector<Tensor> outputs = (cond ? then_ : else_)->run(ctx, {});
    for (size_t i = 0; i < outputs.size(); ++i) {
      if (ctx.has_output(i)) ctx.set_output(i, std::move(outputs[i]));
    }
  }

 private:
  std::unique_ptr<Subgraph> then_, else_;
};

class LoopKernel final : public OpKernel {
 public:
  explicit LoopKernel(const KernelInfo& info) : body_(info.subgraph("body")) {
    if (info.input_count() < 2) info.fail("Loop takes M, cond and the loop-carried values (M and cond may be \"\")");
    carried_ = info.input_count() - 2;
    if (info.output_count() < carried_) {
      info.fail(std::to_string(info.output_count()) + " outputs for " + std::to_string(carried_) +
                " loop-carried values");
    }
    scans_ = info.output_count() - carried_;
    check_counts(info, *body_, "body", 2 + carried_, 1 + carried_ + scans_);
  }

  void compute(KernelContext& ctx) override {
    const ir::Graph& g = body_->graph();
    int64_t trips = std::numeric_limits<int64_t>::max();
    if (ctx.has_input(0)) {
      const Tensor& m = ctx.input(0);
      if (m.dtype() != DType::kInt64 || m.numel() != 1) ctx.fail("M is " + describe(m) + ", expected an int64 scalar");
      trips = *static_cast<const int64_t*>(m.raw_data());
      if (trips < 0) ctx.fail("the trip count M is " + std::to_string(trips) + ", expected 0 or more");
    }
    bool cond = ctx.has_input(1) ? read_condition(ctx, ctx.input(1), "cond") : true;

    std::vector<Tensor> feeds(2 + carried_);
    for (size_t i = 0; i < carried_; ++i) feeds[2 + i] = ctx.input(2 + i);
    std::vector<std::vector<Tensor>> scanned(scans_);
    int64_t i = 0;
    for (; i < trips && cond; ++i) {
      feeds[0] = scalar_like(g.inputs[0], DType::kInt64);
      *static_cast<int64_t*>(feeds[0].raw_data()) = i;
      feeds[1] = scalar_like(g.inputs[1], DType::kBool);
      *static_cast<bool*>(feeds[1].raw_data()) = cond;
      std::vector<Tensor> out = body_->run(ctx, feeds);
      cond = read_condition(ctx, out[0], "the body's condition output '" + g.outputs[0].name + "'");
      for (size_t k = 0; k < carried_; ++k) feeds[2 + k] = std::move(out[1 + k]);
      for (size_t k = 0; k < scans_; ++k) collect(ctx, scanned[k], std::move(out[1 + carried_ + k]), k);
    }
    for (size_t k = 0; k < carried_; ++k) {
      if (ctx.has_output(k)) ctx.set_output(k, i == 0 ? feeds[2 + k].clone() : std::move(feeds[2 + k]));
    }
    for (size_t k = 0; k < scans_; ++k) {
      if (!ctx.has_output(carried_ + k)) continue;
      ctx.set_output(carried_ + k, scanned[k].empty() ? empty_scan_output(g.outputs[1 + carried_ + k], 0)
                                                      : stack_along(ctx, scanned[k], 0, false));
    }
  }

 private:
  std::unique_ptr<Subgraph> body_;
  size_t carried_ = 0, scans_ = 0;
};

class ScanKernel final : public OpKernel {
 public:
  explicit ScanKernel(const KernelInfo& info) : body_(info.subgraph("body")) {
    const int64_t m = info.int_attribute("num_scan_inputs");
    if (m < 1 || static_cast<size_t>(m) > info.input_count()) {
      info.fail("num_scan_inputs is " + std::to_string(m) + ", expected 1 to " + std::to_string(info.input_count()) +
                " (the node's inputs)");
    }
    inputs_ = static_cast<size_t>(m);
    states_ = info.input_count() - inputs_;
    if (info.output_count() < states_) {
      info.fail(std::to_string(info.output_count()) + " outputs for " + std::to_string(states_) + " state variables");
    }
    outputs_ = info.output_count() - states_;
    check_counts(info, *body_, "body", states_ + inputs_, info.output_count());
    auto list = [&](const char* name, size_t count) {
      std::vector<int64_t> v = info.ints_attribute(name, std::vector<int64_t>(count, 0));
      if (v.size() != count) {
        info.fail(std::string(name) + " has " + std::to_string(v.size()) + " entries, expected " +
                  std::to_string(count));
      }
      return v;
    };
    input_axes_ = list("scan_input_axes", inputs_);
    input_directions_ = list("scan_input_directions", inputs_);
    output_axes_ = list("scan_output_axes", outputs_);
    output_directions_ = list("scan_output_directions", outputs_);
    for (const auto* directions : {&input_directions_, &output_directions_}) {
      for (int64_t d : *directions) {
        if (d != 0 && d != 1) info.fail("a scan direction is " + std::to_string(d) + ", expected 0 or 1");
      }
    }
  }

  void compute(KernelContext& ctx) override {
    std::vector<size_t> axes(inputs_);
    int64_t length = -1;
    for (size_t j = 0; j < inputs_; ++j) {
      const Tensor& x = ctx.input(states_ + j);
      const auto rank = static_cast<int64_t>(x.rank());
      const int64_t axis = input_axes_[j] < 0 ? input_axes_[j] + rank : input_axes_[j];
      if (axis < 0 || axis >= rank) {
        ctx.fail("scan input " + std::to_string(j) + " is " + describe(x) + ", which has no axis " +
                 std::to_string(input_axes_[j]));
      }
      axes[j] = static_cast<size_t>(axis);
      const int64_t n = x.shape()[axes[j]];
      if (length >= 0 && n != length) {
        ctx.fail("scan input " + std::to_string(j) + " is " + describe(x) + ", " + std::to_string(n) +
                 " long along its scan axis, but an earlier scan input is " + std::to_string(length) + " long");
      }
      length = n;
    }

    std::vector<Tensor> feeds(states_ + inputs_);
    for (size_t i = 0; i < states_; ++i) feeds[i] = ctx.input(i);
    std::vector<std::vector<Tensor>> scanned(outputs_);
    for (int64_t t = 0; t < length; ++t) {
      for (size_t j = 0; j < inputs_; ++j) {
        const int64_t at = input_directions_[j] ? length - 1 - t : t;
        feeds[states_ + j] = slice_along(ctx, ctx.input(states_ + j), axes[j], at);
      }
      std::vector<Tensor> out = body_->run(ctx, feeds);
      for (size_t k = 0; k < states_; ++k) feeds[k] = std::move(out[k]);
      for (size_t k = 0; k < outputs_; ++k) collect(ctx, scanned[k], std::move(out[states_ + k]), k);
    }
    for (size_t k = 0; k < states_; ++k) {
      if (ctx.has_output(k)) ctx.set_output(k, length == 0 ? feeds[k].clone() : std::move(feeds[k]));
    }
    const ir::Graph& g = body_->graph();
    for (size_t k = 0; k < outputs_; ++k) {
      if (!ctx.has_output(states_ + k)) continue;
      const ir::ValueInfo& declared = g.outputs[states_ + k];
      const size_t part_rank =
          scanned[k].empty() ? (declared.shape ? declared.shape->size() : 0) : scanned[k].front().rank();
      const auto rank = static_cast<int64_t>(part_rank) + 1;
      const int64_t axis = output_axes_[k] < 0 ? output_axes_[k] + rank : output_axes_[k];
      if (axis < 0 || axis >= rank) {
        ctx.fail("scan_output_axes[" + std::to_string(k) + "] is " + std::to_string(output_axes_[k]) +
                 ", outside the " + std::to_string(rank) + " axes of scan output " + std::to_string(k));
      }
      ctx.set_output(states_ + k, scanned[k].empty() ? empty_scan_output(declared, static_cast<size_t>(axis))
                                                     : stack_along(ctx, scanned[k], static_cast<size_t>(axis),
                                                                   output_directions_[k] == 1));
    }
  }

 private:
  std::unique_ptr<Subgraph> body_;
  size_t states_ = 0, inputs_ = 0, outputs_ = 0;
  std::vector<int64_t> input_axes_, input_directions_, output_axes_, output_directions_;
};

// Scan-8: a batch axis first. Inputs: sequence_lens (optional, int64 [batch]), the initial
// states [batch, ...], the scan inputs [batch, sequence, ...] (backwards where `directions`
// is 1); each batch entry is scanned over its first sequence_lens[b] steps, and its scan
// outputs are zero past them.
class Scan8Kernel final : public OpKernel {
 public:
  explicit Scan8Kernel(const KernelInfo& info) : body_(info.subgraph("body")) {
    const int64_t m = info.int_attribute("num_scan_inputs");
    if (info.input_count() < 1 || m < 1 || static_cast<size_t>(m) > info.input_count() - 1) {
      info.fail("num_scan_inputs is " + std::to_string(m) + ", expected 1 to " +
                std::to_string(info.input_count() - 1) + " (the node's inputs after sequence_lens)");
    }
    inputs_ = static_cast<size_t>(m);
    states_ = info.input_count() - 1 - inputs_;
    if (info.output_count() < states_) {
      info.fail(std::to_string(info.output_count()) + " outputs for " + std::to_string(states_) + " state variables");
    }
    outputs_ = info.output_count() - states_;
    check_counts(info, *body_, "body", states_ + inputs_, info.output_count());
    directions_ = info.ints_attribute("directions", std::vector<int64_t>(inputs_, 0));
    if (directions_.size() != inputs_) info.fail("directions has " + std::to_string(directions_.size()) + " entries");
  }

  void compute(KernelContext& ctx) override {
    const size_t first = 1;
    const Tensor& x0 = ctx.input(first + states_);
    if (x0.rank() < 2) ctx.fail("scan input 0 is " + describe(x0) + ", expected [batch, sequence, ...]");
    const int64_t batch = x0.shape()[0], steps = x0.shape()[1];
    for (size_t j = 0; j < states_ + inputs_; ++j) {
      const Tensor& t = ctx.input(first + j);
      if (t.rank() < (j < states_ ? 1u : 2u) || t.shape()[0] != batch || (j >= states_ && t.shape()[1] != steps)) {
        ctx.fail("input " + std::to_string(first + j) + " is " + describe(t) + ", expected a batch of " +
                 std::to_string(batch) + (j >= states_ ? " sequences of " + std::to_string(steps) : std::string()));
      }
    }
    std::vector<int64_t> lengths(static_cast<size_t>(batch), steps);
    if (ctx.has_input(0)) {
      const Tensor& l = ctx.input(0);
      if (l.dtype() != DType::kInt64 || l.numel() != batch) {
        ctx.fail("sequence_lens is " + describe(l) + ", expected int64[" + std::to_string(batch) + "]");
      }
      for (int64_t b = 0; b < batch; ++b) {
        const int64_t n = static_cast<const int64_t*>(l.raw_data())[b];
        if (n < 0 || n > steps) ctx.fail("sequence_lens[" + std::to_string(b) + "] is " + std::to_string(n));
        lengths[static_cast<size_t>(b)] = n;
      }
    }
    std::vector<std::vector<Tensor>> states(states_), scanned(outputs_);
    for (int64_t b = 0; b < batch; ++b) {
      std::vector<Tensor> feeds(states_ + inputs_);
      for (size_t k = 0; k < states_; ++k) feeds[k] = slice_along(ctx, ctx.input(first + k), 0, b);
      std::vector<Tensor> sequence(inputs_);
      for (size_t j = 0; j < inputs_; ++j) sequence[j] = slice_along(ctx, ctx.input(first + states_ + j), 0, b);
      std::vector<std::vector<Tensor>> parts(outputs_);
      const int64_t n = lengths[static_cast<size_t>(b)];
      for (int64_t t = 0; t < n; ++t) {
        for (size_t j = 0; j < inputs_; ++j)
          feeds[states_ + j] = slice_along(ctx, sequence[j], 0, directions_[j] ? n - 1 - t : t);
        std::vector<Tensor> out = body_->run(ctx, feeds);
        for (size_t k = 0; k < states_; ++k) feeds[k] = std::move(out[k]);
        for (size_t k = 0; k < outputs_; ++k) collect(ctx, parts[k], std::move(out[states_ + k]), k);
      }
      for (size_t k = 0; k < states_; ++k) states[k].push_back(std::move(feeds[k]));
      for (size_t k = 0; k < outputs_; ++k) {
        if (parts[k].empty()) ctx.fail("batch entry " + std::to_string(b) + " has no steps to give scan outputs");
        while (static_cast<int64_t>(parts[k].size()) < steps) {
          parts[k].push_back(Tensor::zeros(parts[k].front().dtype(), parts[k].front().shape()));
        }
        collect(ctx, scanned[k], stack_along(ctx, parts[k], 0, false), k);
      }
    }
    for (size_t k = 0; k < states_; ++k) {
      if (ctx.has_output(k)) ctx.set_output(k, stack_along(ctx, states[k], 0, false));
    }
    for (size_t k = 0; k < outputs_; ++k) {
      if (ctx.has_output(states_ + k)) ctx.set_output(states_ + k, stack_along(ctx, scanned[k], 0, false));
    }
  }

 private:
  std::unique_ptr<Subgraph> body_;
  size_t states_ = 0, inputs_ = 0, outputs_ = 0;
  std::vector<int64_t> directions_;
};

// If's branches and Loop's carried values may be sequences and optionals (Scan's are tensors).
const KernelRegistration kIf{"", "If", 1, kLatestOpset, {.containers = true}, [](const KernelInfo& info) {
                               return std::make_unique<IfKernel>(info);
                             }};
const KernelRegistration kLoop{"", "Loop", 1, kLatestOpset, {.containers = true}, [](const KernelInfo& info) {
                                 return std::make_unique<LoopKernel>(info);
                               }};
const KernelRegistration kScan8{"", "Scan", 8, 8,
                                [](const KernelInfo& info) { return std::make_unique<Scan8Kernel>(info); }};
const KernelRegistration kScan{"", "Scan", 9, kLatestOpset,
                               [](const KernelInfo& info) { return std::make_unique<ScanKernel>(info); }};

}  // namespace
}  // namespace onnxtrain
