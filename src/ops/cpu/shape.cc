// Shape and data-movement kernels: Reshape, Flatten, Squeeze, Unsqueeze, Transpose, Concat,
// Split, Slice, Expand, Tile, Pad, Trilu, Shape, Size, Range, ConstantOfShape, Constant,
// EyeLike, and onnxruntime-training's ConcatTraining and SplitTraining.
//
// These ops move elements without looking at them, so most kernels work on element
// *sizes*, not types: one copy routine (copy_strided) serves every dtype. Ops whose result
// is the input's bytes in the same order (Reshape, Flatten, Squeeze, Unsqueeze, and
// Transpose/Slice/Expand/Split when they happen to be contiguous) return views.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "core/dispatch.h"
#include "core/parallel.h"
#include "ops/cpu/broadcast.h"
#include "ops/cpu/layout.h"
#include "ops/kernel_registry.h"

namespace onnxtrain {
namespace {

// ---------------------------------------------------------------------------------------
// Helpers

// Normalized, duplicate-free axes.
template <typename Where>
std::vector<int64_t> normalize_axes(const Where& where, std::vector<int64_t> axes, int64_t rank) {
  for (int64_t& a : axes) a = normalize_axis(where, a, rank);
  std::vector<int64_t> sorted = axes;
  std::sort(sorted.begin(), sorted.end());
  if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end()) where.fail("axes contain a duplicate");
  return axes;
}

// The elements of an integer tensor as int64. (Not Tensor::to_int64_vector: core
// dispatch() with a return value currently hands back a dangling reference.)
std::vector<int64_t> int64_values(const KernelContext& ctx, const Tensor& t, std::string_view what) {
  std::vector<int64_t> values(static_cast<size_t>(t.numel()));
  if (t.dtype() == DType::kInt64) {
    std::copy_n(t.data<int64_t>(), values.size(), values.begin());
  } else if (t.dtype() == DType::kInt32) {
    std::copy_n(t.data<int32_t>(), values.size(), values.begin());
  } else {
    ctx.fail(std::string(what) + " must be int64 or int32, got " + std::string(dtype_name(t.dtype())));
  }
  return values;
}

// The values of input i, a list of integers (a 1-D tensor, or a scalar as one value): a
// tensor of higher rank is refused (ConstantOfShape of a [3,3,3,3] "shape" would make a
// rank-81 tensor of its 81 values).
std::vector<int64_t> int_list(const KernelContext& ctx, size_t i, const std::string& name) {
  const Tensor& t = ctx.input(i);
  if (t.rank() > 1) ctx.fail(name + " must be a 1-D tensor, got shape " + shape_string(t.shape()));
  return int64_values(ctx, t, name);
}

// The values of an optional 1-D integer input, or nullopt when it is absent.
std::optional<std::vector<int64_t>> optional_ints(const KernelContext& ctx, size_t i) {
  if (!ctx.has_input(i)) return std::nullopt;
  return int_list(ctx, i, "input " + std::to_string(i));
}

// The values of a required 1-D integer input; a missing one (an empty name) fails naming it.
std::vector<int64_t> required_ints(const KernelContext& ctx, size_t i, std::string_view name) {
  if (!ctx.has_input(i)) ctx.fail("required input " + std::to_string(i) + " ('" + std::string(name) + "') is missing");
  return int_list(ctx, i, "input " + std::to_string(i) + " ('" + std::string(name) + "')");
}

// The one value of a scalar or 1-element tensor, as double.
double scalar_value(const KernelContext& ctx, const Tensor& t, std::string_view what) {
  if (t.numel() != 1) ctx.fail(std::string(what) + " has shape " + shape_string(t.shape()) + ", expected one element");
  double value = 0;
  dispatch<ONNXTRAIN_NUMERIC_TYPES, bool>(t.dtype(), what, [&]<typename T>() {
    value = static_cast<double>(static_cast<compute_type_t<T>>(t.data<T>()[0]));
  });
  return value;
}

// A strided view: output index (i_0, ..., i_n) reads element offset + sum i_d * strides[d]
// of the source (strides in elements; 0 broadcasts, negative walks backwards).
struct StridedView {
  Shape shape;
  std::vector<int64_t> strides;
  int64_t offset = 0;
};

// Drops size-1 axes and merges neighbours that walk the source as one axis, so that the
// copy loops below see as few and as long axes as possible.
StridedView collapse(const StridedView& view) {
  StridedView c;
  c.offset = view.offset;
  for (size_t d = 0; d < view.shape.size(); ++d) {
    if (view.shape[d] == 1) continue;
    if (!c.shape.empty() && c.strides.back() == view.strides[d] * view.shape[d]) {
      c.shape.back() *= view.shape[d];
      c.strides.back() = view.strides[d];
      continue;
    }
    c.shape.push_back(view.shape[d]);
    c.strides.push_back(view.strides[d]);
  }
  return c;
}

// Steps an index over `shape` (all but the axes in `skip`), keeping a source offset.
struct Odometer {
  const Shape& shape;
  const std::vector<int64_t>& strides;
  std::vector<int64_t> index;
  int64_t offset = 0;

