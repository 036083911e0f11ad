// Indexing kernels: Gather, GatherElements, GatherND, ScatterND, ScatterElements (and the
// older Scatter), OneHot, NonZero, Compress, and onnxruntime-training's GatherElementsGrad.
//
// Gathers move whole slices, so they work on element sizes rather than types. Indices may
// be int32 or int64, count from the end when negative, and an index out of range is an
// Error that names the index, the axis and its size — never a read out of bounds.
#include <algorithm>
#include <cstring>
#include <numeric>

#include "core/dispatch.h"
#include "core/parallel.h"
#include "ops/cpu/axis.h"
#include "ops/cpu/layout.h"
#include "ops/kernel_registry.h"

namespace onnxtrain {
namespace {

// ---------------------------------------------------------------------------------------
// Helpers

// Calls f.template operator()<I>() with the index type of `indices` (int32 or int64).
template <typename F>
void dispatch_index(const KernelContext& ctx, const Tensor& indices, F&& f) {
  if (indices.dtype() == DType::kInt64) return f.template operator()<int64_t>();
  if (indices.dtype() == DType::kInt32) return f.template operator()<int32_t>();
  ctx.fail("indices must be int32 or int64, got " + std::string(dtype_name(indices.dtype())));
}

[[noreturn]] void fail_index(const KernelContext& ctx, int64_t index, int64_t axis, int64_t size) {
  ctx.fail("index " + std::to_string(index) + " is out of range for axis " + std::to_string(axis) + " of size " +
           std::to_string(size) + " (expected " + std::to_string(-size) + ".." + std::to_string(size - 1) + ")");
}

// Checks every index against [-size, size) before any kernel reads with them.
template <typename I>
void check_indices(const KernelContext& ctx, const I* indices, int64_t count, int64_t axis, int64_t size) {
  for (int64_t i = 0; i < count; ++i) {
    const auto v = static_cast<int64_t>(indices[i]);
    if (v < -size || v >= size) fail_index(ctx, v, axis, size);
  }
}

inline int64_t wrap(int64_t index, int64_t size) {
  return index < 0 ? index + size : index;
}

void check_same_dtype(const KernelContext& ctx, size_t a, size_t b, std::string_view what_b) {
  if (ctx.input(a).dtype() != ctx.input(b).dtype()) {
    ctx.fail(std::string(what_b) + " is " + std::string(dtype_name(ctx.input(b).dtype())) + ", expected " +
             std::string(dtype_name(ctx.input(a).dtype())) + " like the data");
  }
}

// ---------------------------------------------------------------------------------------
// Gather: out[outer, j, inner] = data[outer, indices[j], inner].

const KernelRegistration kGather{
    "", "Gather", 1, kLatestOpset, [](const KernelInfo& info) {
      const int64_t axis_attribute = info.int_attribute("axis", 0);
      return make_kernel([axis_attribute](KernelContext& ctx) {
        const Tensor& data = ctx.input(0);
        const Tensor& indices = ctx.input(1);
        if (data.rank() == 0) ctx.fail("data is a scalar, expected rank >= 1");
        const auto axis = static_cast<size_t>(normalize_axis(ctx, axis_attribute, static_cast<int64_t>(data.rank())));
        const Shape& ds = data.shape();
        Shape out_shape(ds.begin(), ds.begin() + static_cast<std::ptrdiff_t>(axis));
        out_shape.insert(out_shape.end(), indices.shape().begin(), indices.shape().end());
        out_shape.insert(out_shape.end(), ds.begin() + static_cast<std::ptrdiff_t>(axis) + 1, ds.end());
        const int64_t size = ds[axis];
        const int64_t outer = shape_size(std::span(ds).first(axis));
        const int64_t inner = shape_size(std::span(ds).subspan(axis + 1));
        const int64_t count = indices.numel();
        dispatch_index(ctx, indices, [&]<typename I>() {
          const I* idx = indices.data<I>();
          check_indices(ctx, idx, count, static_cast<int64_t>(axis), size);
          Tensor& out = ctx.allocate_output(0, data.dtype(), out_shape);
          dispatch_by_size(dtype_size(data.dtype()), [&]<typename U>() {
            const U* src = static_cast<const U*>(data.raw_data());
            U* dst = static_cast<U*>(out.raw_data());
            parallel_for(outer * count, std::max<int64_t>(1, 8192 / std::max<int64_t>(inner, 1)),
                         [&](int64_t begin, int64_t end) {
                           for (int64_t w = begin; w < end; ++w) {
                             const int64_t o = w / count;
                             const int64_t j = wrap(static_cast<int64_t>(idx[w % count]), size);
                             const U* s = src + (o * size + j) * inner;
                             if (inner == 1)
                               dst[w] = *s;
                             else
                               std::memcpy(dst + w * inner, s, static_cast<size_t>(inner) * sizeof(U));
                           }
                         });
          });
        });
      });
    }};

// ---------------------------------------------------------------------------------------
// GatherElements: out[i] = data[i with i[axis] replaced by indices[i]].

// Checks that indices has data's rank and fits inside data on every axis but `axis`.
void check_element_indices(const KernelContext& ctx, const Shape& data, const Shape& indices, size_t axis,
                           std::string_view indices_name) {
  if (indices.size() != data.size()) {
    ctx.fail(std::string(indices_name) + " has shape " + shape_string(indices) + ", expected the rank " +
             std::to_string(data.size()) + " of data " + shape_string(data));
  }
  for (size_t d = 0; d < data.size(); ++d) {
    if (d != axis && indices[d] > data[d]) {
      ctx.fail(std::string(indices_name) + " shape " + shape_string(indices) + " exceeds data shape " +
               shape_string(data) + " on axis " + std::to_string(d));
    }
  }
}

// Walks the elements of `shape` in order, calling f(linear index, data offset without the
// axis term, position along axis) row by row.
template <typename F>
void for_each_element(const Shape& shape, const std::vector<int64_t>& data_strides, size_t axis, F&& f) {
  const int64_t total = shape_size(shape);
  if (total == 0) return;
  const size_t rank = shape.size();
  const int64_t inner = shape[rank - 1];
  parallel_for(total / inner, std::max<int64_t>(1, 8192 / inner), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      int64_t rest = r, base = 0;
      for (size_t d = rank - 1; d-- > 0;) {
        const int64_t i = rest % shape[d];
        rest /= shape[d];
        if (d != axis) base += i * data_strides[d];
      }
      const int64_t step = axis == rank - 1 ? 0 : data_strides[rank - 1];
      for (int64_t i = 0; i < inner; ++i) f(r * inner + i, base + i * step);
    }
  });
}

