// Kernels that copy parts of their inputs: Concat, Split, Slice, Expand, Tile, Pad, and
// onnxruntime-training's ConcatTraining and SplitTraining. Slice, Expand and Split return
// views of their input where the result is its bytes in the same order.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "core/dispatch.h"
#include "core/parallel.h"
#include "ops/cpu/axis.h"
#include "ops/cpu/broadcast.h"
#include "ops/cpu/data_movement.h"
#include "ops/cpu/layout.h"
#include "ops/kernel_registry.h"

namespace onnxtrain {
namespace {

using data_movement::copy_strided;
using data_movement::optional_ints;
using data_movement::output_strided;
using data_movement::required_ints;
using data_movement::scalar_value;
using data_movement::StridedView;

// ---------------------------------------------------------------------------------------
// Concat, Split

// Concat-1..3 defaults axis to 1; from 4 it is required.
const KernelRegistration kConcat{
    "", "Concat", 1, kLatestOpset, [](const KernelInfo& info) {
      const int64_t axis_attribute =
          info.int_attribute("axis", info.opset() < 4 ? std::optional<int64_t>(1) : std::nullopt);
      return make_kernel([axis_attribute](KernelContext& ctx) {
        const Tensor& first = ctx.input(0);
        const auto rank = static_cast<int64_t>(first.rank());
        if (rank == 0) ctx.fail("cannot concatenate scalars (input 0 has rank 0)");
        const auto axis = static_cast<size_t>(normalize_axis(ctx, axis_attribute, rank));
        std::vector<const Tensor*> parts(ctx.input_count());
        for (size_t k = 0; k < parts.size(); ++k) parts[k] = &ctx.input(k);
        Tensor& out =
            ctx.allocate_output(0, first.dtype(), data_movement::concatenated_shape(ctx, parts, axis, "input"));
        data_movement::concatenate(parts, axis, out);
      });
    }};

// Split sizes along `axis` when none are given: equal parts; from opset 18 the last part
// may be smaller (ceil(dim / n) each).
std::vector<int64_t> equal_split(const KernelContext& ctx, int64_t dim, int64_t parts, bool allow_uneven) {
  if (parts <= 0) ctx.fail("cannot split into " + std::to_string(parts) + " parts");
  if (dim % parts == 0) return std::vector<int64_t>(static_cast<size_t>(parts), dim / parts);
  if (!allow_uneven) {
    ctx.fail("cannot split a dimension of " + std::to_string(dim) + " into " + std::to_string(parts) +
             " equal parts; give 'split' sizes");
  }
  const int64_t size = dim / parts + 1;
  std::vector<int64_t> sizes(static_cast<size_t>(parts), size);
  sizes.back() = dim - size * (parts - 1);
  if (sizes.back() < 0) {
    ctx.fail("cannot split a dimension of " + std::to_string(dim) + " into " + std::to_string(parts) + " parts of " +
             std::to_string(size));
  }
  return sizes;
}

const KernelRegistration kSplit{
    "", "Split", 1, kLatestOpset, [](const KernelInfo& info) {
      const int64_t opset = info.opset();
      const int64_t axis_attribute = info.int_attribute("axis", 0);
      std::optional<std::vector<int64_t>> split_attribute;
      if (opset < 13 && info.has_attribute("split")) split_attribute = info.ints_attribute("split");
      std::optional<int64_t> num_outputs;
      if (opset >= 18 && info.has_attribute("num_outputs")) {
        num_outputs = info.int_attribute("num_outputs");
        if (*num_outputs != static_cast<int64_t>(info.output_count())) {
          info.fail("num_outputs is " + std::to_string(*num_outputs) + " but the node has " +
                    std::to_string(info.output_count()) + " outputs");
        }
      }
      // Split-1 reads sizes from input 1 when given; 13+ always does.
      const bool split_is_input = opset >= 13 || opset == 1;
      return make_kernel([=](KernelContext& ctx) {
        const Tensor& x = ctx.input(0);
        const auto axis = static_cast<size_t>(normalize_axis(ctx, axis_attribute, static_cast<int64_t>(x.rank())));
        const int64_t dim = x.shape()[axis];
        const auto outputs = static_cast<int64_t>(ctx.output_count());
        std::optional<std::vector<int64_t>> sizes = split_attribute;
        if (!sizes && split_is_input) sizes = optional_ints(ctx, 1);
        if (sizes && num_outputs) ctx.fail("give either the 'split' input or the num_outputs attribute, not both");
        if (!sizes) sizes = equal_split(ctx, dim, outputs, opset >= 18);
        if (static_cast<int64_t>(sizes->size()) != outputs) {
          ctx.fail("split " + shape_string(*sizes) + " has " + std::to_string(sizes->size()) +
                   " sizes, but the node has " + std::to_string(outputs) + " outputs");
        }
        int64_t total = 0;
        for (int64_t s : *sizes) {
          if (s < 0) ctx.fail("split " + shape_string(*sizes) + " has a negative size");
          total += s;
        }
        if (total != dim) {
          ctx.fail("split " + shape_string(*sizes) + " sums to " + std::to_string(total) + ", expected the size " +
                   std::to_string(dim) + " of axis " + std::to_string(axis));
        }
        const std::vector<int64_t> strides = contiguous_strides(x.shape());
        int64_t start = 0;
        for (size_t k = 0; k < sizes->size(); ++k) {
          StridedView view{x.shape(), strides, start * strides[axis]};
          view.shape[axis] = (*sizes)[k];
          start += (*sizes)[k];
          if (!ctx.has_output(k)) continue;
          Shape out_shape = view.shape;
          output_strided(ctx, k, x, std::move(out_shape), view);
        }
      });
    }};

// onnxruntime-training's pair: com.microsoft::ConcatTraining <axis> (inputs...) =>
// (concat_result, per_input_length?) is Concat, and the length of each input along axis
// (int64), which the backward pass's SplitTraining (input, split) <axis> => (outputs...)
// takes as its split sizes: Split with sizes from an input, as Split-13. Both run the
// kernels above, made for the node as it stands.
const KernelRegistration kMicrosoftConcatTraining{
    "com.microsoft", "ConcatTraining", 1, kLatestOpset, [](const KernelInfo& info) {
      const int64_t axis_attribute = info.int_attribute("axis");
      std::shared_ptr<OpKernel> concat = KernelRegistry::global().find("", "Concat", 13)->create(info);
      return make_kernel([concat, axis_attribute](KernelContext& ctx) {
        concat->compute(ctx);
        if (!ctx.has_output(1)) return;
        const auto axis = normalize_axis(ctx, axis_attribute, static_cast<int64_t>(ctx.input(0).rank()));
        const auto n = static_cast<int64_t>(ctx.input_count());
        int64_t* lengths = ctx.allocate_output(1, DType::kInt64, {n}).data<int64_t>();
        for (int64_t k = 0; k < n; ++k) lengths[k] = ctx.input(static_cast<size_t>(k)).dim(axis);
      });
    }};

const KernelRegistration kMicrosoftSplitTraining{
    "com.microsoft", "SplitTraining", 1, kLatestOpset, [](const KernelInfo& info) {
      if (!info.has_input(1)) info.fail("the 'split' input (the size of each output) is required");
      return KernelRegistry::global().find("", "Split", 13)->create(info);
    }};

// ---------------------------------------------------------------------------------------
// Slice

struct SliceArguments {
  std::vector<int64_t> starts, ends, axes, steps;
};

// Clamps one axis of a slice the way numpy does; returns the element count and sets `start`.
int64_t clamp_slice(int64_t dim, int64_t& start, int64_t end, int64_t step) {
  if (dim == 0) return 0;
  if (start < 0) start += dim;
  if (end < 0) end += dim;
  if (step > 0) {
    start = std::clamp<int64_t>(start, 0, dim);
    end = std::clamp<int64_t>(end, 0, dim);
    return end > start ? (end - start - 1) / step + 1 : 0;
  }
  start = std::clamp<int64_t>(start, 0, dim - 1);
  end = std::clamp<int64_t>(end, -1, dim - 1);
  return start > end ? (start - end - 1) / -step + 1 : 0;
}

void slice(KernelContext& ctx, const SliceArguments& args) {
  const Tensor& x = ctx.input(0);
  const auto rank = static_cast<int64_t>(x.rank());
  const size_t n = args.starts.size();
  if (args.ends.size() != n || args.axes.size() != n || args.steps.size() != n) {
    ctx.fail("starts, ends, axes and steps must have the same length (got " + std::to_string(args.starts.size()) +
             ", " + std::to_string(args.ends.size()) + ", " + std::to_string(args.axes.size()) + ", " +
             std::to_string(args.steps.size()) + ")");
  }
  const std::vector<int64_t> axes = normalize_axes(ctx, args.axes, rank);
  const std::vector<int64_t> in_strides = contiguous_strides(x.shape());
  StridedView view{x.shape(), in_strides, 0};
  for (size_t i = 0; i < n; ++i) {
    const auto a = static_cast<size_t>(axes[i]);
    const int64_t step = args.steps[i];
    if (step == 0) ctx.fail("steps must not be 0 (axis " + std::to_string(a) + ")");
    int64_t start = args.starts[i];
    view.shape[a] = clamp_slice(x.shape()[a], start, args.ends[i], step);
    view.strides[a] = in_strides[a] * step;
    if (view.shape[a] > 0) view.offset += start * in_strides[a];
  }
  if (shape_size(view.shape) == 0) view.offset = 0;
  Shape out_shape = view.shape;
  output_strided(ctx, 0, x, std::move(out_shape), view);
}

// Slice-1..9: starts, ends, axes are attributes; steps are 1.
const KernelRegistration kSlice1{"", "Slice", 1, 9, [](const KernelInfo& info) {
                                   SliceArguments args;
                                   args.starts = info.ints_attribute("starts");
                                   args.ends = info.ints_attribute("ends");
                                   std::optional<std::vector<int64_t>> axes;
                                   if (info.has_attribute("axes")) axes = info.ints_attribute("axes");
                                   return make_kernel([args, axes](KernelContext& ctx) mutable {
                                     SliceArguments a = args;
                                     if (axes) {
                                       a.axes = *axes;
                                     } else {
                                       a.axes.resize(a.starts.size());
                                       std::iota(a.axes.begin(), a.axes.end(), 0);
                                     }
                                     a.steps.assign(a.starts.size(), 1);
                                     slice(ctx, a);
                                   });
                                 }};

// Slice-10+: starts, ends, axes, steps are inputs 1..4 (axes and steps optional).
const KernelRegistration kSlice10{"", "Slice", 10, kLatestOpset, {.host_inputs = {1, 2, 3, 4}}, [](const KernelInfo&) {
                                    return make_kernel([](KernelContext& ctx) {
                                      SliceArguments a;
                                      a.starts = required_ints(ctx, 1, "starts");
                                      a.ends = required_ints(ctx, 2, "ends");
                                      if (auto axes = optional_ints(ctx, 3)) {
                                        a.axes = std::move(*axes);
                                      } else {
                                        a.axes.resize(a.starts.size());
                                        std::iota(a.axes.begin(), a.axes.end(), 0);
                                      }
                                      a.steps =
                                          optional_ints(ctx, 4).value_or(std::vector<int64_t>(a.starts.size(), 1));
                                      slice(ctx, a);
                                    });
                                  }};

// ---------------------------------------------------------------------------------------
// Expand, Tile

const KernelRegistration kExpand{
    "", "Expand", 8, kLatestOpset, {.host_inputs = {1}}, [](const KernelInfo&) {
      return make_kernel([](KernelContext& ctx) {
        const Tensor& x = ctx.input(0);
        const Shape target = required_ints(ctx, 1, "shape");
        for (int64_t d : target) {
          if (d < 0) ctx.fail("shape " + shape_string(target) + " has a negative dimension");
        }
        Shape out_shape;
        try {
          out_shape = broadcast_shapes(x.shape(), target);
        } catch (const Error& e) {
          ctx.fail("cannot expand " + shape_string(x.shape()) + " to " + shape_string(target) + ": " + e.what());
        }
        StridedView view{out_shape, broadcast_strides(x.shape(), out_shape), 0};
        output_strided(ctx, 0, x, std::move(out_shape), view);
      });
    }};

// Tile is a strided copy over the shape (r_0, d_0, r_1, d_1, ...): each repeat axis reads
// the input with stride 0, and that layout is exactly the tiled output's.
const KernelRegistration kTile{"", "Tile", 6, kLatestOpset, {.host_inputs = {1}}, [](const KernelInfo&) {
                                 return make_kernel([](KernelContext& ctx) {
                                   const Tensor& x = ctx.input(0);
                                   const std::vector<int64_t> repeats = required_ints(ctx, 1, "repeats");
                                   if (repeats.size() != x.rank()) {
                                     ctx.fail("repeats " + shape_string(repeats) + " has " +
                                              std::to_string(repeats.size()) + " entries, expected the input rank " +
                                              std::to_string(x.rank()));
                                   }
                                   const std::vector<int64_t> in_strides = contiguous_strides(x.shape());
                                   Shape out_shape;
                                   StridedView view;
                                   for (size_t d = 0; d < x.rank(); ++d) {
                                     if (repeats[d] < 0)
                                       ctx.fail("repeats " + shape_string(repeats) + " has a negative entry");
                                     out_shape.push_back(x.shape()[d] * repeats[d]);
                                     view.shape.insert(view.shape.end(), {repeats[d], x.shape()[d]});
                                     view.strides.insert(view.strides.end(), {0, in_strides[d]});
                                   }
                                   Tensor& out = ctx.allocate_output(0, x.dtype(), out_shape);
                                   copy_strided(out.raw_data(), x.raw_data(), view, dtype_size(x.dtype()));
                                 });
                               }};

// ---------------------------------------------------------------------------------------
// Pad

enum class PadMode { kConstant, kReflect, kEdge, kWrap };

template <typename Where>
PadMode pad_mode(const Where& where, const std::string& mode, int64_t opset) {
  if (mode == "constant") return PadMode::kConstant;
  if (mode == "reflect") return PadMode::kReflect;
  if (mode == "edge") return PadMode::kEdge;
  if (mode == "wrap" && opset >= 19) return PadMode::kWrap;
  where.fail("unknown pad mode '" + mode + "' (expected constant, reflect, edge" + (opset >= 19 ? ", wrap" : "") + ")");
}

// For one axis: the input index each output index reads, or -1 for the constant. Negative
// pads crop first; the mode then pads the cropped range [lo, hi).
template <typename Where>
std::vector<int64_t> pad_map(const Where& where, size_t axis, int64_t dim, int64_t begin, int64_t end, PadMode mode) {
  const int64_t lo = std::max<int64_t>(0, -begin);
  const int64_t hi = dim - std::max<int64_t>(0, -end);
  const int64_t length = hi - lo;
  const int64_t before = std::max<int64_t>(0, begin);
  const int64_t out = length + before + std::max<int64_t>(0, end);
  if (length < 0 || out < 0) {
    where.fail("pads (" + std::to_string(begin) + ", " + std::to_string(end) + ") crop more than the size " +
               std::to_string(dim) + " of axis " + std::to_string(axis));
  }
  std::vector<int64_t> map(static_cast<size_t>(out));
  if (length == 0 && out > 0 && mode != PadMode::kConstant) {
    where.fail("cannot pad an empty axis " + std::to_string(axis) + " in a mode other than constant");
  }
  for (int64_t o = 0; o < out; ++o) {
    int64_t c = o - before;
    if (c < 0 || c >= length) {
      switch (mode) {
        case PadMode::kConstant:
          c = -1 - lo;
          break;
        case PadMode::kEdge:
          c = std::clamp<int64_t>(c, 0, length - 1);
          break;
        case PadMode::kWrap:
          c = ((c % length) + length) % length;
          break;
        case PadMode::kReflect:
          if (length == 1) {
            c = 0;
          } else {  // numpy's reflection repeats with period 2 * (length - 1)
            const int64_t period = 2 * (length - 1);
            c = ((c % period) + period) % period;
            if (c >= length) c = period - c;
          }
          break;
      }
    }
    map[static_cast<size_t>(o)] = c + lo;
  }
  return map;
}

// Writes the padded tensor row by row: a row whose outer index falls in the padding is
// the constant; otherwise the row's middle is one memcpy and its edges follow the map.
template <typename U>
void pad_rows(U* out, const U* in, const Shape& in_shape, const std::vector<std::vector<int64_t>>& maps, U value) {
  const size_t rank = in_shape.size();
  Shape out_shape;
  for (const auto& m : maps) out_shape.push_back(static_cast<int64_t>(m.size()));
  const int64_t total = shape_size(out_shape);
  if (total == 0) return;
  if (rank == 0) {
    out[0] = in[0];
    return;
  }
  const std::vector<int64_t> in_strides = contiguous_strides(in_shape);
  const std::vector<int64_t>& last = maps[rank - 1];
  const auto inner = static_cast<int64_t>(last.size());
  // The longest run of the last axis that reads consecutive input elements.
  int64_t run_begin = 0, run_length = 0;
  for (int64_t o = 0; o < inner;) {
    int64_t e = o + 1;
    if (last[static_cast<size_t>(o)] >= 0) {
      while (e < inner && last[static_cast<size_t>(e)] == last[static_cast<size_t>(e - 1)] + 1) ++e;
      if (e - o > run_length) run_begin = o, run_length = e - o;
    }
    o = e;
  }
  const int64_t rows = total / inner;
  parallel_for(rows, std::max<int64_t>(1, 16384 / inner), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      U* d = out + r * inner;
      int64_t rest = r, offset = 0;
      bool padding = false;
      for (size_t a = rank - 1; a-- > 0;) {
        const int64_t index = maps[a][static_cast<size_t>(rest % static_cast<int64_t>(maps[a].size()))];
        rest /= static_cast<int64_t>(maps[a].size());
        padding |= index < 0;
        offset += index * in_strides[a];
      }
      if (padding) {
        std::fill(d, d + inner, value);
        continue;
      }
      const U* s = in + offset;
      for (int64_t o = 0; o < run_begin; ++o)
        d[o] = last[static_cast<size_t>(o)] < 0 ? value : s[last[static_cast<size_t>(o)]];
      if (run_length > 0) {
        std::memcpy(d + run_begin, s + last[static_cast<size_t>(run_begin)],
                    static_cast<size_t>(run_length) * sizeof(U));
      }
      for (int64_t o = run_begin + run_length; o < inner; ++o) {
        d[o] = last[static_cast<size_t>(o)] < 0 ? value : s[last[static_cast<size_t>(o)]];
      }
    }
  });
}