  Odometer(const Shape& s, const std::vector<int64_t>& st) : shape(s), strides(st), index(s.size(), 0) {}
  // Positions the odometer at linear index `n` over the axes before `end_axis`.
  void seek(int64_t n, size_t end_axis) {
    offset = 0;
    for (size_t d = end_axis; d-- > 0;) {
      index[d] = n % shape[d];
      n /= shape[d];
      offset += index[d] * strides[d];
    }
  }
  void next(size_t end_axis) {
    for (size_t d = end_axis; d-- > 0;) {
      offset += strides[d];
      if (++index[d] < shape[d]) return;
      offset -= index[d] * strides[d];
      index[d] = 0;
    }
  }
};

// The transpose path: the source's unit-stride axis `p` is not the output's last axis, so
// the copy reads the (p, last) plane of every batch position as a tiled 2-D transpose.
template <typename U>
void copy_transposed(U* dst, const U* src, const StridedView& v, size_t p) {
  const size_t rank = v.shape.size();
  const size_t q = rank - 1;
  const std::vector<int64_t> dst_strides = contiguous_strides(v.shape);
  // The batch axes: every axis but p and q, in order.
  Shape batch_shape;
  std::vector<int64_t> batch_src, batch_dst;
  for (size_t d = 0; d < q; ++d) {
    if (d == p) continue;
    batch_shape.push_back(v.shape[d]);
    batch_src.push_back(v.strides[d]);
    batch_dst.push_back(dst_strides[d]);
  }
  const int64_t rows = v.shape[p], cols = v.shape[q];
  const int64_t batches = shape_size(batch_shape);
  const int64_t row_blocks = (rows + 63) / 64;
  parallel_for(batches * row_blocks, std::max<int64_t>(1, 16384 / std::max<int64_t>(1, 64 * cols)),
               [&](int64_t begin, int64_t end) {
                 for (int64_t w = begin; w < end; ++w) {
                   int64_t b = w / row_blocks;
                   const int64_t r0 = (w % row_blocks) * 64;
                   int64_t so = v.offset, dof = 0;
                   for (size_t d = batch_shape.size(); d-- > 0;) {
                     const int64_t i = b % batch_shape[d];
                     b /= batch_shape[d];
                     so += i * batch_src[d];
                     dof += i * batch_dst[d];
                   }
                   transpose_block(dst + dof + r0 * dst_strides[p], src + so + r0, std::min<int64_t>(64, rows - r0),
                                   cols, dst_strides[p], v.strides[q]);
                 }
               });
}

// Copies a strided view of `src` into the contiguous `dst`.
void copy_strided(void* dst, const void* src, const StridedView& view, size_t element_size) {
  if (shape_size(view.shape) == 0) return;
  const StridedView v = collapse(view);
  dispatch_by_size(element_size, [&]<typename U>() {
    U* out = static_cast<U*>(dst);
    const U* in = static_cast<const U*>(src);
    const size_t rank = v.shape.size();
    if (rank == 0) {
      out[0] = in[v.offset];
      return;
    }
    const int64_t inner = v.shape[rank - 1];
    const int64_t step = v.strides[rank - 1];
    if (step != 1 && step != 0) {
      for (size_t p = 0; p + 1 < rank; ++p) {
        if (v.strides[p] == 1 && inner >= 4) return copy_transposed(out, in, v, p);
      }
    }
    const int64_t rows = shape_size(v.shape) / inner;
    parallel_for(rows, std::max<int64_t>(1, 32768 / static_cast<int64_t>(inner * sizeof(U))),
                 [&](int64_t begin, int64_t end) {
                   Odometer odometer(v.shape, v.strides);
                   odometer.seek(begin, rank - 1);
                   for (int64_t r = begin; r < end; ++r, odometer.next(rank - 1)) {
                     const U* s = in + v.offset + odometer.offset;
                     U* d = out + r * inner;
                     if (step == 1) {
                       std::memcpy(d, s, static_cast<size_t>(inner) * sizeof(U));
                     } else if (step == 0) {
                       std::fill(d, d + inner, *s);
                     } else {
                       for (int64_t i = 0; i < inner; ++i) d[i] = s[i * step];
                     }
                   }
                 });
  });
}

// Output `i` is `view` of `input`: the input's own bytes when the view is contiguous,
// otherwise a copy.
void output_strided(KernelContext& ctx, size_t i, const Tensor& input, Shape out_shape, const StridedView& view) {
  const StridedView c = collapse(view);
  const bool contiguous = c.shape.empty() || (c.shape.size() == 1 && c.strides[0] == 1);
  if (contiguous && shape_size(out_shape) > 0 && input.storage()) {
    const size_t offset = input.byte_offset() + static_cast<size_t>(view.offset) * dtype_size(input.dtype());
    ctx.set_output(i, Tensor(input.dtype(), std::move(out_shape), input.storage(), offset));
    return;
  }
  Tensor& out = ctx.allocate_output(i, input.dtype(), std::move(out_shape));
  copy_strided(out.raw_data(), input.raw_data(), view, dtype_size(input.dtype()));
}

// ---------------------------------------------------------------------------------------
// Reshape, Flatten, Squeeze, Unsqueeze: views.

Shape reshape_target(const KernelContext& ctx, const Shape& in, const std::vector<int64_t>& requested,
                     bool allow_zero) {
  Shape out(requested.size());
  int64_t infer = -1;
  int64_t known = 1;
  bool has_zero = false;
  for (size_t d = 0; d < requested.size(); ++d) {
    const int64_t r = requested[d];
    if (r == -1) {
      if (infer >= 0) ctx.fail("shape " + shape_string(requested) + " has more than one -1");
      infer = static_cast<int64_t>(d);
      continue;
    }
    if (r < -1) ctx.fail("shape " + shape_string(requested) + " has a negative dimension other than -1");
    if (r == 0 && !allow_zero) {
      if (d >= in.size()) {
        ctx.fail("shape " + shape_string(requested) + " copies dimension " + std::to_string(d) + " (0) but the input " +
                 shape_string(in) + " has rank " + std::to_string(in.size()));
      }
      out[d] = in[d];
    } else {
      out[d] = r;
      has_zero |= r == 0;
    }
    known *= out[d];
  }
  const int64_t total = shape_size(in);
  if (infer >= 0) {
    if (has_zero) ctx.fail("shape " + shape_string(requested) + " has both 0 (allowzero=1) and -1");
    if (known == 0 || total % known != 0) {
      ctx.fail("cannot reshape " + shape_string(in) + " (" + std::to_string(total) + " elements) to " +
               shape_string(requested) + ": the -1 cannot be inferred");
    }
    out[static_cast<size_t>(infer)] = total / known;
  }
  if (shape_size(out) != total) {
    ctx.fail("cannot reshape " + shape_string(in) + " (" + std::to_string(total) + " elements) to " +
             shape_string(requested) + " (" + std::to_string(shape_size(out)) + " elements)");
  }
  return out;
}

// Reshape-5+: the shape is input 1; allowzero (14+) makes 0 a real zero-size dimension.
const KernelRegistration kReshape{
    "", "Reshape", 5, kLatestOpset, {.host_inputs = {1}, .packed_types = true}, [](const KernelInfo& info) {
      const bool allow_zero = info.bool_attribute("allowzero", false);
      return make_kernel([allow_zero](KernelContext& ctx) {
        const Tensor& x = ctx.input(0);
        const std::vector<int64_t> requested = required_ints(ctx, 1, "shape");
        ctx.set_output(0, x.reshaped(reshape_target(ctx, x.shape(), requested, allow_zero)));
      });
    }};

const KernelRegistration kFlatten{"", "Flatten", 1, kLatestOpset, {.packed_types = true}, [](const KernelInfo& info) {
                                    const int64_t axis = info.int_attribute("axis", 1);
                                    return make_kernel([axis](KernelContext& ctx) {
                                      const Tensor& x = ctx.input(0);
                                      const auto rank = static_cast<int64_t>(x.rank());
                                      if (axis < -rank || axis > rank) {
                                        ctx.fail("axis " + std::to_string(axis) + " is out of range for rank " +
                                                 std::to_string(rank) + " (expected " + std::to_string(-rank) + ".." +
                                                 std::to_string(rank) + ")");
                                      }
                                      const auto split = static_cast<size_t>(axis < 0 ? axis + rank : axis);
                                      const Shape& s = x.shape();
                                      const int64_t outer = shape_size(std::span(s).first(split));
                                      const int64_t inner = shape_size(std::span(s).subspan(split));
                                      ctx.set_output(0, x.reshaped({outer, inner}));
                                    });
                                  }};

// Squeeze/Unsqueeze take `axes` as an attribute before opset 13 and as input 1 from 13.
std::optional<std::vector<int64_t>> axes_of(const KernelContext& ctx,
                                            const std::optional<std::vector<int64_t>>& attribute) {
  return attribute ? attribute : optional_ints(ctx, 1);
}

KernelFactory squeeze_factory(bool axes_is_input) {
  return [axes_is_input](const KernelInfo& info) {
    std::optional<std::vector<int64_t>> attribute;
    if (!axes_is_input && info.has_attribute("axes")) attribute = info.ints_attribute("axes");
    return make_kernel([attribute](KernelContext& ctx) {
      const Tensor& x = ctx.input(0);
      const auto rank = static_cast<int64_t>(x.rank());
      const std::optional<std::vector<int64_t>> axes = axes_of(ctx, attribute);
      std::vector<bool> drop(x.rank(), false);
      if (!axes) {
        for (size_t d = 0; d < x.rank(); ++d) drop[d] = x.shape()[d] == 1;
      } else {
        for (int64_t a : normalize_axes(ctx, *axes, rank)) {
          if (x.shape()[static_cast<size_t>(a)] != 1) {
            ctx.fail("cannot squeeze axis " + std::to_string(a) + " of shape " + shape_string(x.shape()) +
                     ": its size is " + std::to_string(x.shape()[static_cast<size_t>(a)]) + ", expected 1");
          }
          drop[static_cast<size_t>(a)] = true;
        }
      }
      Shape out;
      for (size_t d = 0; d < x.rank(); ++d) {
        if (!drop[d]) out.push_back(x.shape()[d]);
      }
      ctx.set_output(0, x.reshaped(std::move(out)));
    });
  };
}

const KernelRegistration kSqueeze1{"", "Squeeze", 1, 12, {.packed_types = true}, squeeze_factory(false)};
const KernelRegistration kSqueeze13{
    "", "Squeeze", 13, kLatestOpset, {.host_inputs = {1}, .packed_types = true}, squeeze_factory(true)};

KernelFactory unsqueeze_factory(bool axes_is_input) {
  return [axes_is_input](const KernelInfo& info) {
    std::optional<std::vector<int64_t>> attribute;
    if (!axes_is_input) attribute = info.ints_attribute("axes");
    return make_kernel([attribute](KernelContext& ctx) {
      const Tensor& x = ctx.input(0);
      const std::optional<std::vector<int64_t>> axes = axes_of(ctx, attribute);
      if (!axes) ctx.fail("input 'axes' is required");
      const auto rank = static_cast<int64_t>(x.rank() + axes->size());
      std::vector<bool> inserted(static_cast<size_t>(rank), false);
      for (int64_t a : normalize_axes(ctx, *axes, rank)) inserted[static_cast<size_t>(a)] = true;
      Shape out;
      size_t next = 0;
      for (int64_t d = 0; d < rank; ++d) out.push_back(inserted[static_cast<size_t>(d)] ? 1 : x.shape()[next++]);
      ctx.set_output(0, x.reshaped(std::move(out)));
    });
  };
}

const KernelRegistration kUnsqueeze1{"", "Unsqueeze", 1, 12, {.packed_types = true}, unsqueeze_factory(false)};
const KernelRegistration kUnsqueeze13{
    "", "Unsqueeze", 13, kLatestOpset, {.host_inputs = {1}, .packed_types = true}, unsqueeze_factory(true)};

// ---------------------------------------------------------------------------------------
// Transpose

const KernelRegistration kTranspose{"", "Transpose", 1, kLatestOpset, [](const KernelInfo& info) {
                                      std::optional<std::vector<int64_t>> perm;
                                      if (info.has_attribute("perm")) perm = info.ints_attribute("perm");
                                      return make_kernel([perm](KernelContext& ctx) {
                                        const Tensor& x = ctx.input(0);
                                        const size_t rank = x.rank();
                                        std::vector<int64_t> p(rank);
                                        if (perm) {
                                          if (perm->size() != rank) {
                                            ctx.fail("perm " + shape_string(*perm) + " has " +
                                                     std::to_string(perm->size()) +
                                                     " entries, expected the input rank " + std::to_string(rank));
                                          }
                                          p = normalize_axes(ctx, *perm, static_cast<int64_t>(rank));
                                        } else {
                                          for (size_t d = 0; d < rank; ++d) p[d] = static_cast<int64_t>(rank - 1 - d);
                                        }
                                        const std::vector<int64_t> in_strides = contiguous_strides(x.shape());
                                        StridedView view;
                                        for (size_t d = 0; d < rank; ++d) {
                                          view.shape.push_back(x.shape()[static_cast<size_t>(p[d])]);
                                          view.strides.push_back(in_strides[static_cast<size_t>(p[d])]);
                                        }
                                        Shape out_shape = view.shape;
                                        output_strided(ctx, 0, x, std::move(out_shape), view);
                                      });
                                    }};

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
        Shape out_shape = first.shape();
        out_shape[axis] = 0;
        for (size_t k = 0; k < ctx.input_count(); ++k) {
          const Tensor& t = ctx.input(k);
          if (t.dtype() != first.dtype()) {
            ctx.fail("input " + std::to_string(k) + " is " + std::string(dtype_name(t.dtype())) + ", expected " +
                     std::string(dtype_name(first.dtype())) + " like input 0");
          }
          bool matches = t.rank() == first.rank();
          for (size_t d = 0; matches && d < t.rank(); ++d) matches = d == axis || t.shape()[d] == first.shape()[d];
          if (!matches) {
            ctx.fail("input " + std::to_string(k) + " has shape " + shape_string(t.shape()) +
                     ", incompatible with input 0 " + shape_string(first.shape()) + " for concatenation on axis " +
                     std::to_string(axis));
          }
          out_shape[axis] += t.shape()[axis];
        }
        Tensor& out = ctx.allocate_output(0, first.dtype(), out_shape);
        const size_t esize = dtype_size(first.dtype());
        const int64_t outer = shape_size(std::span(out_shape).first(axis));
        const int64_t inner = shape_size(std::span(out_shape).subspan(axis + 1));
        const size_t n = ctx.input_count();
        std::vector<size_t> chunk(n), start(n);  // bytes per outer index, and offset in the output row
        size_t row = 0;
        for (size_t k = 0; k < n; ++k) {
          chunk[k] = static_cast<size_t>(ctx.input(k).shape()[axis] * inner) * esize;
          start[k] = row;
          row += chunk[k];
        }
        auto* dst = static_cast<std::byte*>(out.raw_data());
        const int64_t grain = std::max<int64_t>(1, 65536 / static_cast<int64_t>(std::max<size_t>(1, row / n)));
        parallel_for(outer * static_cast<int64_t>(n), grain, [&](int64_t begin, int64_t end) {
          for (int64_t w = begin; w < end; ++w) {
            const auto o = static_cast<size_t>(w / static_cast<int64_t>(n));
            const auto k = static_cast<size_t>(w % static_cast<int64_t>(n));
            if (chunk[k] == 0) continue;
            const auto* src = static_cast<const std::byte*>(ctx.input(k).raw_data());
            std::memcpy(dst + o * row + start[k], src + o * chunk[k], chunk[k]);
          }
        });
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

// ---------------------------------------------------------------------------------------
// Trilu, EyeLike

const KernelRegistration kTrilu{
    "", "Trilu", 14, kLatestOpset, [](const KernelInfo& info) {
      const bool upper = info.bool_attribute("upper", true);
      return make_kernel([upper](KernelContext& ctx) {
        const Tensor& x = ctx.input(0);
        if (x.rank() < 2) ctx.fail("input has shape " + shape_string(x.shape()) + ", expected rank >= 2");
        int64_t k = 0;
        if (ctx.has_input(1)) {
          const std::vector<int64_t> kv = int64_values(ctx, ctx.input(1), "k");
          if (kv.size() != 1) ctx.fail("k has shape " + shape_string(ctx.input(1).shape()) + ", expected a scalar");
          k = kv[0];
        }
        const int64_t rows = x.dim(-2), cols = x.dim(-1);
        Tensor& out = ctx.allocate_output_in_place(0, 0, x.dtype(), x.shape());
        const size_t esize = dtype_size(x.dtype());
        const auto* src = static_cast<const std::byte*>(x.raw_data());
        auto* dst = static_cast<std::byte*>(out.raw_data());
        const int64_t total_rows = x.numel() / std::max<int64_t>(cols, 1);
        parallel_for(total_rows, std::max<int64_t>(1, 16384 / std::max<int64_t>(cols, 1)),
                     [&](int64_t begin, int64_t end) {
                       for (int64_t r = begin; r < end; ++r) {
                         const int64_t i = r % rows;
                         // Kept columns: j >= i + k (upper) or j <= i + k (lower); the rest are zero.
                         const int64_t keep_begin = upper ? std::clamp<int64_t>(i + k, 0, cols) : 0;
                         const int64_t keep_end = upper ? cols : std::clamp<int64_t>(i + k + 1, 0, cols);
                         const size_t row = static_cast<size_t>(r * cols) * esize;
                         auto bytes = [&](int64_t n) { return static_cast<size_t>(n) * esize; };
                         std::memset(dst + row, 0, bytes(keep_begin));
                         if (dst != src)
                           std::memcpy(dst + row + bytes(keep_begin), src + row + bytes(keep_begin),
                                       bytes(keep_end - keep_begin));
                         std::memset(dst + row + bytes(keep_end), 0, bytes(cols - keep_end));
                       }
                     });
      });
    }};

// A tensor attribute's or input's dtype code, checked against what onnxtrain holds.
template <typename Where>
DType dtype_attribute(const Where& where, int64_t code) {
  const DType dtype = dtype_from_onnx(static_cast<int32_t>(code));
  if (!is_supported(dtype)) where.fail("unsupported dtype " + std::to_string(code));
  return dtype;
}

const KernelRegistration kEyeLike{"", "EyeLike", 9, kLatestOpset, [](const KernelInfo& info) {
                                    std::optional<DType> dtype;
                                    if (info.has_attribute("dtype"))
                                      dtype = dtype_attribute(info, info.int_attribute("dtype"));
                                    const int64_t k = info.int_attribute("k", 0);
                                    return make_kernel([dtype, k](KernelContext& ctx) {
                                      const Tensor& x = ctx.input(0);
                                      if (x.rank() != 2)
                                        ctx.fail("input has shape " + shape_string(x.shape()) + ", expected rank 2");
                                      Tensor& out = ctx.allocate_output(0, dtype.value_or(x.dtype()), x.shape());
                                      std::memset(out.raw_data(), 0, out.nbytes());
                                      dispatch<ONNXTRAIN_ALL_TYPES>(out.dtype(), "EyeLike", [&]<typename T>() {
                                        T* o = out.data<T>();
                                        const int64_t rows = x.shape()[0], cols = x.shape()[1];
                                        for (int64_t i = std::max<int64_t>(0, -k); i < rows && i + k < cols; ++i)
                                          o[i * cols + i + k] = static_cast<T>(1);
                                      });
                                    });
                                  }};

// ---------------------------------------------------------------------------------------
// Shape, Size, Range, ConstantOfShape, Constant

const KernelRegistration kShape{
    "", "Shape", 1, kLatestOpset, {.packed_types = true}, [](const KernelInfo& info) {
      const int64_t start_attribute = info.opset() >= 15 ? info.int_attribute("start", 0) : 0;
      std::optional<int64_t> end_attribute;
      if (info.opset() >= 15 && info.has_attribute("end")) end_attribute = info.int_attribute("end");
      return make_kernel([=](KernelContext& ctx) {
        const Shape& s = ctx.input(0).shape();
        const auto rank = static_cast<int64_t>(s.size());
        auto clamp = [&](int64_t v) { return std::clamp<int64_t>(v < 0 ? v + rank : v, 0, rank); };
        const int64_t start = clamp(start_attribute);
        const int64_t end = std::max(start, clamp(end_attribute.value_or(rank)));
        Tensor& out = ctx.allocate_output(0, DType::kInt64, {end - start});
        std::copy(s.begin() + start, s.begin() + end, out.data<int64_t>());
      });
    }};

const KernelRegistration kSize{"", "Size", 1, kLatestOpset, {.packed_types = true}, [](const KernelInfo&) {
                                 return make_kernel([](KernelContext& ctx) {
                                   Tensor& out = ctx.allocate_output(0, DType::kInt64, {});
                                   *out.data<int64_t>() = ctx.input(0).numel();
                                 });
                               }};

const KernelRegistration kRange{
    "", "Range", 11, kLatestOpset, {.host_inputs = {0, 1, 2}}, [](const KernelInfo&) {
      return make_kernel([](KernelContext& ctx) {
        const DType dtype = ctx.input(0).dtype();
        for (size_t i = 0; i < 3; ++i) {
          const Tensor& t = ctx.input(i);
          if (t.numel() != 1)
            ctx.fail("input " + std::to_string(i) + " has shape " + shape_string(t.shape()) + ", expected a scalar");
          if (t.dtype() != dtype) {
            ctx.fail("input " + std::to_string(i) + " is " + std::string(dtype_name(t.dtype())) + ", expected " +
                     std::string(dtype_name(dtype)) + " like input 0");
          }
        }
        dispatch<float, double, int16_t, int32_t, int64_t>(dtype, "Range", [&]<typename T>() {
          const T start = ctx.input(0).data<T>()[0];
          const T limit = ctx.input(1).data<T>()[0];
          const T delta = ctx.input(2).data<T>()[0];
          if (delta == T(0)) ctx.fail("delta must not be 0");
          const double count =
              std::ceil((static_cast<double>(limit) - static_cast<double>(start)) / static_cast<double>(delta));
          const auto n = static_cast<int64_t>(std::max(count, 0.0));
          T* out = ctx.allocate_output(0, dtype, {n}).template data<T>();
          for (int64_t i = 0; i < n; ++i) out[i] = static_cast<T>(start + static_cast<T>(i) * delta);
        });
      });
    }};

const KernelRegistration kConstantOfShape{
    "", "ConstantOfShape", 9, kLatestOpset, {.host_inputs = {0}}, [](const KernelInfo& info) {
      Tensor value = Tensor::scalar<float>(0.0f);
      if (const Tensor* t = info.tensor_attribute("value")) {
        if (t->numel() != 1) info.fail("value has shape " + shape_string(t->shape()) + ", expected one element");
        value = *t;
      }
      return make_kernel([value](KernelContext& ctx) {
        const Shape shape = required_ints(ctx, 0, "input");
        for (int64_t d : shape) {
          if (d < 0) ctx.fail("shape " + shape_string(shape) + " has a negative dimension");
        }
        Tensor& out = ctx.allocate_output(0, value.dtype(), shape);
        dispatch_by_size(dtype_size(value.dtype()), [&]<typename U>() {
          U bits;
          std::memcpy(&bits, value.raw_data(), sizeof(U));
          U* o = static_cast<U*>(out.raw_data());
          parallel_for(out.numel(), 65536, [&](int64_t begin, int64_t end) { std::fill(o + begin, o + end, bits); });
        });
      });
    }};

// The constants_to_initializers pass folds most Constant nodes; this kernel runs the rest.
const KernelRegistration kConstant{
    "", "Constant", 1, kLatestOpset, [](const KernelInfo& info) {
      const ir::Node& node = info.node();
      if (node.attributes.size() != 1) {
        info.fail("expected exactly one value attribute, got " + std::to_string(node.attributes.size()));
      }
      const ir::Attribute& a = node.attributes[0];
      Tensor value;
      if (a.name == "value") {
        value = a.t;
      } else if (a.name == "value_float") {
        value = Tensor::scalar<float>(a.f);
      } else if (a.name == "value_floats") {
        value = Tensor::from_vector<float>({static_cast<int64_t>(a.floats.size())}, a.floats);
      } else if (a.name == "value_int") {
        value = Tensor::scalar<int64_t>(a.i);
      } else if (a.name == "value_ints") {
        value = Tensor::from_vector<int64_t>({static_cast<int64_t>(a.ints.size())}, a.ints);
      } else if (a.name == "value_string" || a.name == "value_strings") {
        info.fail("attribute '" + a.name + "': string tensors are not supported");
      } else if (a.name == "sparse_value") {
        info.fail("attribute 'sparse_value': sparse tensors are not supported");
      } else {
        info.fail("unknown attribute '" + a.name + "' (expected value, value_float(s), value_int(s))");
      }
      if (!value.defined()) info.fail("attribute '" + a.name + "' holds no tensor");
      return make_kernel([value](KernelContext& ctx) { ctx.set_output(0, value); });
    }};

}  // namespace
}  // namespace onnxtrain