const KernelRegistration kGatherElements{
    "", "GatherElements", 11, kLatestOpset, [](const KernelInfo& info) {
      const int64_t axis_attribute = info.int_attribute("axis", 0);
      return make_kernel([axis_attribute](KernelContext& ctx) {
        const Tensor& data = ctx.input(0);
        const Tensor& indices = ctx.input(1);
        if (data.rank() == 0) ctx.fail("data is a scalar, expected rank >= 1");
        const auto axis = static_cast<size_t>(normalize_axis(ctx, axis_attribute, static_cast<int64_t>(data.rank())));
        check_element_indices(ctx, data.shape(), indices.shape(), axis, "indices");
        const int64_t size = data.shape()[axis];
        const std::vector<int64_t> strides = contiguous_strides(data.shape());
        dispatch_index(ctx, indices, [&]<typename I>() {
          const I* idx = indices.data<I>();
          check_indices(ctx, idx, indices.numel(), static_cast<int64_t>(axis), size);
          Tensor& out = ctx.allocate_output(0, data.dtype(), indices.shape());
          dispatch_by_size(dtype_size(data.dtype()), [&]<typename U>() {
            const U* src = static_cast<const U*>(data.raw_data());
            U* dst = static_cast<U*>(out.raw_data());
            for_each_element(indices.shape(), strides, axis, [&](int64_t i, int64_t base) {
              dst[i] = src[base + wrap(static_cast<int64_t>(idx[i]), size) * strides[axis]];
            });
          });
        });
      });
    }};

