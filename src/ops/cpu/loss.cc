// Classification losses: SoftmaxCrossEntropyLoss and NegativeLogLikelihoodLoss.
//
// Both take scores [N, C] or [N, C, d1, ..., dk], integer targets [N] or [N, d1, ..., dk]
// and optional class weights [C]; both are viewed here as [N, C, D] with D = d1 * ... * dk
// (D = 1 without extra dimensions), so that class c of sample (n, d) sits at
// x[(n * C + c) * D + d]. The loss of one sample is -weight[t] * log_prob[t] with t its
// target; a sample whose target equals ignore_index contributes nothing and weighs 0.
// Reductions: "none" keeps the per-sample losses, "sum" adds them, "mean" divides the sum
// by the total weight of the samples that are not ignored (their count without weights).
#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "core/dispatch.h"
#include "core/parallel.h"
#include "ops/cpu/vector_math.h"
#include "ops/kernel_registry.h"

namespace onnxtrain {
namespace {

constexpr int64_t kColumnBlock = 256;
constexpr int64_t kTaskElements = 16384;

enum class Reduction { kNone, kSum, kMean };

struct LossAttributes {
  Reduction reduction = Reduction::kMean;
  std::optional<int64_t> ignore_index;
};

LossAttributes loss_attributes(const KernelInfo& info) {
  LossAttributes a;
  const std::string reduction = info.string_attribute("reduction", "mean");
  if (reduction == "none") {
    a.reduction = Reduction::kNone;
  } else if (reduction == "sum") {
    a.reduction = Reduction::kSum;
  } else if (reduction == "mean") {
    a.reduction = Reduction::kMean;
  } else {
    info.fail("attribute 'reduction' is '" + reduction + "'; expected 'none', 'sum' or 'mean'");
  }
  if (info.has_attribute("ignore_index")) a.ignore_index = info.int_attribute("ignore_index");
  return a;
}

struct LossShape {
  int64_t n = 0;
  int64_t classes = 0;
  int64_t d = 1;
};

// Checks scores, target and weight against each other.
LossShape check_inputs(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Tensor& target = ctx.input(1);
  if (x.rank() < 2)
    ctx.fail("input 'scores' must have shape [N, C] or [N, C, d1, ...], got " + shape_string(x.shape()));
  Shape expected{x.shape()[0]};
  expected.insert(expected.end(), x.shape().begin() + 2, x.shape().end());
  if (target.shape() != expected) {
    ctx.fail("input 'labels' has shape " + shape_string(target.shape()) + "; expected " + shape_string(expected) +
             " for scores of shape " + shape_string(x.shape()));
  }
  if (target.dtype() != DType::kInt32 && target.dtype() != DType::kInt64) {
    ctx.fail("input 'labels' must be int32 or int64, got " + std::string(dtype_name(target.dtype())));
  }
  LossShape s{x.shape()[0], x.shape()[1], 1};
  for (size_t k = 2; k < x.rank(); ++k) s.d *= x.shape()[k];
  if (ctx.has_input(2)) {
    const Tensor& w = ctx.input(2);
    if (w.dtype() != x.dtype() || w.shape() != Shape{s.classes}) {
      ctx.fail("input 'weights' is " + std::string(dtype_name(w.dtype())) + " of shape " + shape_string(w.shape()) +
               "; expected " + std::string(dtype_name(x.dtype())) + " of shape [" + std::to_string(s.classes) + "]");
    }
  }
  return s;
}

// The targets as int64, each either ignore_index or a class in [0, C); checked before any
// parallel work so that the error is thrown on this thread.
template <typename I>
std::vector<int64_t> checked_targets(KernelContext& ctx, const Tensor& target, int64_t classes,
                                     std::optional<int64_t> ignore_index) {
  const I* t = target.data<I>();
  std::vector<int64_t> out(static_cast<size_t>(target.numel()));
  for (size_t i = 0; i < out.size(); ++i) {
    const auto v = static_cast<int64_t>(t[i]);
    if ((v < 0 || v >= classes) && v != ignore_index) {
      ctx.fail("target value " + std::to_string(v) + " at flat position " + std::to_string(i) +
               " of 'labels' is out of range: expected a class in [0, " + std::to_string(classes) + ")" +
               (ignore_index ? " or ignore_index " + std::to_string(*ignore_index) : std::string()));
    }
    out[i] = v;
  }
  return out;
}

std::vector<int64_t> read_targets(KernelContext& ctx, int64_t classes, std::optional<int64_t> ignore_index) {
  const Tensor& target = ctx.input(1);
  if (target.dtype() == DType::kInt32) return checked_targets<int32_t>(ctx, target, classes, ignore_index);
  return checked_targets<int64_t>(ctx, target, classes, ignore_index);
}

// The log-softmax normalizer of each sample k = n * D + d, in two parts so that
// log_prob = (x - max) - log_sum loses no precision to cancellation (vector_math::exp
// lets the loops over the classes vectorize):
//   max[k] = max_c x[n, c, d],  log_sum[k] = log(sum_c exp(x[n, c, d] - max[k])).
template <typename T>
void log_sum_exp(const T* x, const LossShape& s, compute_type_t<T>* max, compute_type_t<T>* log_sum) {
  using C = compute_type_t<T>;
  if (s.d == 1) {  // [N, C]: each sample's classes are contiguous
    parallel_for(s.n, std::max<int64_t>(1, kTaskElements / s.classes), [&](int64_t begin, int64_t end) {
      for (int64_t n = begin; n < end; ++n) {
        const T* row = x + n * s.classes;
        C m = -std::numeric_limits<C>::infinity();
#pragma omp simd reduction(max : m)
        for (int64_t c = 0; c < s.classes; ++c) m = std::max(m, C(row[c]));
        C sum = 0;
#pragma omp simd reduction(+ : sum)
        for (int64_t c = 0; c < s.classes; ++c) sum += vector_math::exp(C(row[c]) - m);
        max[n] = m;
        log_sum[n] = std::log(sum);
      }
    });
    return;
  }
  // [N, C, D]: a block of positions d at a time, so that x is read in order.
  const int64_t blocks = (s.d + kColumnBlock - 1) / kColumnBlock;
  const int64_t width_max = std::min(s.d, kColumnBlock);
  parallel_for(s.n * blocks, std::max<int64_t>(1, kTaskElements / (s.classes * width_max + 1)),
               [&](int64_t begin, int64_t end) {
                 C m[kColumnBlock];
                 C sum[kColumnBlock];
                 for (int64_t t = begin; t < end; ++t) {
                   const int64_t n = t / blocks;
                   const int64_t column = t % blocks * kColumnBlock;
                   const int64_t width = std::min(kColumnBlock, s.d - column);
                   const T* slab = x + n * s.classes * s.d + column;
                   std::fill(m, m + width, -std::numeric_limits<C>::infinity());
                   std::fill(sum, sum + width, C(0));
                   for (int64_t c = 0; c < s.classes; ++c) {
                     const T* row = slab + c * s.d;
#pragma omp simd
                     for (int64_t j = 0; j < width; ++j) m[j] = std::max(m[j], C(row[j]));
                   }
                   for (int64_t c = 0; c < s.classes; ++c) {
                     const T* row = slab + c * s.d;
#pragma omp simd
                     for (int64_t j = 0; j < width; ++j) sum[j] += vector_math::exp(C(row[j]) - m[j]);
                   }
                   std::copy(m, m + width, max + n * s.d + column);
                   for (int64_t j = 0; j < width; ++j) log_sum[n * s.d + column + j] = std::log(sum[j]);
                 }
               });
}

// log_prob = (x - max) - log_sum, broadcast over the classes.
template <typename T>
void write_log_prob(const T* x, const compute_type_t<T>* max, const compute_type_t<T>* log_sum, const LossShape& s,
                    T* log_prob) {
  using C = compute_type_t<T>;
  parallel_for(s.n, std::max<int64_t>(1, kTaskElements / (s.classes * s.d)), [&](int64_t begin, int64_t end) {
    for (int64_t n = begin; n < end; ++n) {
      const C* m = max + n * s.d;
      const C* l = log_sum + n * s.d;
      if (s.d == 1) {  // [N, C]: one normalizer per row
        const T* in = x + n * s.classes;
        T* out = log_prob + n * s.classes;
#pragma omp simd
        for (int64_t c = 0; c < s.classes; ++c) out[c] = static_cast<T>((C(in[c]) - m[0]) - l[0]);
        continue;
      }
      for (int64_t c = 0; c < s.classes; ++c) {
        const T* in = x + (n * s.classes + c) * s.d;
        T* out = log_prob + (n * s.classes + c) * s.d;
#pragma omp simd
        for (int64_t j = 0; j < s.d; ++j) out[j] = static_cast<T>((C(in[j]) - m[j]) - l[j]);
      }
    }
  });
}

// Per-sample losses -weight[t] * log_prob[t] (`max` and `log_sum` null: the scores are
// log-probabilities already, as for NegativeLogLikelihoodLoss), reduced as asked into
// output 0.
template <typename T>
void reduce_loss(KernelContext& ctx, const LossAttributes& a, const LossShape& s, const std::vector<int64_t>& targets,
                 const compute_type_t<T>* max, const compute_type_t<T>* log_sum) {
  using C = compute_type_t<T>;
  const T* x = ctx.input(0).data<T>();
  const T* weight = ctx.has_input(2) ? ctx.input(2).data<T>() : nullptr;
  const int64_t samples = s.n * s.d;
  auto sample = [&](int64_t k, C& loss, C& w) {
    const int64_t t = targets[static_cast<size_t>(k)];
    if (t == a.ignore_index) {
      loss = C(0), w = C(0);
      return;
    }
    const int64_t n = k / s.d;
    const int64_t d = k % s.d;
    C log_prob = C(x[(n * s.classes + t) * s.d + d]);
    if (max) log_prob = (log_prob - max[k]) - log_sum[k];
    w = weight ? C(weight[t]) : C(1);
    loss = -w * log_prob;
  };
  if (a.reduction == Reduction::kNone) {
    Shape shape = ctx.input(1).shape();
    T* out = ctx.allocate_output(0, ctx.input(0).dtype(), shape).data<T>();
    parallel_for(samples, kTaskElements, [&](int64_t begin, int64_t end) {
      for (int64_t k = begin; k < end; ++k) {
        C loss, w;
        sample(k, loss, w);
        out[k] = static_cast<T>(loss);
      }
    });
    return;
  }
  // Sums in double, in order: the result does not depend on the thread count.
  double total = 0;
  double total_weight = 0;
  for (int64_t k = 0; k < samples; ++k) {
    C loss, w;
    sample(k, loss, w);
    total += static_cast<double>(loss);
    total_weight += static_cast<double>(w);
  }
  const double result = a.reduction == Reduction::kSum ? total : total / total_weight;
  ctx.allocate_output(0, ctx.input(0).dtype(), {}).data<T>()[0] = static_cast<T>(static_cast<C>(result));
}

template <typename T>
void softmax_cross_entropy(KernelContext& ctx, const LossAttributes& a) {
  const LossShape s = check_inputs(ctx);
  const std::vector<int64_t> targets = read_targets(ctx, s.classes, a.ignore_index);
  const T* x = ctx.input(0).data<T>();
  const auto samples = static_cast<size_t>(s.n * s.d);
  std::vector<compute_type_t<T>> max(samples), log_sum(samples);
  if (s.classes > 0) log_sum_exp(x, s, max.data(), log_sum.data());  // (no classes: every target is ignored)
  if (ctx.has_output(1)) {
    T* log_prob = ctx.allocate_output(1, ctx.input(0).dtype(), ctx.input(0).shape()).data<T>();
    write_log_prob(x, max.data(), log_sum.data(), s, log_prob);
  }
  reduce_loss<T>(ctx, a, s, targets, max.data(), log_sum.data());
}

template <typename T>
void negative_log_likelihood(KernelContext& ctx, const LossAttributes& a) {
  const LossShape s = check_inputs(ctx);
  const std::vector<int64_t> targets = read_targets(ctx, s.classes, a.ignore_index);
  reduce_loss<T>(ctx, a, s, targets, nullptr, nullptr);
}

const KernelRegistration kSoftmaxCrossEntropyLoss{
    "", "SoftmaxCrossEntropyLoss", 12, kLatestOpset, [](const KernelInfo& info) {
      const LossAttributes a = loss_attributes(info);
      return make_kernel([a](KernelContext& ctx) {
        dispatch<ONNXTRAIN_FLOAT_TYPES>(ctx.input(0).dtype(), "SoftmaxCrossEntropyLoss",
                                        [&]<typename T>() { softmax_cross_entropy<T>(ctx, a); });
      });
    }};

const KernelRegistration kNegativeLogLikelihoodLoss{
    "", "NegativeLogLikelihoodLoss", 12, kLatestOpset, [](const KernelInfo& info) {
      const LossAttributes a = loss_attributes(info);
      return make_kernel([a](KernelContext& ctx) {
        dispatch<ONNXTRAIN_FLOAT_TYPES>(ctx.input(0).dtype(), "NegativeLogLikelihoodLoss",
                                        [&]<typename T>() { negative_log_likelihood<T>(ctx, a); });
      });
    }};

}  // namespace
}  // namespace onnxtrain
