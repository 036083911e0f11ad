// Reductions: ReduceSum, ReduceMean, ReduceMax, ReduceMin, ReduceProd, ReduceLogSumExp,
// ReduceLogSum, ReduceL1, ReduceL2, ReduceSumSquare.
//
// One engine serves them all. The reduced axes are folded into a contiguous
// [outer, reduced, inner] view of the input:
//   inner == 1  "row" mode: each output reduces one contiguous run (reducing trailing axes);
//   inner > 1   "column" mode: each output reduces a strided column, and a block of
//               neighbouring columns is accumulated row by row (reducing leading axes).
// Axis patterns that do not fold (e.g. axes {0, 2} of a 4-D tensor) are first copied into
// [kept..., reduced...] or [reduced..., kept...] order and then reduced as rows or columns.
//
// Each op is a tiny policy: acc = combine(acc, pre(x)) starting from identity, then
// finish(acc, count). Accumulators are wider than the data where that buys accuracy:
// double for float32 sums, float for float16/bfloat16, 64-bit for integers. Long
// reductions are cut into fixed-size chunks whose partial results are combined in order,
// which both parallelizes them and keeps the result independent of the thread count.
#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "core/dispatch.h"
#include "core/parallel.h"
#include "ops/cpu/axis.h"
#include "ops/cpu/vector_math.h"
#include "ops/kernel_registry.h"