// com.microsoft::GatherElementsGrad <axis = 0> (dY, shape, indices) => (dX): zeros of `shape`
// (GatherElements' data) into which each dY element is added where GatherElements read it.
// One thread, in order: an index may repeat, and then its gradients add up.
const KernelRegistration kMicrosoftGatherElementsGrad{
    "com.microsoft", "GatherElementsGrad", 1, kLatestOpset, [](const KernelInfo& info) {
      const int64_t axis_attribute = info.int_attribute("axis", 0);
      return make_kernel([axis_attribute](KernelContext& ctx) {
        const Tensor& dy = ctx.input(0);
        const Tensor& shape_tensor = ctx.input(1);
        const Tensor& indices = ctx.input(2);
        if (shape_tensor.dtype() != DType::kInt64 || shape_tensor.rank() != 1) {
          ctx.fail("shape must be a 1-D int64 tensor, got " + std::string(dtype_name(shape_tensor.dtype())) +
                   shape_string(shape_tensor.shape()));
        }
        const Shape shape(shape_tensor.data<int64_t>(), shape_tensor.data<int64_t>() + shape_tensor.numel());
        for (int64_t d : shape) {
          if (d < 0) ctx.fail("shape " + shape_string(shape) + " has a negative dimension");
        }
        if (shape.empty()) ctx.fail("shape is empty: GatherElements' data has rank >= 1");
        if (dy.shape() != indices.shape()) {
          ctx.fail("dY " + shape_string(dy.shape()) + " and indices " + shape_string(indices.shape()) +
                   " must have one shape");
        }
        const auto axis = static_cast<size_t>(normalize_axis(ctx, axis_attribute, static_cast<int64_t>(shape.size())));
        check_element_indices(ctx, shape, indices.shape(), axis, "indices");
        const int64_t size = shape[axis];
        const std::vector<int64_t> strides = contiguous_strides(shape);
        Tensor& dx = ctx.allocate_output(0, dy.dtype(), shape);
        std::memset(dx.raw_data(), 0, dx.nbytes());
        if (indices.numel() == 0) return;
        dispatch_index(ctx, indices, [&]<typename I>() {
          const I* idx = indices.data<I>();
          check_indices(ctx, idx, indices.numel(), static_cast<int64_t>(axis), size);
          dispatch<ONNXTRAIN_FLOAT_TYPES>(dy.dtype(), "GatherElementsGrad", [&]<typename T>() {
            using C = compute_type_t<T>;
            const T* g = dy.data<T>();
            T* out = dx.data<T>();
            const Shape& walk = indices.shape();
            const size_t rank = walk.size();
            std::vector<int64_t> at(rank, 0);
            for (int64_t i = 0; i < indices.numel(); ++i) {
              int64_t offset = 0;
              for (size_t d = 0; d < rank; ++d) {
                offset += (d == axis ? wrap(static_cast<int64_t>(idx[i]), size) : at[d]) * strides[d];
              }
              out[offset] = static_cast<T>(C(out[offset]) + C(g[i]));
              for (size_t d = rank; d-- > 0;) {  // the next position of indices, row major
                if (++at[d] < walk[d]) break;
                at[d] = 0;
              }
            }
          });
        });
      });
    }};

// ---------------------------------------------------------------------------------------
// GatherND / ScatterND: the last axis of `indices` addresses a slice of `data`.

struct NDIndexing {
  int64_t batches = 1;       // product of the batch dims
  int64_t per_batch = 1;     // index tuples per batch
  int64_t depth = 0;         // entries per index tuple (indices.shape[-1])
  int64_t slice = 1;         // elements per addressed slice
  int64_t batch_stride = 0;  // data elements per batch
};

