#include "ops/cpu/broadcast.h"

#include <algorithm>
#include <vector>

#include "core/dispatch.h"
#include "core/parallel.h"
#include "ops/cpu/multiversion.h"
#include "ops/kernel_registry.h"

namespace onnxtrain {

Shape broadcast_shapes(std::span<const Shape* const> shapes) {
  size_t rank = 0;
  for (const Shape* s : shapes) rank = std::max(rank, s->size());
  Shape out(rank, 1);
  for (const Shape* s : shapes) {
    const size_t pad = rank - s->size();
    for (size_t i = 0; i < s->size(); ++i) {
      int64_t& o = out[pad + i];
      const int64_t d = (*s)[i];
      if (d == o || d == 1) continue;
      if (o != 1) {
        std::string list;
        for (const Shape* t : shapes) list += (list.empty() ? "" : " and ") + shape_string(*t);
        throw Error("shapes " + list + " do not broadcast (axis " + std::to_string(pad + i) + ": " + std::to_string(o) +
                        " vs " + std::to_string(d) + ")",
                    ErrorKind::kInvalidArgument);
      }
      o = d;
    }
  }
  return out;
}

Shape broadcast_shapes(std::span<const Shape> shapes) {
  std::vector<const Shape*> pointers;
  pointers.reserve(shapes.size());
  for (const Shape& s : shapes) pointers.push_back(&s);
  return broadcast_shapes(std::span<const Shape* const>(pointers));
}

Shape broadcast_shapes(const Shape& a, const Shape& b) {
  if (a == b) return a;
  const std::array<const Shape*, 2> pair{&a, &b};
  return broadcast_shapes(std::span<const Shape* const>(pair));
}

std::vector<int64_t> broadcast_strides(const Shape& shape, const Shape& out) {
  std::vector<int64_t> strides(out.size(), 0);
  const size_t pad = out.size() - shape.size();
  int64_t stride = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    strides[pad + i] = shape[i] == 1 ? 0 : stride;
    stride *= shape[i];
  }
  return strides;
}

namespace {

// ---- ReduceToShape: sum over the axes along which the target was broadcast ----

// Merges adjacent axes of the same kind (summed or kept) of a shape aligned with the
// target; returns (sizes, summed flags).
void merge_axes(const Shape& shape, const std::vector<bool>& summed, Shape& sizes, std::vector<bool>& kinds) {
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == 1) continue;  // size-1 axes change nothing
    if (!sizes.empty() && kinds.back() == summed[i]) {
      sizes.back() *= shape[i];
    } else {
      sizes.push_back(shape[i]);
      kinds.push_back(summed[i]);
    }
  }
}

// y[j] = sum over r of x[r * cols + j]: the gradient of a bias broadcast over leading axes.
// Rows are added in order, as in the general loop below, but into a block of column sums at
// a time, so that the inner loop runs over contiguous memory.
constexpr int64_t kSumRowsBlock = 256;

// Columns [begin, end) of sum_rows.
template <typename T>
ONNXTRAIN_MULTIVERSIONED [[gnu::flatten]] void sum_rows_range(const T* x, T* y, int64_t rows, int64_t cols,
                                                              int64_t begin, int64_t end) {
  using C = compute_type_t<T>;
  for (int64_t first = begin; first < end; first += kSumRowsBlock) {
    const int64_t n = std::min(kSumRowsBlock, end - first);
    C sums[kSumRowsBlock] = {};
    for (int64_t r = 0; r < rows; ++r) {
      const T* row = x + r * cols + first;
      for (int64_t j = 0; j < n; ++j) sums[j] += C(row[j]);
    }
    for (int64_t j = 0; j < n; ++j) y[first + j] = static_cast<T>(sums[j]);
  }
}

template <typename T>
void sum_rows(const T* x, T* y, int64_t rows, int64_t cols) {
  parallel_for(cols, kSumRowsBlock, [&](int64_t begin, int64_t end) { sum_rows_range(x, y, rows, cols, begin, end); });
}