namespace onnxtrain {
namespace {

// ---------------------------------------------------------------------------------------
// Accumulator types.

// A wide accumulator for sums and products.
template <typename T>
struct Wide {
  using type = T;
};
template <>
struct Wide<float> {
  using type = double;
};
template <>
struct Wide<Float16> {
  using type = float;
};
template <>
struct Wide<BFloat16> {
  using type = float;
};
template <>
struct Wide<int8_t> {
  using type = int64_t;
};
template <>
struct Wide<int32_t> {
  using type = int64_t;
};
template <>
struct Wide<uint8_t> {
  using type = uint64_t;
};
template <>
struct Wide<uint32_t> {
  using type = uint64_t;
};

enum class AccKind {
  kWide,     // sums and products: Wide<T>
  kCompute,  // comparisons: the data's own compute type
  kReal,     // transcendental: floating point even for integer data
};

template <typename T, AccKind kind>
struct AccumulatorOf {
  using type = std::conditional_t<kind == AccKind::kWide, typename Wide<T>::type, compute_type_t<T>>;
};
template <typename T>
struct AccumulatorOf<T, AccKind::kReal> {
  using W = typename Wide<T>::type;
  using type = std::conditional_t<std::is_floating_point_v<W>, W, double>;
};

template <typename T, typename Op>
using acc_t = typename AccumulatorOf<T, Op::kAcc>::type;

// Converts an accumulator to the output type. Integer outputs of floating results (e.g.
// ReduceL2 of int32) are truncated like a C cast, with nan and out-of-range values
// saturated instead of being undefined behaviour.
template <typename Out, typename A>
Out convert(A a) {
  if constexpr (std::is_integral_v<Out> && !std::is_same_v<Out, bool> && std::is_floating_point_v<A>) {
    if (std::isnan(a)) return Out(0);
    if (a <= static_cast<A>(std::numeric_limits<Out>::lowest())) return std::numeric_limits<Out>::lowest();
    if (a >= static_cast<A>(std::numeric_limits<Out>::max())) return std::numeric_limits<Out>::max();
    return static_cast<Out>(a);
  } else {
    return static_cast<Out>(a);
  }
}

// One element as an accumulator; the 16-bit floats through vector_math's branch-free
// conversions, so that the loops over them vectorize.
template <typename A, typename T>
A load(T x) {
  if constexpr (std::is_same_v<T, Float16>) {
    return A(vector_math::half_to_float(x.bits));
  } else if constexpr (std::is_same_v<T, BFloat16>) {
    return A(vector_math::bfloat16_to_float(x.bits));
  } else {
    return A(x);
  }
}

// log/sqrt of an accumulator; integer accumulators go through double.
template <typename A>
A real_log(A a) {
  if constexpr (std::is_integral_v<A>) {
    return convert<A>(std::log(static_cast<double>(a)));
  } else {
    return std::log(a);
  }
}
template <typename A>
A real_sqrt(A a) {
  if constexpr (std::is_integral_v<A>) {
    return convert<A>(std::sqrt(static_cast<double>(a)));
  } else {
    return std::sqrt(a);
  }
}

// ---------------------------------------------------------------------------------------
// The ops. `shift` is only used by LogSumExp (the per-output maximum).

template <typename A>
struct SumBase {
  static constexpr AccKind kAcc = AccKind::kWide;
  static constexpr bool kShifted = false;
  static A identity() { return A(0); }
  static A pre(A x, A) { return x; }
  static A combine(A a, A b) { return a + b; }
  static A finish(A a, int64_t, A) { return a; }
};

template <typename A, typename C = A>
struct SumOp : SumBase<A> {};

template <typename A, typename C = A>
struct MeanOp : SumBase<A> {
  static A finish(A a, int64_t n, A) {
    if constexpr (std::is_integral_v<A>) {
      return n == 0 ? A(0) : a / static_cast<A>(n);  // integer mean of nothing: 0, not a crash
    } else {
      return a / static_cast<A>(n);  // mean of nothing: nan
    }
  }
};

template <typename A, typename C = A>
struct SumSquareOp : SumBase<A> {
  static A pre(A x, A) { return x * x; }
};

template <typename A, typename C = A>
struct L1Op : SumBase<A> {
  static A pre(A x, A) {
    if constexpr (std::is_unsigned_v<A>) {
      return x;
    } else {
      return x < A(0) ? A(-x) : x;
    }
  }
};

template <typename A, typename C = A>
struct L2Op : SumBase<A> {
  static A pre(A x, A) { return x * x; }
  static A finish(A a, int64_t, A) { return real_sqrt(a); }
};

template <typename A, typename C = A>
struct LogSumOp : SumBase<A> {
  static A finish(A a, int64_t, A) { return real_log(a); }
};

template <typename A, typename C = A>
struct ProdOp : SumBase<A> {
  static A identity() { return A(1); }
  static A combine(A a, A b) { return a * b; }
};

template <typename A>
struct NanAware {
  static bool is_nan(A v) {
    if constexpr (std::is_floating_point_v<A>) {
      return v != v;
    } else {
      return false;
    }
  }
};

// Max and Min propagate nan (like numpy); reducing nothing gives -inf/+inf, or the
// type's lowest/highest value where there is no infinity (opset 20 spec).
template <typename A, typename C = A>
struct MaxOp {
  static constexpr AccKind kAcc = AccKind::kCompute;
  static constexpr bool kShifted = false;
  static A identity() {
    if constexpr (std::is_same_v<A, bool>) {
      return false;
    } else if constexpr (std::numeric_limits<A>::has_infinity) {
      return -std::numeric_limits<A>::infinity();
    } else {
      return std::numeric_limits<A>::lowest();
    }
  }
  static A pre(A x, A) { return x; }
  static A combine(A a, A b) { return (b > a || NanAware<A>::is_nan(b)) ? b : a; }
  static A finish(A a, int64_t, A) { return a; }
};

template <typename A, typename C = A>
struct MinOp {
  static constexpr AccKind kAcc = AccKind::kCompute;
  static constexpr bool kShifted = false;
  static A identity() {
    if constexpr (std::is_same_v<A, bool>) {
      return true;
    } else if constexpr (std::numeric_limits<A>::has_infinity) {
      return std::numeric_limits<A>::infinity();
    } else {
      return std::numeric_limits<A>::max();
    }
  }
  static A pre(A x, A) { return x; }
  static A combine(A a, A b) { return (b < a || NanAware<A>::is_nan(b)) ? b : a; }
  static A finish(A a, int64_t, A) { return a; }
};

// log(sum(exp(x))) computed as m + log(sum(exp(x - m))) with m the maximum, so that
// large inputs do not overflow. The engine runs a MaxOp pass first to get m. The
// exponentials are computed in the data's compute type C (float for float32: vectorized
// by vector_math::exp, within 2 ulp) and summed in the wider A.
template <typename A, typename C = A>
struct LogSumExpOp {
  static constexpr AccKind kAcc = AccKind::kReal;
  static constexpr bool kShifted = true;
  static A identity() { return A(0); }
  static A pre(A x, A m) { return A(vector_math::exp(C(x - m))); }
  static A combine(A a, A b) { return a + b; }
  static A finish(A a, int64_t, A m) {
    // An infinite or nan maximum decides the result (and exp(inf - inf) would be nan).
    if (!std::isfinite(m)) return m;
    return m + std::log(a);
  }
};

// ---------------------------------------------------------------------------------------
// The engine.

constexpr int64_t kRowChunk = 16384;      // elements one task reduces in row mode
constexpr int64_t kColumnBlock = 1024;    // columns accumulated together in column mode
constexpr int64_t kTaskElements = 16384;  // about this much work per parallel task
constexpr int64_t kFewTasks = 16;         // below this many column tasks, also split the rows...
constexpr int64_t kMaxRowChunks = 16;     // ...into at most this many chunks

// The input viewed as contiguous [outer, reduced, inner].
struct Layout {
  int64_t outer = 1;
  int64_t reduced = 1;
  int64_t inner = 1;
};

// Reduces `n` contiguous elements. Independent lanes let the compiler vectorize and
// shorten the floating-point dependency chain (which also improves accuracy).
template <typename Op, typename A, typename T>
A reduce_run(const T* x, int64_t n, A shift) {
  constexpr int kLanes = std::max<int>(16, 128 / sizeof(A));  // four vector registers or more
  alignas(64) A lanes[kLanes];
  for (A& lane : lanes) lane = Op::identity();
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
#pragma omp simd
    for (int j = 0; j < kLanes; ++j) lanes[j] = Op::combine(lanes[j], Op::pre(load<A>(x[i + j]), shift));
  }
  A acc = Op::identity();
  for (; i < n; ++i) acc = Op::combine(acc, Op::pre(load<A>(x[i]), shift));
  for (int width = kLanes / 2; width > 0; width /= 2) {  // pairwise
    for (int j = 0; j < width; ++j) lanes[j] = Op::combine(lanes[j], lanes[j + width]);
  }
  return Op::combine(lanes[0], acc);
}

template <typename Op, typename A>
A shift_at(const A* shift, int64_t i) {
  if constexpr (Op::kShifted) {
    return shift[i];
  } else {
    return A{};
  }
}

// inner == 1: out[o] = reduce(x[o, :]). Rows longer than kRowChunk are cut into chunks
// whose partial results are combined in order.
template <typename Op, typename A, typename T, typename Out>
void reduce_rows(const T* x, Out* out, int64_t outer, int64_t n, const A* shift) {
  const int64_t chunks = std::max<int64_t>(1, (n + kRowChunk - 1) / kRowChunk);
  const int64_t grain = std::max<int64_t>(1, kTaskElements / std::max<int64_t>(1, std::min(n, kRowChunk)));
  if (chunks == 1) {
    parallel_for(outer, grain, [&](int64_t begin, int64_t end) {
      for (int64_t o = begin; o < end; ++o) {
        const A s = shift_at<Op>(shift, o);
        out[o] = convert<Out>(Op::finish(reduce_run<Op>(x + o * n, n, s), n, s));
      }
    });
    return;
  }
  const auto partial = std::make_unique<A[]>(static_cast<size_t>(outer * chunks));
  parallel_for(outer * chunks, 1, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const int64_t o = t / chunks;
      const int64_t first = (t % chunks) * kRowChunk;
      const int64_t count = std::min(kRowChunk, n - first);
      partial[static_cast<size_t>(t)] = reduce_run<Op>(x + o * n + first, count, shift_at<Op>(shift, o));
    }
  });
  for (int64_t o = 0; o < outer; ++o) {
    A acc = partial[static_cast<size_t>(o * chunks)];
    for (int64_t c = 1; c < chunks; ++c) acc = Op::combine(acc, partial[static_cast<size_t>(o * chunks + c)]);
    out[o] = convert<Out>(Op::finish(acc, n, shift_at<Op>(shift, o)));
  }
}