NDIndexing nd_indexing(const KernelContext& ctx, const Shape& data, const Shape& indices, int64_t batch_dims) {
  const auto r = static_cast<int64_t>(data.size());
  const auto q = static_cast<int64_t>(indices.size());
  if (q < 1) ctx.fail("indices is a scalar, expected rank >= 1");
  if (batch_dims < 0 || batch_dims >= std::min(r, q)) {
    ctx.fail("batch_dims " + std::to_string(batch_dims) + " must be less than the ranks of data " + shape_string(data) +
             " and indices " + shape_string(indices));
  }
  NDIndexing nd;
  nd.depth = indices.back();
  if (nd.depth < 1 || nd.depth > r - batch_dims) {
    ctx.fail("indices " + shape_string(indices) + " address " + std::to_string(nd.depth) + " axes, expected 1.." +
             std::to_string(r - batch_dims) + " for data " + shape_string(data) + " with batch_dims " +
             std::to_string(batch_dims));
  }
  for (int64_t d = 0; d < batch_dims; ++d) {
    if (data[static_cast<size_t>(d)] != indices[static_cast<size_t>(d)]) {
      ctx.fail("batch dimension " + std::to_string(d) + " differs between data " + shape_string(data) +
               " and indices " + shape_string(indices));
    }
    nd.batches *= data[static_cast<size_t>(d)];
  }
  nd.per_batch = shape_size(
      std::span(indices).subspan(static_cast<size_t>(batch_dims)).first(static_cast<size_t>(q - 1 - batch_dims)));
  nd.slice = shape_size(std::span(data).subspan(static_cast<size_t>(batch_dims + nd.depth)));
  nd.batch_stride = shape_size(std::span(data).subspan(static_cast<size_t>(batch_dims)));
  return nd;
}

// The data offset (in elements) of every index tuple; checks each entry.
template <typename I>
std::vector<int64_t> nd_offsets(const KernelContext& ctx, const Shape& data, const I* indices, const NDIndexing& nd,
                                int64_t batch_dims) {
  const std::vector<int64_t> strides = contiguous_strides(data);
  std::vector<int64_t> offsets(static_cast<size_t>(nd.batches * nd.per_batch));
  for (size_t t = 0; t < offsets.size(); ++t) {
    int64_t offset = static_cast<int64_t>(t) / nd.per_batch * nd.batch_stride;
    for (int64_t k = 0; k < nd.depth; ++k) {
      const auto axis = static_cast<size_t>(batch_dims + k);
      const auto v = static_cast<int64_t>(indices[static_cast<int64_t>(t) * nd.depth + k]);
      if (v < -data[axis] || v >= data[axis]) fail_index(ctx, v, static_cast<int64_t>(axis), data[axis]);
      offset += wrap(v, data[axis]) * strides[axis];
    }
    offsets[t] = offset;
  }
  return offsets;
}

const KernelRegistration kGatherND{
    "", "GatherND", 11, kLatestOpset, [](const KernelInfo& info) {
      const int64_t batch_dims = info.opset() >= 12 ? info.int_attribute("batch_dims", 0) : 0;
      return make_kernel([batch_dims](KernelContext& ctx) {
        const Tensor& data = ctx.input(0);
        const Tensor& indices = ctx.input(1);
        if (indices.dtype() != DType::kInt64)
          ctx.fail("indices must be int64, got " + std::string(dtype_name(indices.dtype())));
        const NDIndexing nd = nd_indexing(ctx, data.shape(), indices.shape(), batch_dims);
        const std::vector<int64_t> offsets = nd_offsets(ctx, data.shape(), indices.data<int64_t>(), nd, batch_dims);
        Shape out_shape(indices.shape().begin(), indices.shape().end() - 1);
        out_shape.insert(out_shape.end(), data.shape().begin() + batch_dims + nd.depth, data.shape().end());
        Tensor& out = ctx.allocate_output(0, data.dtype(), out_shape);
        const size_t bytes = static_cast<size_t>(nd.slice) * dtype_size(data.dtype());
        const auto* src = static_cast<const std::byte*>(data.raw_data());
        auto* dst = static_cast<std::byte*>(out.raw_data());
        const auto esize = static_cast<int64_t>(dtype_size(data.dtype()));
        parallel_for(static_cast<int64_t>(offsets.size()),
                     std::max<int64_t>(1, 32768 / std::max<int64_t>(1, static_cast<int64_t>(bytes))),
                     [&](int64_t begin, int64_t end) {
                       for (int64_t t = begin; t < end; ++t) {
                         std::memcpy(dst + static_cast<size_t>(t) * bytes,
                                     src + offsets[static_cast<size_t>(t)] * esize, bytes);
                       }
                     });
      });
    }};

// ---------------------------------------------------------------------------------------
// Scatter reductions

