// Unique: the distinct elements of X (flattened), or the distinct slices along `axis`,
// sorted ascending (slices lexicographically, as numpy.unique) or in order of first
// occurrence (sorted = 0); with each one's first index, the index of every element's (or
// slice's) value among them (inverse_indices) and how often each occurs.
#include <algorithm>
#include <numeric>
#include <string>
#include <vector>

#include "core/dispatch.h"
#include "ops/cpu/axis.h"
#include "ops/kernel_registry.h"

namespace onnxtrain {
namespace {

struct UniqueResult {
  std::vector<int64_t> first;    // per unique value: the index of its first row
  std::vector<int64_t> inverse;  // per row: its unique value
  std::vector<int64_t> counts;
};

// Rows r of `rows` rows: elements (o * rows + r) * inner + k for o < outer, k < inner.
template <typename T>
UniqueResult unique_rows(const T* x, int64_t outer, int64_t rows, int64_t inner, bool sorted) {
  auto less = [&](int64_t a, int64_t b) {
    for (int64_t o = 0; o < outer; ++o) {
      const T* ra = x + (o * rows + a) * inner;
      const T* rb = x + (o * rows + b) * inner;
      for (int64_t k = 0; k < inner; ++k) {
        if (ra[k] < rb[k]) return true;
        if (rb[k] < ra[k]) return false;
      }
    }
    return false;
  };
  std::vector<int64_t> order(static_cast<size_t>(rows));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), less);
  // Groups of equal rows in sorted order; each group's first row is its first occurrence.
  std::vector<int64_t> group_of(static_cast<size_t>(rows)), group_first, group_count;
  for (size_t i = 0; i < order.size(); ++i) {
    if (i == 0 || less(order[i - 1], order[i])) {
      group_first.push_back(order[i]);
      group_count.push_back(0);
    }
    group_of[static_cast<size_t>(order[i])] = static_cast<int64_t>(group_first.size()) - 1;
    ++group_count.back();
  }
  std::vector<int64_t> rank(group_first.size());  // output position of each group
  std::iota(rank.begin(), rank.end(), 0);
  if (!sorted) {
    std::vector<int64_t> by_first(group_first.size());
    std::iota(by_first.begin(), by_first.end(), 0);
    std::sort(by_first.begin(), by_first.end(), [&](int64_t a, int64_t b) {
      return group_first[static_cast<size_t>(a)] < group_first[static_cast<size_t>(b)];
    });
    for (size_t i = 0; i < by_first.size(); ++i) rank[static_cast<size_t>(by_first[i])] = static_cast<int64_t>(i);
  }
  UniqueResult result;
  result.first.resize(group_first.size());
  result.counts.resize(group_first.size());
  for (size_t g = 0; g < group_first.size(); ++g) {
    result.first[static_cast<size_t>(rank[g])] = group_first[g];
    result.counts[static_cast<size_t>(rank[g])] = group_count[g];
  }
  result.inverse.resize(static_cast<size_t>(rows));
  for (size_t r = 0; r < result.inverse.size(); ++r) result.inverse[r] = rank[static_cast<size_t>(group_of[r])];
  return result;
}

void write_ints(KernelContext& ctx, size_t output, const std::vector<int64_t>& values) {
  if (!ctx.has_output(output)) return;
  Tensor& t = ctx.allocate_output(output, DType::kInt64, {static_cast<int64_t>(values.size())});
  std::copy(values.begin(), values.end(), t.data<int64_t>());
}

const KernelRegistration kUnique{"", "Unique", 11, kLatestOpset, [](const KernelInfo& info) {
                                   const bool sorted = info.int_attribute("sorted", 1) != 0;
                                   const bool has_axis = info.node().attribute("axis") != nullptr;
                                   const int64_t axis_attribute = has_axis ? info.int_attribute("axis") : 0;
                                   return make_kernel([sorted, has_axis, axis_attribute](KernelContext& ctx) {
                                     const Tensor& x = ctx.input(0);
                                     int64_t outer = 1, rows = x.numel(), inner = 1;
                                     int64_t axis = 0;
                                     if (has_axis) {
                                       axis = normalize_axis(ctx, axis_attribute, static_cast<int64_t>(x.rank()));
                                       const AxisView view = axis_view(x.shape(), static_cast<size_t>(axis));
                                       outer = view.outer;
                                       rows = view.length;
                                       inner = view.inner;
                                     }
                                     dispatch<ONNXTRAIN_NUMERIC_TYPES, bool>(x.dtype(), "Unique", [&]<typename T>() {
                                       const T* px = x.data<T>();
                                       const UniqueResult u = unique_rows<T>(px, outer, rows, inner, sorted);
                                       const int64_t count = static_cast<int64_t>(u.first.size());
                                       Shape out_shape{count};
                                       if (has_axis) {
                                         out_shape = x.shape();
                                         out_shape[static_cast<size_t>(axis)] = count;
                                       }
                                       Tensor& y = ctx.allocate_output(0, x.dtype(), out_shape);
                                       T* py = y.data<T>();
                                       for (int64_t o = 0; o < outer; ++o) {
                                         for (int64_t i = 0; i < count; ++i) {
                                           const T* from = px + (o * rows + u.first[static_cast<size_t>(i)]) * inner;
                                           std::copy(from, from + inner, py + (o * count + i) * inner);
                                         }
                                       }
                                       write_ints(ctx, 1, u.first);
                                       write_ints(ctx, 2, u.inverse);
                                       write_ints(ctx, 3, u.counts);
                                     });
                                   });
                                 }};

}  // namespace
}  // namespace onnxtrain