// Accumulates rows [first, first + count) of the columns [column, column + width) of one
// [reduced, inner] slab into acc[0, width).
template <typename Op, typename A, typename T>
void accumulate_columns(const T* slab, int64_t inner, int64_t column, int64_t width, int64_t first, int64_t count,
                        const A* shift, A* acc) {
  for (int64_t j = 0; j < width; ++j) acc[j] = Op::identity();
  int64_t r = first;
  const int64_t end = first + count;
  if (width == inner && 2 * inner <= kColumnBlock && count >= 2 * (kColumnBlock / inner)) {
    // Narrow slab: k whole rows form one contiguous run of k * inner elements, so the
    // vector loop below runs kColumnBlock wide instead of `inner` wide.
    const int64_t k = kColumnBlock / inner;
    const int64_t span = k * inner;
    A wide[kColumnBlock];
    A wide_shift[Op::kShifted ? kColumnBlock : 1];
    for (int64_t j = 0; j < span; ++j) wide[j] = Op::identity();
    if constexpr (Op::kShifted) {
      for (int64_t row = 0; row < k; ++row) std::copy(shift, shift + inner, wide_shift + row * inner);
    }
    for (; r + k <= end; r += k) {
      const T* rows = slab + r * inner;
#pragma omp simd
      for (int64_t j = 0; j < span; ++j)
        wide[j] = Op::combine(wide[j], Op::pre(load<A>(rows[j]), shift_at<Op>(wide_shift, j)));
    }
    for (int64_t row = 0; row < k; ++row) {
      for (int64_t j = 0; j < inner; ++j) acc[j] = Op::combine(acc[j], wide[row * inner + j]);
    }
  }
  for (; r < end; ++r) {
    const T* row = slab + r * inner + column;
#pragma omp simd
    for (int64_t j = 0; j < width; ++j) acc[j] = Op::combine(acc[j], Op::pre(load<A>(row[j]), shift_at<Op>(shift, j)));
  }
}

