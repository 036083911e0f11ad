// The loops every elementwise kernel shares (elementwise.cc, activation.cc, cast.cc):
// unary maps and broadcasting n-ary maps over contiguous tensors.
//
// An op is a function object on compute types (float for Float16/BFloat16, T otherwise);
// the loops convert on the way in and out. Each loop is a plain indexed loop over
// contiguous pointers so that the compiler vectorizes it for float32 and the integers.
#pragma once

#include <onnxtrain/tensor.h>

#include <array>
#include <span>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/dispatch.h"
#include "core/parallel.h"
#include "ops/cpu/broadcast.h"
#include "ops/cpu/multiversion.h"
#include "ops/cpu/vector_math.h"
#include "ops/kernel.h"

namespace onnxtrain::elementwise {

// Elements per parallel chunk: large enough that a thread's share outweighs its start-up.
inline constexpr int64_t kGrain = 32768;

template <typename T>
using C = compute_type_t<T>;

// p[i] in its compute type. The 16-bit floats convert without branches and bools are read
// as bytes, so that loops over them vectorize (GCC does not vectorize loads of bool).
template <typename T>
ONNXTRAIN_VECTOR_INLINE C<T> load(const T* p, int64_t i) {
  if constexpr (std::is_same_v<T, Float16>) {
    return vector_math::half_to_float(p[i].bits);
  } else if constexpr (std::is_same_v<T, BFloat16>) {
    return vector_math::bfloat16_to_float(p[i].bits);
  } else if constexpr (std::is_same_v<T, bool>) {
    return reinterpret_cast<const uint8_t*>(p)[i] != 0;
  } else {
    return p[i];
  }
}

// v (of a compute type, bool, or R itself) stored as an R.
template <typename R, typename V>
ONNXTRAIN_VECTOR_INLINE R store(V v) {
  R r{};
  if constexpr (std::is_same_v<R, V>) {
    r = v;
  } else if constexpr (std::is_same_v<R, Float16>) {
    r.bits = vector_math::float_to_half(static_cast<float>(v));
  } else if constexpr (std::is_same_v<R, BFloat16>) {
    r.bits = vector_math::float_to_bfloat16(static_cast<float>(v));
  } else {
    r = static_cast<R>(v);
  }
  return r;
}

// The loops below are `flatten`ed: everything they call, op included, is inlined into
// them, which vectorization needs (GCC would otherwise keep a large op out of line). They
// are compiled for each x86 level (multiversion.h), each loop chunk running the CPU's best.

template <typename T, typename R, typename Op>
ONNXTRAIN_MULTIVERSIONED [[gnu::flatten]] void map_range(const T* in, R* out, int64_t begin, int64_t end,
                                                         const Op& op) {
  for (int64_t i = begin; i < end; ++i) out[i] = store<R>(op(load(in, i)));
}

// out[i] = op(in[i]) for i in [0, n), in parallel. `out` may be `in`.
template <typename T, typename R, typename Op>
void map(const T* in, R* out, int64_t n, Op op) {
  parallel_for(n, kGrain, [&](int64_t begin, int64_t end) { map_range(in, out, begin, end, op); });
}

// Output 0 = op(input 0) elementwise; output type R (written over the input when R is T
// and the input dies here).
template <typename T, typename R = T, typename Op>
void unary(KernelContext& ctx, Op op) {
  const Tensor& x = ctx.input(0);
  Tensor& out = std::is_same_v<T, R> ? ctx.allocate_output_in_place(0, 0, dtype_of<R>(), x.shape())
                                     : ctx.allocate_output(0, dtype_of<R>(), x.shape());
  map(x.data<T>(), out.data<R>(), x.numel(), op);
}

// One operand of a broadcasting map: its elements and its shape.
template <typename T>
struct Operand {
  const T* data;
  const Shape* shape;
};

namespace detail {

// Reads an operand that advances with the output (stride 1) ...
template <typename T>
struct Contiguous {
  const T* p;
  C<T> operator[](int64_t i) const { return load(p, i); }
};
// ... or one that stays on a single element (stride 0).
template <typename T>
struct Repeated {
  C<T> v;
  C<T> operator[](int64_t) const { return v; }
};

template <typename R, typename Op, typename... Readers>
ONNXTRAIN_MULTIVERSIONED [[gnu::flatten]] void run_row(R* out, int64_t n, const Op& op, Readers... in) {
  for (int64_t i = 0; i < n; ++i) out[i] = store<R>(op(in[i]...));
}

// Chooses, operand by operand, a stride-1 or stride-0 reader, so that every combination
// compiles to its own branch-free loop.
template <size_t K, typename R, typename Op, typename Pointers, typename... Readers>
void pick_readers(R* out, int64_t n, const Op& op, const Pointers& in, const int64_t* strides, Readers... chosen) {
  if constexpr (K == std::tuple_size_v<Pointers>) {
    run_row(out, n, op, chosen...);
  } else {
    using T = std::remove_cv_t<std::remove_pointer_t<std::tuple_element_t<K, Pointers>>>;
    const T* p = std::get<K>(in);
    if (strides[K] != 0) {
      pick_readers<K + 1>(out, n, op, in, strides, chosen..., Contiguous<T>{p});
    } else {
      pick_readers<K + 1>(out, n, op, in, strides, chosen..., Repeated<T>{load(p, 0)});
    }
  }
}

// The output shape with size-1 axes dropped and neighbouring axes merged wherever every
// operand reads both the same way (both broadcast or both full), so that rows are as long
// as possible. Returns the collapsed output shape and the operands' collapsed shapes.
inline std::pair<Shape, std::vector<Shape>> collapse(const Shape& out, std::span<const Shape* const> shapes) {
  const size_t rank = out.size();
  Shape merged_out;
  std::vector<Shape> merged(shapes.size());
  std::vector<char> previous_broadcast(shapes.size(), 0);
  for (size_t d = 0; d < rank; ++d) {
    if (out[d] == 1) continue;
    bool same_as_previous = !merged_out.empty();
    for (size_t k = 0; k < shapes.size(); ++k) {
      const Shape& s = *shapes[k];
      const int64_t dim = d + s.size() >= rank ? s[d + s.size() - rank] : 1;
      same_as_previous = same_as_previous && ((dim == 1) == previous_broadcast[k]);
    }
    for (size_t k = 0; k < shapes.size(); ++k) {
      const Shape& s = *shapes[k];
      const int64_t dim = d + s.size() >= rank ? s[d + s.size() - rank] : 1;
      if (same_as_previous) {
        merged[k].back() *= dim;
      } else {
        merged[k].push_back(dim);
      }
      previous_broadcast[k] = dim == 1;
    }
    if (same_as_previous) {
      merged_out.back() *= out[d];
    } else {
      merged_out.push_back(out[d]);
    }
  }
  return {std::move(merged_out), std::move(merged)};
}

// The pointers in `base`, each moved forward by its offset.
template <typename... Ts, size_t N, size_t... K>
std::tuple<const Ts*...> advance(const std::tuple<const Ts*...>& base, const std::array<int64_t, N>& offsets,
                                 std::index_sequence<K...>) {
  return {std::get<K>(base) + offsets[K]...};
}
template <typename... Ts, size_t N>
std::tuple<const Ts*...> advance(const std::tuple<const Ts*...>& base, const std::array<int64_t, N>& offsets) {
  return advance(base, offsets, std::index_sequence_for<Ts...>{});
}

}  // namespace detail

// out = op(inputs...) elementwise, each input broadcast (numpy rules) to `out_shape`, which
// the caller has computed with broadcast_shapes. `out` may be an input of the output's shape.
// Takes a flat parallel loop when every input is either full-size or a single element, and
// walks rows of the collapsed shape otherwise.
template <typename R, typename Op, typename... Ts>
void broadcast_map(R* out, const Shape& out_shape, const Op& op, Operand<Ts>... in) {
  constexpr size_t N = sizeof...(Ts);
  const int64_t total = shape_size(out_shape);
  if (total == 0) return;
  const std::array<const Shape*, N> shapes{in.shape...};
  const std::tuple<const Ts*...> base{in.data...};
  bool flat = true;
  std::array<int64_t, N> strides{};
  for (size_t k = 0; k < N; ++k) {
    const int64_t count = shape_size(*shapes[k]);
    flat = flat && (count == total || count == 1);
    strides[k] = count == total && total != 1 ? 1 : 0;
  }
  if (flat) {
    parallel_for(total, kGrain, [&](int64_t begin, int64_t end) {
      std::array<int64_t, N> offsets{};
      for (size_t k = 0; k < N; ++k) offsets[k] = strides[k] ? begin : 0;
      detail::pick_readers<0>(out + begin, end - begin, op, detail::advance(base, offsets), strides.data());
    });
    return;
  }
  auto [row_shape, merged] = detail::collapse(out_shape, shapes);
  std::array<const Shape*, N> merged_shapes{};
  for (size_t k = 0; k < N; ++k) merged_shapes[k] = &merged[k];
  for_each_broadcast_row<N>(
      row_shape, merged_shapes, [&](int64_t o, const auto& offsets, const auto& row_strides, int64_t n) {
        detail::pick_readers<0>(out + o, n, op, detail::advance(base, offsets), row_strides.data());
      });
}

// Output 0 = op(input 0, input 1) with broadcasting, element types A and B in, R out.
// Writes over an input of the output's shape and type when that input dies here.
template <typename A, typename B, typename R, typename Op>
void binary(KernelContext& ctx, const Op& op) {
  const Tensor& a = ctx.input(0);
  const Tensor& b = ctx.input(1);
  Shape shape = broadcast_shapes(a.shape(), b.shape());
  constexpr DType out_dtype = dtype_of<R>();
  Tensor& out = std::is_same_v<A, R> && a.shape() == shape   ? ctx.allocate_output_in_place(0, 0, out_dtype, shape)
                : std::is_same_v<B, R> && b.shape() == shape ? ctx.allocate_output_in_place(0, 1, out_dtype, shape)
                                                             : ctx.allocate_output(0, out_dtype, shape);
  broadcast_map(out.data<R>(), out.shape(), op, Operand<A>{a.data<A>(), &a.shape()},
                Operand<B>{b.data<B>(), &b.shape()});
}

// Fails unless inputs `first`..`last` of the node share one element type.
inline void require_same_dtype(KernelContext& ctx, size_t first, size_t last) {
  const DType dtype = ctx.input(first).dtype();
  for (size_t i = first + 1; i <= last; ++i) {
    if (!ctx.has_input(i) || ctx.input(i).dtype() == dtype) continue;
    ctx.fail("input " + std::to_string(i) + " has element type " + std::string(dtype_name(ctx.input(i).dtype())) +
             ", expected " + std::string(dtype_name(dtype)) + " like input " + std::to_string(first));
  }
}

}  // namespace onnxtrain::elementwise