// The constant as the bit pattern of the tensor's element type.
template <typename U>
U pad_value_bits(DType dtype, double value) {
  U bits{};
  dispatch<ONNXTRAIN_ALL_TYPES>(dtype, "Pad", [&]<typename T>() {
    if constexpr (sizeof(T) == sizeof(U)) {
      const T v = static_cast<T>(static_cast<compute_type_t<T>>(value));
      std::memcpy(&bits, &v, sizeof(U));
    }
  });
  return bits;
}

void pad(KernelContext& ctx, const std::vector<int64_t>& raw_pads, std::optional<std::vector<int64_t>> axes_input,
         PadMode mode, double value) {
  const Tensor& x = ctx.input(0);
  const auto rank = static_cast<int64_t>(x.rank());
  std::vector<int64_t> axes;
  if (axes_input) {
    axes = normalize_axes(ctx, *axes_input, rank);
  } else {
    axes.resize(x.rank());
    std::iota(axes.begin(), axes.end(), 0);
  }
  if (raw_pads.size() != 2 * axes.size()) {
    ctx.fail("pads " + shape_string(raw_pads) + " has " + std::to_string(raw_pads.size()) + " entries, expected " +
             std::to_string(2 * axes.size()) + " (2 per padded axis)");
  }
  std::vector<int64_t> begins(x.rank(), 0), ends(x.rank(), 0);
  for (size_t i = 0; i < axes.size(); ++i) {
    begins[static_cast<size_t>(axes[i])] = raw_pads[i];
    ends[static_cast<size_t>(axes[i])] = raw_pads[axes.size() + i];
  }
  std::vector<std::vector<int64_t>> maps;
  Shape out_shape;
  for (size_t d = 0; d < x.rank(); ++d) {
    maps.push_back(pad_map(ctx, d, x.shape()[d], begins[d], ends[d], mode));
    out_shape.push_back(static_cast<int64_t>(maps.back().size()));
  }
  Tensor& out = ctx.allocate_output(0, x.dtype(), out_shape);
  dispatch_by_size(dtype_size(x.dtype()), [&]<typename U>() {
    pad_rows<U>(static_cast<U*>(out.raw_data()), static_cast<const U*>(x.raw_data()), x.shape(), maps,
                pad_value_bits<U>(x.dtype(), value));
  });
}