// inner > 1: out[o, i] = reduce(x[o, :, i]), a block of columns at a time. When there are
// few column blocks and many rows, the rows are cut into chunks as well.
template <typename Op, typename A, typename T, typename Out>
void reduce_columns(const T* x, Out* out, const Layout& l, const A* shift) {
  const int64_t blocks = (l.inner + kColumnBlock - 1) / kColumnBlock;
  const int64_t tasks = l.outer * blocks;
  const int64_t block_rows = std::max<int64_t>(1, kTaskElements / std::min(l.inner, kColumnBlock));
  const int64_t chunks =
      tasks >= kFewTasks ? 1 : std::clamp<int64_t>((l.reduced + block_rows - 1) / block_rows, 1, kMaxRowChunks);
  const int64_t rows_per_chunk = (l.reduced + chunks - 1) / chunks;
  // (Not std::vector: A may be bool.)
  const auto partial = std::make_unique<A[]>(chunks > 1 ? static_cast<size_t>(l.outer * chunks * l.inner) : 0);
  const int64_t grain = std::max<int64_t>(1, kTaskElements / std::max<int64_t>(1, rows_per_chunk * kColumnBlock));
  parallel_for(tasks * chunks, grain, [&](int64_t begin, int64_t end) {
    A acc[kColumnBlock];
    for (int64_t t = begin; t < end; ++t) {
      const int64_t chunk = t % chunks;
      const int64_t o = t / chunks / blocks;
      const int64_t column = (t / chunks % blocks) * kColumnBlock;
      const int64_t width = std::min(kColumnBlock, l.inner - column);
      const int64_t first = chunk * rows_per_chunk;
      const int64_t count = std::max<int64_t>(0, std::min(rows_per_chunk, l.reduced - first));
      const int64_t out_offset = o * l.inner + column;
      const A* s = Op::kShifted ? shift + out_offset : nullptr;
      accumulate_columns<Op>(x + o * l.reduced * l.inner, l.inner, column, width, first, count, s, acc);
      if (chunks == 1) {
        for (int64_t j = 0; j < width; ++j) {
          out[out_offset + j] = convert<Out>(Op::finish(acc[j], l.reduced, shift_at<Op>(s, j)));
        }
      } else {
        A* p = partial.get() + (o * chunks + chunk) * l.inner + column;
        std::copy(acc, acc + width, p);
      }
    }
  });
  if (chunks == 1) return;
  parallel_for(l.outer * l.inner, kTaskElements / chunks + 1, [&](int64_t begin, int64_t end) {
    for (int64_t k = begin; k < end; ++k) {
      const int64_t o = k / l.inner;
      const int64_t i = k % l.inner;
      A acc = partial[static_cast<size_t>(o * chunks * l.inner + i)];
      for (int64_t c = 1; c < chunks; ++c) {
        acc = Op::combine(acc, partial[static_cast<size_t>((o * chunks + c) * l.inner + i)]);
      }
      out[k] = convert<Out>(Op::finish(acc, l.reduced, shift_at<Op>(shift, k)));
    }
  });
}