enum class Reduction { kNone, kAdd, kMul, kMax, kMin };

Reduction reduction_of(const KernelInfo& info, int64_t add_since, int64_t max_since) {
  const std::string name = info.opset() >= add_since ? info.string_attribute("reduction", "none") : "none";
  if (name == "none") return Reduction::kNone;
  if (name == "add") return Reduction::kAdd;
  if (name == "mul") return Reduction::kMul;
  if (info.opset() >= max_since && name == "max") return Reduction::kMax;
  if (info.opset() >= max_since && name == "min") return Reduction::kMin;
  info.fail("unknown reduction '" + name + "' (expected none, add, mul" +
            (info.opset() >= max_since ? ", max, min" : "") + ")");
}

template <typename T>
inline void reduce_into(T& target, T update, Reduction reduction) {
  using C = compute_type_t<T>;
  switch (reduction) {
    case Reduction::kNone:
      target = update;
      break;
    case Reduction::kAdd:
      target = static_cast<T>(C(target) + C(update));
      break;
    case Reduction::kMul:
      target = static_cast<T>(C(target) * C(update));
      break;
    case Reduction::kMax:
      target = static_cast<T>(std::max(C(target), C(update)));
      break;
    case Reduction::kMin:
      target = static_cast<T>(std::min(C(target), C(update)));
      break;
  }
}

// Output 0 starts as a copy of input 0 (in place when the runtime allows).
Tensor& copy_data_to_output(KernelContext& ctx) {
  const Tensor& data = ctx.input(0);
  Tensor& out = ctx.allocate_output_in_place(0, 0, data.dtype(), data.shape());
  out.copy_from(data);
  return out;
}

// Runs f with the element type of `dtype`: any type when only copying, the numeric types
// (and bool for none) when reducing.
template <typename F>
void dispatch_scatter(DType dtype, Reduction reduction, std::string_view what, F&& f) {
  if (reduction == Reduction::kNone) return dispatch<ONNXTRAIN_ALL_TYPES>(dtype, what, f);
  dispatch<ONNXTRAIN_NUMERIC_TYPES>(dtype, what, f);
}

const KernelRegistration kScatterND{
    "", "ScatterND", 11, kLatestOpset, [](const KernelInfo& info) {
      const Reduction reduction = reduction_of(info, 16, 18);
      return make_kernel([reduction](KernelContext& ctx) {
        const Tensor& data = ctx.input(0);
        const Tensor& indices = ctx.input(1);
        const Tensor& updates = ctx.input(2);
        check_same_dtype(ctx, 0, 2, "updates");
        if (indices.dtype() != DType::kInt64)
          ctx.fail("indices must be int64, got " + std::string(dtype_name(indices.dtype())));
        const NDIndexing nd = nd_indexing(ctx, data.shape(), indices.shape(), 0);
        Shape expected(indices.shape().begin(), indices.shape().end() - 1);
        expected.insert(expected.end(), data.shape().begin() + nd.depth, data.shape().end());
        if (updates.shape() != expected) {
          ctx.fail("updates has shape " + shape_string(updates.shape()) + ", expected " + shape_string(expected) +
                   " (indices.shape[:-1] + data.shape[indices.shape[-1]:])");
        }
        const std::vector<int64_t> offsets = nd_offsets(ctx, data.shape(), indices.data<int64_t>(), nd, 0);
        Tensor& out = copy_data_to_output(ctx);
        dispatch_scatter(data.dtype(), reduction, "ScatterND", [&]<typename T>() {
          T* dst = out.data<T>();
          const T* src = updates.data<T>();
          // Serial: with reductions, duplicate indices accumulate in order.
          for (size_t t = 0; t < offsets.size(); ++t) {
            T* target = dst + offsets[t];
            const T* update = src + static_cast<int64_t>(t) * nd.slice;
            if (reduction == Reduction::kNone) {
              std::memcpy(target, update, static_cast<size_t>(nd.slice) * sizeof(T));
            } else {
              for (int64_t i = 0; i < nd.slice; ++i) reduce_into(target[i], update[i], reduction);
            }
          }
        });
      });
    }};