// Pad-2..10: pads, mode and value are attributes.
const KernelRegistration kPad2{
    "", "Pad", 2, 10, [](const KernelInfo& info) {
      const std::vector<int64_t> pads = info.ints_attribute("pads");
      const PadMode mode = pad_mode(info, info.string_attribute("mode", "constant"), info.opset());
      const double value = info.float_attribute("value", 0.0f);
      return make_kernel([=](KernelContext& ctx) { pad(ctx, pads, std::nullopt, mode, value); });
    }};

// Pad-11+: pads, constant_value (and from 18 axes) are inputs; wrap mode from 19.
const KernelRegistration kPad11{
    "", "Pad", 11, kLatestOpset, {.host_inputs = {1, 2, 3}}, [](const KernelInfo& info) {
      const PadMode mode = pad_mode(info, info.string_attribute("mode", "constant"), info.opset());
      return make_kernel([mode](KernelContext& ctx) {
        const std::vector<int64_t> pads = required_ints(ctx, 1, "pads");
        double value = 0;
        if (ctx.has_input(2) && ctx.input(2).numel() > 0) {
          const Tensor& v = ctx.input(2);
          if (v.dtype() != ctx.input(0).dtype()) {
            ctx.fail("constant_value is " + std::string(dtype_name(v.dtype())) + ", expected " +
                     std::string(dtype_name(ctx.input(0).dtype())) + " like the data");
          }
          value = scalar_value(ctx, v, "constant_value");
        }
        pad(ctx, pads, optional_ints(ctx, 3), mode, value);
      });
    }};

}  // namespace
}  // namespace onnxtrain