template <typename T>
void reduce_to_shape(const Tensor& in, Tensor& out, const Shape& aligned) {
  using C = compute_type_t<T>;
  std::vector<bool> summed(aligned.size());
  for (size_t i = 0; i < aligned.size(); ++i) summed[i] = aligned[i] == 1 && in.shape()[i] != 1;
  Shape sizes;
  std::vector<bool> kinds;
  merge_axes(in.shape(), summed, sizes, kinds);
  const T* x = in.data<T>();
  T* y = out.data<T>();
  const int64_t total = in.numel();
  const int64_t outputs = out.numel();
  // Strides of the merged input axes and, for kept axes, of the output.
  const size_t rank = sizes.size();
  std::vector<int64_t> in_stride(rank), out_stride(rank, 0);
  int64_t s = 1, o = 1;
  for (size_t i = rank; i-- > 0;) {
    in_stride[i] = s;
    s *= sizes[i];
    if (!kinds[i]) {
      out_stride[i] = o;
      o *= sizes[i];
    }
  }
  if (rank == 0 || outputs == total) {
    for (int64_t i = 0; i < total; ++i) y[i] = x[i];
    return;
  }
  if (rank == 2 && kinds[0] && !kinds[1]) {
    sum_rows(x, y, sizes[0], sizes[1]);
    return;
  }
  // Each output element sums its preimage: kept axes fixed, summed axes walked.
  std::vector<size_t> kept, reduced;
  for (size_t i = 0; i < rank; ++i) (kinds[i] ? reduced : kept).push_back(i);
  int64_t reduced_count = 1;
  for (size_t i : reduced) reduced_count *= sizes[i];
  const bool inner_reduced = kinds[rank - 1];
  parallel_for(outputs, std::max<int64_t>(1, 16384 / reduced_count), [&](int64_t begin, int64_t end) {
    for (int64_t out_index = begin; out_index < end; ++out_index) {
      int64_t base = 0;
      int64_t rest = out_index;
      for (size_t k = kept.size(); k-- > 0;) {
        const size_t axis = kept[k];
        base += (rest % sizes[axis]) * in_stride[axis];
        rest /= sizes[axis];
      }
      C sum = 0;
      if (inner_reduced && reduced.size() == 1) {
        const T* p = x + base;
        for (int64_t j = 0; j < sizes[rank - 1]; ++j) sum += C(p[j]);
      } else {
        for (int64_t r = 0; r < reduced_count; ++r) {
          int64_t offset = base;
          int64_t q = r;
          for (size_t k = reduced.size(); k-- > 0;) {
            const size_t axis = reduced[k];
            offset += (q % sizes[axis]) * in_stride[axis];
            q /= sizes[axis];
          }
          sum += C(x[offset]);
        }
      }
      y[out_index] = static_cast<T>(sum);
    }
  });
}

const KernelRegistration kReduceToShape{
    "org.onnxtrain", "ReduceToShape", 1, kLatestOpset, [](const KernelInfo&) {
      return make_kernel([](KernelContext& ctx) {
        const Tensor& grad = ctx.input(0);
        const Shape target = ctx.input(1).to_int64_vector();
        if (target.size() > grad.rank()) ctx.fail("the target shape has more axes than the gradient");
        Shape aligned(grad.rank() - target.size(), 1);
        aligned.insert(aligned.end(), target.begin(), target.end());
        for (size_t i = 0; i < aligned.size(); ++i) {
          if (aligned[i] != 1 && aligned[i] != grad.shape()[i]) {
            ctx.fail("cannot reduce " + shape_string(grad.shape()) + " to " + shape_string(target));
          }
        }
        if (aligned == grad.shape()) {
          ctx.set_output(0, grad.reshaped(target));  // nothing was broadcast
          return;
        }
        Tensor& out = ctx.allocate_output(0, grad.dtype(), target);
        const size_t lead = grad.rank() - target.size();
        if (std::equal(target.begin(), target.end(), grad.shape().begin() + static_cast<int64_t>(lead))) {
          // A bias broadcast over leading axes (Gemm, MatMul + Add): the sums of the rows.
          const int64_t cols = out.numel(), rows = cols ? grad.numel() / cols : 0;
          dispatch<ONNXTRAIN_FLOAT_TYPES>(grad.dtype(), "ReduceToShape",
                                          [&]<typename T>() { sum_rows(grad.data<T>(), out.data<T>(), rows, cols); });
          return;
        }
        dispatch<ONNXTRAIN_FLOAT_TYPES>(grad.dtype(), "ReduceToShape",
                                        [&]<typename T>() { reduce_to_shape<T>(grad, out, aligned); });
      });
    }};

}  // namespace
}  // namespace onnxtrain