KernelFactory scatter_elements(int64_t add_since, int64_t max_since) {
  return [=](const KernelInfo& info) {
    const int64_t axis_attribute = info.int_attribute("axis", 0);
    const Reduction reduction = reduction_of(info, add_since, max_since);
    return make_kernel([axis_attribute, reduction](KernelContext& ctx) {
      const Tensor& data = ctx.input(0);
      const Tensor& indices = ctx.input(1);
      const Tensor& updates = ctx.input(2);
      check_same_dtype(ctx, 0, 2, "updates");
      if (data.rank() == 0) ctx.fail("data is a scalar, expected rank >= 1");
      const auto axis = static_cast<size_t>(normalize_axis(ctx, axis_attribute, static_cast<int64_t>(data.rank())));
      if (updates.shape() != indices.shape()) {
        ctx.fail("updates has shape " + shape_string(updates.shape()) + ", expected the indices shape " +
                 shape_string(indices.shape()));
      }
      check_element_indices(ctx, data.shape(), indices.shape(), axis, "indices");
      const int64_t size = data.shape()[axis];
      const std::vector<int64_t> strides = contiguous_strides(data.shape());
      dispatch_index(ctx, indices, [&]<typename I>() {
        const I* idx = indices.data<I>();
        check_indices(ctx, idx, indices.numel(), static_cast<int64_t>(axis), size);
        Tensor& out = copy_data_to_output(ctx);
        dispatch_scatter(data.dtype(), reduction, ctx.node().op_type, [&]<typename T>() {
          T* dst = out.data<T>();
          const T* src = updates.data<T>();
          // Serial: duplicate indices must apply in order.
          const Shape& shape = indices.shape();
          const size_t rank = shape.size();
          std::vector<int64_t> index(rank, 0);
          int64_t base = 0;  // data offset of `index` without the axis term
          for (int64_t i = 0; i < indices.numel(); ++i) {
            reduce_into(dst[base + wrap(static_cast<int64_t>(idx[i]), size) * strides[axis]], src[i], reduction);
            for (size_t d = rank; d-- > 0;) {  // next index, row-major
              if (d != axis) base += strides[d];
              if (++index[d] < shape[d]) break;
              if (d != axis) base -= index[d] * strides[d];
              index[d] = 0;
            }
          }
        });
      });
    });
  };
}

// Scatter (9, 10) is ScatterElements before it was renamed; reduction arrived in 16, max/min in 18.
const KernelRegistration kScatter{"", "Scatter", 9, 10, scatter_elements(kLatestOpset, kLatestOpset)};
const KernelRegistration kScatterElements{"", "ScatterElements", 11, kLatestOpset, scatter_elements(16, 18)};

// ---------------------------------------------------------------------------------------
// OneHot, NonZero, Compress

// A scalar or one-element input of any numeric type, as double.
double scalar_value(const KernelContext& ctx, size_t i, std::string_view what) {
  const Tensor& t = ctx.input(i);
  if (t.numel() != 1) ctx.fail(std::string(what) + " has shape " + shape_string(t.shape()) + ", expected one element");
  double value = 0;
  dispatch<ONNXTRAIN_NUMERIC_TYPES>(t.dtype(), what, [&]<typename T>() {
    value = static_cast<double>(static_cast<compute_type_t<T>>(t.data<T>()[0]));
  });
  return value;
}

