// Kernels that work along one axis: ArgMax, ArgMin, TopK, CumSum.
//
// Each views its input as contiguous [outer, axis, inner]. With inner == 1 the axis is a
// contiguous run; otherwise a block of neighbouring columns is processed row by row so
// that memory is read in order.
#include <algorithm>
#include <cmath>
#include <string>
#include <type_traits>
#include <vector>

#include "core/dispatch.h"
#include "core/parallel.h"
#include "ops/cpu/axis.h"
#include "ops/kernel_registry.h"

namespace onnxtrain {
namespace {

constexpr int64_t kColumnBlock = 1024;
constexpr int64_t kTaskElements = 16384;

// The single integer of a scalar or one-element int32/int64 input (K of TopK, axis of
// CumSum).
int64_t single_integer(KernelContext& ctx, size_t index, const char* name) {
  const Tensor& t = ctx.input(index);
  if (t.numel() != 1 || t.rank() > 1) {
    ctx.fail(std::string("input '") + name +
             "' must hold exactly one value (a scalar or a 1-element 1-D tensor), got shape " +
             shape_string(t.shape()));
  }
  if (t.dtype() == DType::kInt64) return t.data<int64_t>()[0];
  if (t.dtype() == DType::kInt32) return t.data<int32_t>()[0];
  ctx.fail(std::string("input '") + name + "' must be int32 or int64, got " + std::string(dtype_name(t.dtype())));
}

template <typename C>
bool is_nan(C v) {
  if constexpr (std::is_floating_point_v<C>) {
    return v != v;
  } else {
    return false;
  }
}

// ---------------------------------------------------------------------------------------
// ArgMax / ArgMin

// Whether `v` replaces the current best `best`: strictly better for the first index,
// better or equal for the last index. A nan beats every number (numpy's rule: the first
// nan, or with select_last_index the last one, is the answer).
template <bool kMax, bool kLast, typename C>
bool better(C v, C best) {
  // Branch-free (bitwise on bools), so that the lanes below vectorize; comparisons with
  // nan are false.
  const bool compares = kMax ? (kLast ? v >= best : v > best) : (kLast ? v <= best : v < best);
  return compares | (is_nan(v) & (kLast | !is_nan(best)));
}

// The index of the best of n contiguous values. Independent lanes (lane j sees indices
// j, j + kLanes, ... in order) let the scan vectorize; the lanes are then merged, ties
// going to the lower (or, for select_last_index, the higher) index.
template <bool kMax, bool kLast, typename T>
int64_t arg_run(const T* x, int64_t n) {
  using C = compute_type_t<T>;
  constexpr int64_t kLanes = 16;
  C best = C(x[0]);
  int64_t index = 0;
  int64_t r = 1;
  if (n >= 2 * kLanes) {
    C lane_best[kLanes];
    int64_t lane_index[kLanes];
    for (int64_t j = 0; j < kLanes; ++j) lane_best[j] = C(x[j]), lane_index[j] = j;
    for (r = kLanes; r + kLanes <= n; r += kLanes) {
#pragma omp simd
      for (int64_t j = 0; j < kLanes; ++j) {
        const C v = C(x[r + j]);
        const bool take = better<kMax, kLast>(v, lane_best[j]);
        lane_best[j] = take ? v : lane_best[j];
        lane_index[j] = take ? r + j : lane_index[j];
      }
    }
    best = lane_best[0];
    index = lane_index[0];
    for (int64_t j = 1; j < kLanes; ++j) {
      const bool strictly = better<kMax, false>(lane_best[j], best);
      const bool same = lane_best[j] == best || (is_nan(lane_best[j]) && is_nan(best));
      const bool tie = same && (kLast ? lane_index[j] > index : lane_index[j] < index);
      if (strictly || tie) best = lane_best[j], index = lane_index[j];
    }
  }
  for (; r < n; ++r) {
    const C v = C(x[r]);
    if (better<kMax, kLast>(v, best)) best = v, index = r;
  }
  return index;
}

template <typename T, bool kMax, bool kLast>
void arg_reduce(const T* x, int64_t* out, const AxisView& l) {
  using C = compute_type_t<T>;
  if (l.inner == 1) {
    parallel_for(l.outer, std::max<int64_t>(1, kTaskElements / l.length), [&](int64_t begin, int64_t end) {
      for (int64_t o = begin; o < end; ++o) out[o] = arg_run<kMax, kLast>(x + o * l.length, l.length);
    });
    return;
  }
  const int64_t blocks = (l.inner + kColumnBlock - 1) / kColumnBlock;
  const int64_t grain = std::max<int64_t>(1, kTaskElements / (l.length * std::min(l.inner, kColumnBlock)));
  parallel_for(l.outer * blocks, grain, [&](int64_t begin, int64_t end) {
    C best[kColumnBlock];
    for (int64_t t = begin; t < end; ++t) {
      const int64_t o = t / blocks;
      const int64_t column = t % blocks * kColumnBlock;
      const int64_t width = std::min(kColumnBlock, l.inner - column);
      const T* slab = x + o * l.length * l.inner + column;
      int64_t* index = out + o * l.inner + column;
      for (int64_t j = 0; j < width; ++j) best[j] = C(slab[j]), index[j] = 0;
      for (int64_t r = 1; r < l.length; ++r) {
        const T* row = slab + r * l.inner;
        for (int64_t j = 0; j < width; ++j) {
          const C v = C(row[j]);
          if (better<kMax, kLast>(v, best[j])) best[j] = v, index[j] = r;
        }
      }
    }
  });
}

template <bool kMax>
KernelFactory arg_kernel() {
  return [](const KernelInfo& info) {
    const int64_t axis = info.int_attribute("axis", 0);
    const bool keepdims = info.bool_attribute("keepdims", true);
    const bool last = info.bool_attribute("select_last_index", false);
    return make_kernel([=](KernelContext& ctx) {
      const Tensor& x = ctx.input(0);
      if (x.rank() == 0) ctx.fail("input 'data' must have rank >= 1, got a scalar");
      const auto a = static_cast<size_t>(normalize_axis(ctx, axis, static_cast<int64_t>(x.rank())));
      if (x.shape()[a] == 0) {
        ctx.fail("cannot take the " + std::string(kMax ? "argmax" : "argmin") + " over axis " + std::to_string(axis) +
                 " of size 0 (input shape " + shape_string(x.shape()) + ")");
      }
      Shape shape = x.shape();
      if (keepdims) {
        shape[a] = 1;
      } else {
        shape.erase(shape.begin() + static_cast<std::ptrdiff_t>(a));
      }
      Tensor& out = ctx.allocate_output(0, DType::kInt64, shape);
      if (out.numel() == 0) return;
      const AxisView l = axis_view(x.shape(), a);
      dispatch<ONNXTRAIN_NUMERIC_TYPES>(x.dtype(), ctx.node().op_type, [&]<typename T>() {
        if (last) {
          arg_reduce<T, kMax, true>(x.data<T>(), out.data<int64_t>(), l);
        } else {
          arg_reduce<T, kMax, false>(x.data<T>(), out.data<int64_t>(), l);
        }
      });
    });
  };
}

const KernelRegistration kArgMax{"", "ArgMax", 1, kLatestOpset, arg_kernel<true>()};
const KernelRegistration kArgMin{"", "ArgMin", 1, kLatestOpset, arg_kernel<false>()};

// ---------------------------------------------------------------------------------------
// TopK

// A strict total order on (value, index): the wanted values first, nan counted as the
// largest value (numpy's sort order), ties broken by the lower index first.
template <typename C, bool kLargestFirst>
struct TopKOrder {
  static constexpr bool kLargest = kLargestFirst;
  bool operator()(const std::pair<C, int64_t>& a, const std::pair<C, int64_t>& b) const {
    const bool a_nan = is_nan(a.first);
    const bool b_nan = is_nan(b.first);
    if (a_nan || b_nan) {
      if (a_nan && b_nan) return a.second < b.second;
      return kLargest ? a_nan : b_nan;
    }
    if (a.first != b.first) return kLargest ? a.first > b.first : a.first < b.first;
    return a.second < b.second;
  }
};

// Puts the k first of the n items get(0), ..., get(n - 1) (in `order`) at the front of
// `items`, sorted. `items` has room for n.
template <typename Item, typename Order, typename Get>
void select_first(int64_t n, int64_t k, Get get, std::vector<Item>& items, const Order& order) {
  const auto front = items.begin();
  if (k * 4 <= n) {
    // Few wanted: a heap of the k best so far, its worst on top. Most items are rejected by
    // one comparison with the top, without being stored.
    for (int64_t r = 0; r < k; ++r) items[static_cast<size_t>(r)] = {get(r), r};
    std::make_heap(front, front + k, order);
    auto worst = items.front().first;
    for (int64_t r = k; r < n; ++r) {
      const auto v = get(r);
      // Quick rejection: no better than the worst kept, a tie included, as a later index
      // loses ties. (Comparisons with nan are false and fall through to `order`.)
      if (Order::kLargest ? v <= worst : v >= worst) continue;
      const Item item{v, r};
      if (!order(item, items.front())) continue;
      std::pop_heap(front, front + k, order);
      items[static_cast<size_t>(k - 1)] = item;
      std::push_heap(front, front + k, order);
      worst = items.front().first;
    }
    std::sort_heap(front, front + k, order);
    return;
  }
  // Many wanted: partition around the k-th in O(n), then sort the front.
  for (int64_t r = 0; r < n; ++r) items[static_cast<size_t>(r)] = {get(r), r};
  if (k < n) std::nth_element(front, front + k - 1, front + n, order);
  std::sort(front, front + k, order);
}

constexpr int64_t kTopKColumns = 16;  // strided slices gathered together, a cache line per row

template <typename T, bool kLargest>
void top_k(const T* x, T* values, int64_t* indices, const AxisView& l, int64_t k) {
  using C = compute_type_t<T>;
  using Item = std::pair<C, int64_t>;
  const TopKOrder<C, kLargest> order;
  // A task takes up to kTopKColumns neighbouring slices [o, :, i..i+w) and, when they are
  // strided, first copies them out row by row (reading x in order).
  const int64_t width = std::min(l.inner, kTopKColumns);
  const int64_t blocks = (l.inner + width - 1) / width;
  parallel_for(l.outer * blocks, std::max<int64_t>(1, kTaskElements / (l.length * width)),
               [&](int64_t begin, int64_t end) {
                 std::vector<C> block(static_cast<size_t>(l.inner == 1 ? 0 : l.length * width));
                 std::vector<Item> items(static_cast<size_t>(l.length));
                 for (int64_t t = begin; t < end; ++t) {
                   const int64_t o = t / blocks;
                   const int64_t column = t % blocks * width;
                   const int64_t w = std::min(width, l.inner - column);
                   const T* slab = x + o * l.length * l.inner + column;
                   if (l.inner > 1) {
                     // Row-major [axis, w]: one short contiguous copy per row. (Column-major would write
                     // w streams a power-of-two stride apart, which thrash the same cache sets.)
                     for (int64_t r = 0; r < l.length; ++r) {
                       for (int64_t j = 0; j < w; ++j) block[static_cast<size_t>(r * w + j)] = C(slab[r * l.inner + j]);
                     }
                   }
                   for (int64_t j = 0; j < w; ++j) {
                     if (l.inner == 1) {
                       select_first(
                           l.length, k, [slab](int64_t r) { return C(slab[r]); }, items, order);
                     } else {
                       const C* column_values = block.data() + j;
                       select_first(
                           l.length, k, [column_values, w](int64_t r) { return column_values[r * w]; }, items, order);
                     }
                     T* v = values + o * k * l.inner + column + j;
                     int64_t* idx = indices + o * k * l.inner + column + j;
                     for (int64_t r = 0; r < k; ++r) {
                       v[r * l.inner] = static_cast<T>(items[static_cast<size_t>(r)].first);
                       idx[r * l.inner] = items[static_cast<size_t>(r)].second;
                     }
                   }
                 }
               });
}

const KernelRegistration kTopK{
    "", "TopK", 1, kLatestOpset, {.host_inputs = {1}}, [](const KernelInfo& info) {
      const int64_t axis = info.int_attribute("axis", -1);
      // k is an attribute before opset 10 and input 'K' from then on; largest and sorted
      // exist from opset 11. Unsorted results may come in any order, so they come sorted.
      const bool k_from_input = info.opset() >= 10;
      const int64_t k_attribute = k_from_input ? 0 : info.int_attribute("k");
      const bool largest = info.opset() < 11 || info.bool_attribute("largest", true);
      return make_kernel([=](KernelContext& ctx) {
        const Tensor& x = ctx.input(0);
        if (x.rank() == 0) ctx.fail("input 'X' must have rank >= 1, got a scalar");
        const auto a = static_cast<size_t>(normalize_axis(ctx, axis, static_cast<int64_t>(x.rank())));
        const int64_t k = k_from_input ? single_integer(ctx, 1, "K") : k_attribute;
        if (k < 0 || k > x.shape()[a]) {
          ctx.fail("k = " + std::to_string(k) + " is out of range: expected 0 <= k <= " + std::to_string(x.shape()[a]) +
                   " (the size of axis " + std::to_string(axis) + " of input shape " + shape_string(x.shape()) + ")");
        }
        Shape shape = x.shape();
        shape[a] = k;
        Tensor& values = ctx.allocate_output(0, x.dtype(), shape);
        Tensor& indices = ctx.allocate_output(1, DType::kInt64, shape);
        if (values.numel() == 0) return;
        const AxisView l = axis_view(x.shape(), a);
        dispatch<ONNXTRAIN_NUMERIC_TYPES>(x.dtype(), "TopK", [&]<typename T>() {
          if (largest) {
            top_k<T, true>(x.data<T>(), values.data<T>(), indices.data<int64_t>(), l, k);
          } else {
            top_k<T, false>(x.data<T>(), values.data<T>(), indices.data<int64_t>(), l, k);
          }
        });
      });
    }};

// ---------------------------------------------------------------------------------------
// CumSum

// Running sums along the axis; `exclusive` writes the sum before adding the element,
// `reverse` runs from the end. Sums accumulate in the compute type (float for the
// 16-bit floats), in order, like onnxruntime.
template <typename T>
void cumulative_sum(const T* x, T* out, const AxisView& l, bool exclusive, bool reverse) {
  using C = compute_type_t<T>;
  if (l.inner == 1) {  // each run is contiguous
    parallel_for(l.outer, std::max<int64_t>(1, kTaskElements / l.length), [&](int64_t begin, int64_t end) {
      for (int64_t o = begin; o < end; ++o) {
        const T* src = x + o * l.length;
        T* dst = out + o * l.length;
        const int64_t first = reverse ? l.length - 1 : 0;
        const int64_t step = reverse ? -1 : 1;
        C acc = 0;
        for (int64_t r = 0, i = first; r < l.length; ++r, i += step) {
          const C v = C(src[i]);
          if (exclusive) {
            dst[i] = static_cast<T>(acc);
            acc += v;
          } else {
            acc += v;
            dst[i] = static_cast<T>(acc);
          }
        }
      }
    });
    return;
  }
  const int64_t blocks = (l.inner + kColumnBlock - 1) / kColumnBlock;
  const int64_t width_max = std::min(l.inner, kColumnBlock);
  parallel_for(l.outer * blocks, std::max<int64_t>(1, kTaskElements / (l.length * width_max)),
               [&](int64_t begin, int64_t end) {
                 C acc[kColumnBlock];
                 for (int64_t t = begin; t < end; ++t) {
                   const int64_t o = t / blocks;
                   const int64_t column = t % blocks * kColumnBlock;
                   const int64_t width = std::min(kColumnBlock, l.inner - column);
                   const int64_t base = o * l.length * l.inner + column;
                   std::fill(acc, acc + width, C(0));
                   for (int64_t step = 0; step < l.length; ++step) {
                     const int64_t r = reverse ? l.length - 1 - step : step;
                     const T* src = x + base + r * l.inner;
                     T* dst = out + base + r * l.inner;
                     // (src and dst may be the same buffer: each element is read before its
                     // own output is written, which holds for vectors too.)
                     if (exclusive) {
#pragma omp simd
                       for (int64_t j = 0; j < width; ++j) {
                         const C v = C(src[j]);
                         dst[j] = static_cast<T>(acc[j]);
                         acc[j] += v;
                       }
                     } else {
#pragma omp simd
                       for (int64_t j = 0; j < width; ++j) {
                         acc[j] += C(src[j]);
                         dst[j] = static_cast<T>(acc[j]);
                       }
                     }
                   }
                 }
               });
}

const KernelRegistration kCumSum{
    "", "CumSum", 11, kLatestOpset, [](const KernelInfo& info) {
      const bool exclusive = info.bool_attribute("exclusive", false);
      const bool reverse = info.bool_attribute("reverse", false);
      return make_kernel([=](KernelContext& ctx) {
        const Tensor& x = ctx.input(0);
        if (x.rank() == 0) ctx.fail("input 'x' must have rank >= 1, got a scalar");
        const auto a =
            static_cast<size_t>(normalize_axis(ctx, single_integer(ctx, 1, "axis"), static_cast<int64_t>(x.rank())));
        // In place is safe: each element is read just before its own output is written.
        Tensor& out = ctx.allocate_output_in_place(0, 0, x.dtype(), x.shape());
        if (out.numel() == 0) return;
        const AxisView l = axis_view(x.shape(), a);
        dispatch<float, double, Float16, BFloat16, int32_t, int64_t, uint32_t, uint64_t>(
            x.dtype(), "CumSum",
            [&]<typename T>() { cumulative_sum<T>(x.data<T>(), out.data<T>(), l, exclusive, reverse); });
      });
    }};

}  // namespace
}  // namespace onnxtrain