template <typename Op, typename A, typename T, typename Out>
void reduce_layout(const T* x, Out* out, const Layout& l, const A* shift) {
  if (l.inner == 1) {
    reduce_rows<Op>(x, out, l.outer, l.reduced, shift);
  } else {
    reduce_columns<Op>(x, out, l, shift);
  }
}

// Dimensions of size > 1 with adjacent kept (or reduced) dimensions merged.
struct Run {
  int64_t size;
  bool reduced;
};

std::vector<Run> merged_runs(const Shape& shape, const std::vector<bool>& reduced) {
  std::vector<Run> runs;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    if (!runs.empty() && runs.back().reduced == reduced[d]) {
      runs.back().size *= shape[d];
    } else {
      runs.push_back({shape[d], reduced[d]});
    }
  }
  return runs;
}

// The [outer, reduced, inner] view when the runs fold into one, i.e. they are at most
// kept, reduced, kept in that order.
std::optional<Layout> fold(const std::vector<Run>& runs) {
  Layout l;
  size_t k = 0;
  if (k < runs.size() && !runs[k].reduced) l.outer = runs[k++].size;
  if (k < runs.size() && runs[k].reduced) l.reduced = runs[k++].size;
  if (k < runs.size() && !runs[k].reduced) l.inner = runs[k++].size;
  if (k != runs.size()) return std::nullopt;
  return l;
}

// Copies x into `dst`, contiguous, with its runs reordered as [kept..., reduced...] when
// the last run is reduced and as [reduced..., kept...] otherwise: either way the last run
// stays last, so the innermost copy loop reads contiguous memory, and the result is a
// [kept, reduced] (row mode) or [reduced, kept] (column mode) layout.
template <typename T>
void gather_reduced_apart(const T* x, T* dst, const std::vector<Run>& runs) {
  std::vector<int64_t> dims, strides;
  std::vector<int64_t> source_strides(runs.size());
  int64_t stride = 1;
  for (size_t r = runs.size(); r-- > 0;) {
    source_strides[r] = stride;
    stride *= runs[r].size;
  }
  const bool reduced_last = runs.back().reduced;
  for (const bool reduced : {!reduced_last, reduced_last}) {
    for (size_t r = 0; r < runs.size(); ++r) {
      if (runs[r].reduced != reduced) continue;
      dims.push_back(runs[r].size);
      strides.push_back(source_strides[r]);
    }
  }
  const size_t rank = dims.size();
  const int64_t inner = dims[rank - 1];  // the last run, stride 1
  const int64_t rows = shape_size(dims) / inner;
  parallel_for(rows, std::max<int64_t>(1, kTaskElements / inner), [&](int64_t begin, int64_t end) {
    // An odometer over the outer dimensions: one division per task, not per row.
    std::vector<int64_t> index(rank - 1);
    int64_t offset = 0;
    for (size_t d = rank - 1, rest = static_cast<size_t>(begin); d-- > 0;) {
      index[d] = static_cast<int64_t>(rest) % dims[d];
      rest /= static_cast<size_t>(dims[d]);
      offset += index[d] * strides[d];
    }
    for (int64_t row = begin; row < end; ++row) {
      std::copy(x + offset, x + offset + inner, dst + row * inner);
      for (size_t d = rank - 1; d-- > 0;) {
        offset += strides[d];
        if (++index[d] < dims[d]) break;
        offset -= index[d] * strides[d];
        index[d] = 0;
      }
    }
  });
}

