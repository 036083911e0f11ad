#include "ops/cpu/data_movement.h"

#include <cstring>

#include "core/dispatch.h"
#include "core/parallel.h"
#include "ops/cpu/layout.h"

namespace onnxtrain::data_movement {
namespace {

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

}  // namespace

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

Shape concatenated_shape(const KernelContext& ctx, std::span<const Tensor* const> parts, size_t axis,
                         std::string_view noun) {
  const Tensor& first = *parts.front();
  Shape out_shape = first.shape();
  out_shape[axis] = 0;
  for (size_t k = 0; k < parts.size(); ++k) {
    const Tensor& t = *parts[k];
    const std::string name = std::string(noun) + " " + std::to_string(k);
    if (t.dtype() != first.dtype()) {
      ctx.fail(name + " is " + std::string(dtype_name(t.dtype())) + ", expected " +
               std::string(dtype_name(first.dtype())) + " like " + std::string(noun) + " 0");
    }
    bool matches = t.rank() == first.rank();
    for (size_t d = 0; matches && d < t.rank(); ++d) matches = d == axis || t.shape()[d] == first.shape()[d];
    if (!matches) {
      ctx.fail(name + " has shape " + shape_string(t.shape()) + ", incompatible with " + std::string(noun) + " 0 " +
               shape_string(first.shape()) + " for concatenation on axis " + std::to_string(axis));
    }
    out_shape[axis] += t.shape()[axis];
  }
  return out_shape;
}

void concatenate(std::span<const Tensor* const> parts, size_t axis, Tensor& out) {
  const Shape& out_shape = out.shape();
  const size_t esize = dtype_size(out.dtype());
  const int64_t outer = shape_size(std::span(out_shape).first(axis));
  const int64_t inner = shape_size(std::span(out_shape).subspan(axis + 1));
  const size_t n = parts.size();
  if (n == 0) return;
  std::vector<size_t> chunk(n), start(n);  // bytes per outer index, and offset in the output row
  size_t row = 0;
  for (size_t k = 0; k < n; ++k) {
    chunk[k] = static_cast<size_t>(parts[k]->shape()[axis] * inner) * esize;
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
      const auto* src = static_cast<const std::byte*>(parts[k]->raw_data());
      std::memcpy(dst + o * row + start[k], src + o * chunk[k], chunk[k]);
    }
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

}  // namespace onnxtrain::data_movement