const KernelRegistration kOneHot{
    "", "OneHot", 9, kLatestOpset, [](const KernelInfo& info) {
      const int64_t axis_attribute = info.int_attribute("axis", -1);
      return make_kernel([axis_attribute](KernelContext& ctx) {
        const Tensor& indices = ctx.input(0);
        const Tensor& values = ctx.input(2);
        const auto depth = static_cast<int64_t>(scalar_value(ctx, 1, "depth"));
        if (depth < 1) ctx.fail("depth is " + std::to_string(depth) + ", expected at least 1");
        if (values.numel() != 2) ctx.fail("values has shape " + shape_string(values.shape()) + ", expected [off, on]");
        const auto rank = static_cast<int64_t>(indices.rank()) + 1;
        const auto axis = static_cast<size_t>(normalize_axis(ctx, axis_attribute, rank));
        Shape out_shape = indices.shape();
        out_shape.insert(out_shape.begin() + static_cast<std::ptrdiff_t>(axis), depth);
        const int64_t inner = shape_size(std::span(indices.shape()).subspan(axis));
        const int64_t outer = shape_size(std::span(indices.shape()).first(axis));
        std::vector<int64_t> positions(static_cast<size_t>(indices.numel()));  // -1: no 'on' value
        dispatch<ONNXTRAIN_NUMERIC_TYPES>(indices.dtype(), "OneHot indices", [&]<typename I>() {
          const I* idx = indices.data<I>();
          for (size_t i = 0; i < positions.size(); ++i) {
            int64_t v = static_cast<int64_t>(static_cast<compute_type_t<I>>(idx[i]));
            if (v < 0) v += depth;  // negative indices count from the end; others out of range stay 'off'
            positions[i] = v >= 0 && v < depth ? v : -1;
          }
        });
        Tensor& out = ctx.allocate_output(0, values.dtype(), out_shape);
        dispatch_by_size(dtype_size(values.dtype()), [&]<typename U>() {
          const U off = static_cast<const U*>(values.raw_data())[0];
          const U on = static_cast<const U*>(values.raw_data())[1];
          U* dst = static_cast<U*>(out.raw_data());
          std::fill(dst, dst + out.numel(), off);
          for (int64_t o = 0; o < outer; ++o) {
            for (int64_t i = 0; i < inner; ++i) {
              const int64_t p = positions[static_cast<size_t>(o * inner + i)];
              if (p >= 0) dst[(o * depth + p) * inner + i] = on;
            }
          }
        });
      });
    }};

// True for the elements that are not zero (NaN counts as nonzero, -0.0 as zero).
std::vector<bool> nonzero_mask(const Tensor& x) {
  std::vector<bool> mask(static_cast<size_t>(x.numel()));
  dispatch<ONNXTRAIN_ALL_TYPES>(x.dtype(), "NonZero", [&]<typename T>() {
    using C = compute_type_t<T>;
    const T* p = x.data<T>();
    for (size_t i = 0; i < mask.size(); ++i) mask[i] = !(C(p[i]) == C(0));
  });
  return mask;
}

const KernelRegistration kNonZero{"", "NonZero", 9, kLatestOpset, [](const KernelInfo&) {
                                    return make_kernel([](KernelContext& ctx) {
                                      const Tensor& x = ctx.input(0);
                                      // A scalar reads as shape [1], as numpy and onnxruntime do.
                                      const Shape shape = x.rank() == 0 ? Shape{1} : x.shape();
                                      const std::vector<bool> mask = nonzero_mask(x);
                                      const auto count =
                                          static_cast<int64_t>(std::count(mask.begin(), mask.end(), true));
                                      const auto rank = static_cast<int64_t>(shape.size());
                                      Tensor& out = ctx.allocate_output(0, DType::kInt64, {rank, count});
                                      int64_t* dst = out.data<int64_t>();
                                      std::vector<int64_t> index(shape.size(), 0);
                                      int64_t n = 0;
                                      for (size_t i = 0; i < mask.size(); ++i) {
                                        if (mask[i]) {
                                          for (int64_t d = 0; d < rank; ++d)
                                            dst[d * count + n] = index[static_cast<size_t>(d)];
                                          ++n;
                                        }
                                        for (size_t d = shape.size(); d-- > 0;) {
                                          if (++index[d] < shape[d]) break;
                                          index[d] = 0;
                                        }
                                      }
                                    });
                                  }};