// Runs `Op` over the reduced axes of `x` into `out` (already shaped).
template <template <typename, typename> class OpOf, typename T>
void reduce(KernelContext& ctx, const Tensor& x, const std::vector<bool>& reduced, Tensor& out) {
  using A = acc_t<T, OpOf<int, int>>;
  using C = std::conditional_t<std::is_floating_point_v<compute_type_t<T>>, compute_type_t<T>, A>;
  using Op = OpOf<A, C>;
  const Shape& shape = x.shape();
  T* po = out.data<T>();
  if (out.numel() == 0) return;
  int64_t count = 1;
  for (size_t d = 0; d < shape.size(); ++d) count *= reduced[d] ? shape[d] : 1;
  if (count == 0) {  // reducing an empty set
    std::fill(po, po + out.numel(), convert<T>(Op::finish(Op::identity(), 0, MaxOp<A>::identity())));
    return;
  }
  const std::vector<Run> runs = merged_runs(shape, reduced);
  const T* px = x.data<T>();
  std::optional<Layout> layout = fold(runs);
  Tensor permuted;
  if (!layout) {
    permuted = ctx.allocate_scratch(x.dtype(), {x.numel()});
    gather_reduced_apart(px, permuted.data<T>(), runs);
    px = permuted.data<T>();
    layout = runs.back().reduced ? Layout{out.numel(), count, 1} : Layout{1, count, out.numel()};
  }
  if constexpr (Op::kShifted) {
    const auto maximum = std::make_unique<A[]>(static_cast<size_t>(out.numel()));
    reduce_layout<MaxOp<A>, A>(px, maximum.get(), *layout, static_cast<const A*>(nullptr));
    reduce_layout<Op>(px, po, *layout, static_cast<const A*>(maximum.get()));
  } else {
    reduce_layout<Op, A>(px, po, *layout, static_cast<const A*>(nullptr));
  }
}

// ---------------------------------------------------------------------------------------
// The node: axes (attribute or input), keepdims, noop_with_empty_axes.

struct ReduceAttributes {
  bool keepdims = true;
  bool noop_with_empty_axes = false;
  bool axes_from_input = false;
  std::vector<int64_t> axes;  // when from the attribute
};

// Which axes of a rank-`rank` tensor to reduce; validates the axes.
std::vector<bool> reduced_axes(KernelContext& ctx, const std::vector<int64_t>& axes, size_t rank,
                               bool noop_with_empty_axes) {
  std::vector<bool> reduced(rank, false);
  if (axes.empty()) {
    if (!noop_with_empty_axes) reduced.assign(rank, true);
    return reduced;
  }
  for (const int64_t a : normalize_axes(ctx, axes, static_cast<int64_t>(rank))) reduced[static_cast<size_t>(a)] = true;
  return reduced;
}

Shape reduced_shape(const Shape& shape, const std::vector<bool>& reduced, bool keepdims) {
  Shape out;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (!reduced[d]) {
      out.push_back(shape[d]);
    } else if (keepdims) {
      out.push_back(1);
    }
  }
  return out;
}

std::vector<int64_t> axes_of(KernelContext& ctx, const ReduceAttributes& attributes) {
  if (!attributes.axes_from_input || !ctx.has_input(1)) return attributes.axes;
  const Tensor& axes = ctx.input(1);
  if (axes.dtype() != DType::kInt64 || axes.rank() > 1) {
    ctx.fail("input 'axes' must be a 1-D int64 tensor, got " + std::string(dtype_name(axes.dtype())) + " of shape " +
             shape_string(axes.shape()));
  }
  const int64_t* values = axes.data<int64_t>();
  return std::vector<int64_t>(values, values + axes.numel());
}

template <template <typename, typename> class OpOf, typename... Ts>
void run_reduce(KernelContext& ctx, const ReduceAttributes& attributes) {
  const Tensor& x = ctx.input(0);
  const std::vector<bool> reduced =
      reduced_axes(ctx, axes_of(ctx, attributes), x.rank(), attributes.noop_with_empty_axes);
  Tensor& out = ctx.allocate_output(0, x.dtype(), reduced_shape(x.shape(), reduced, attributes.keepdims));
  dispatch<Ts...>(x.dtype(), ctx.node().op_type, [&]<typename T>() { reduce<OpOf, T>(ctx, x, reduced, out); });
}

// axes_input_since: the opset from which axes is an input rather than an attribute (and
// noop_with_empty_axes exists).
template <template <typename, typename> class OpOf, typename... Ts>
KernelFactory reduce_kernel(int axes_input_since) {
  return [axes_input_since](const KernelInfo& info) {
    ReduceAttributes attributes;
    attributes.keepdims = info.bool_attribute("keepdims", true);
    attributes.axes_from_input = info.opset() >= axes_input_since;
    if (attributes.axes_from_input) {
      attributes.noop_with_empty_axes = info.bool_attribute("noop_with_empty_axes", false);
    } else {
      attributes.axes = info.ints_attribute("axes", std::vector<int64_t>{});
    }
    return make_kernel([attributes](KernelContext& ctx) { run_reduce<OpOf, Ts...>(ctx, attributes); });
  };
}

#define ONNXTRAIN_REDUCE_TYPES float, double, Float16, BFloat16, int32_t, int64_t, uint32_t, uint64_t
#define ONNXTRAIN_REDUCE_COMPARE_TYPES ONNXTRAIN_REDUCE_TYPES, int8_t, uint8_t, bool

const KernelRegistration kReduceSum{"", "ReduceSum", 1, kLatestOpset, reduce_kernel<SumOp, ONNXTRAIN_REDUCE_TYPES>(13)};
const KernelRegistration kReduceMean{"", "ReduceMean", 1, kLatestOpset,
                                     reduce_kernel<MeanOp, ONNXTRAIN_REDUCE_TYPES>(18)};
const KernelRegistration kReduceProd{"", "ReduceProd", 1, kLatestOpset,
                                     reduce_kernel<ProdOp, ONNXTRAIN_REDUCE_TYPES>(18)};
const KernelRegistration kReduceSumSquare{"", "ReduceSumSquare", 1, kLatestOpset,
                                          reduce_kernel<SumSquareOp, ONNXTRAIN_REDUCE_TYPES>(18)};
const KernelRegistration kReduceL1{"", "ReduceL1", 1, kLatestOpset, reduce_kernel<L1Op, ONNXTRAIN_REDUCE_TYPES>(18)};
const KernelRegistration kReduceL2{"", "ReduceL2", 1, kLatestOpset, reduce_kernel<L2Op, ONNXTRAIN_REDUCE_TYPES>(18)};
const KernelRegistration kReduceLogSum{"", "ReduceLogSum", 1, kLatestOpset,
                                       reduce_kernel<LogSumOp, ONNXTRAIN_REDUCE_TYPES>(18)};
const KernelRegistration kReduceLogSumExp{"", "ReduceLogSumExp", 1, kLatestOpset,
                                          reduce_kernel<LogSumExpOp, ONNXTRAIN_REDUCE_TYPES>(18)};
const KernelRegistration kReduceMax{"", "ReduceMax", 1, kLatestOpset,
                                    reduce_kernel<MaxOp, ONNXTRAIN_REDUCE_COMPARE_TYPES>(18)};
const KernelRegistration kReduceMin{"", "ReduceMin", 1, kLatestOpset,
                                    reduce_kernel<MinOp, ONNXTRAIN_REDUCE_COMPARE_TYPES>(18)};

}  // namespace
}  // namespace onnxtrain