const KernelRegistration kCompress{
    "", "Compress", 9, kLatestOpset, [](const KernelInfo& info) {
      std::optional<int64_t> axis_attribute;
      if (info.has_attribute("axis")) axis_attribute = info.int_attribute("axis");
      return make_kernel([axis_attribute](KernelContext& ctx) {
        const Tensor& x = ctx.input(0);
        const Tensor& condition = ctx.input(1);
        if (condition.dtype() != DType::kBool || condition.rank() != 1) {
          ctx.fail("condition is " + std::string(dtype_name(condition.dtype())) + shape_string(condition.shape()) +
                   ", expected a 1-D bool tensor");
        }
        // Without an axis the input is read flat.
        const Shape shape = axis_attribute ? x.shape() : Shape{x.numel()};
        const auto axis =
            axis_attribute ? static_cast<size_t>(normalize_axis(ctx, *axis_attribute, static_cast<int64_t>(x.rank())))
                           : 0;
        const int64_t dim = shape.at(axis);
        const bool* keep = condition.data<bool>();
        std::vector<int64_t> selected;
        for (int64_t i = 0; i < condition.numel(); ++i) {
          if (!keep[i]) continue;
          if (i >= dim) {
            ctx.fail("condition has " + std::to_string(condition.numel()) + " entries and selects entry " +
                     std::to_string(i) + ", but the axis has size " + std::to_string(dim));
          }
          selected.push_back(i);
        }
        Shape out_shape = shape;
        out_shape[axis] = static_cast<int64_t>(selected.size());
        Tensor& out = ctx.allocate_output(0, x.dtype(), out_shape);
        const int64_t outer = shape_size(std::span(shape).first(axis));
        const size_t inner_bytes =
            static_cast<size_t>(shape_size(std::span(shape).subspan(axis + 1))) * dtype_size(x.dtype());
        const auto* src = static_cast<const std::byte*>(x.raw_data());
        auto* dst = static_cast<std::byte*>(out.raw_data());
        for (int64_t o = 0; o < outer; ++o) {
          for (int64_t i : selected) {
            std::memcpy(dst, src + static_cast<size_t>(o * dim + i) * inner_bytes, inner_bytes);
            dst += inner_bytes;
          }
        }
      });
    }};

// ---- GatherGrad: dX = zeros(shape); dX[..., indices[j], ...] += dY[..., j, ...] ----

const KernelRegistration kGatherGrad{"org.onnxtrain", "GatherGrad", 1, kLatestOpset, [](const KernelInfo& info) {
                                       const int64_t axis_attr = info.int_attribute("axis", 0);
                                       return make_kernel([axis_attr](KernelContext& ctx) {
                                         const Tensor& dy = ctx.input(0);
                                         const Shape shape = ctx.input(1).to_int64_vector();
                                         const std::vector<int64_t> indices = ctx.input(2).to_int64_vector();
                                         const AxisView v = axis_view(ctx, shape, axis_attr);
                                         const int64_t m = static_cast<int64_t>(indices.size());
                                         if (dy.numel() != v.outer * m * v.inner)
                                           ctx.fail("dY " + shape_string(dy.shape()) + " does not match");
                                         Tensor& dx = ctx.allocate_output(0, dy.dtype(), shape);
                                         dispatch<ONNXTRAIN_FLOAT_TYPES>(dy.dtype(), "GatherGrad", [&]<typename T>() {
                                           using C = compute_type_t<T>;
                                           T* out = dx.data<T>();
                                           const T* g = dy.data<T>();
                                           std::fill(out, out + dx.numel(), T(0));
                                           for (int64_t j = 0; j < m; ++j) {
                                             const int64_t k = indices[static_cast<size_t>(j)];
                                             if (k < -v.length || k >= v.length)
                                               ctx.fail("index " + std::to_string(k) + " out of range");
                                           }
                                           // Race-free: threads own disjoint (outer row, inner column) ranges.
                                           parallel_for(v.outer * v.inner, 256, [&](int64_t begin, int64_t end) {
                                             for (int64_t r = begin; r < end;) {
                                               const int64_t o = r / v.inner;
                                               const int64_t c0 = r % v.inner;
                                               const int64_t c1 = std::min(v.inner, c0 + (end - r));
                                               for (int64_t j = 0; j < m; ++j) {
                                                 int64_t k = indices[static_cast<size_t>(j)];
                                                 if (k < 0) k += v.length;
                                                 T* dst = out + (o * v.length + k) * v.inner;
                                                 const T* src = g + (o * m + j) * v.inner;
                                                 for (int64_t c = c0; c < c1; ++c)
                                                   dst[c] = static_cast<T>(C(dst[c]) + C(src[c]));
                                               }
                                               r += c1 - c0;
                                             }
                                           });
                                         });
                                       });
                                     }};

}  // namespace
}  // namespace onnxtrain
