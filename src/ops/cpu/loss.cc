// Classification losses: SoftmaxCrossEntropyLoss and NegativeLogLikelihoodLoss, and
// onnxruntime-training's SoftmaxCrossEntropyLossInternal (ignore_index as an input) with the
// gradients SoftmaxCrossEntropyLossGrad and SoftmaxCrossEntropyLossInternalGrad.
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
#include "ops/cpu/multiversion.h"
#include "ops/cpu/onednn.h"
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
// Samples [begin, end) of scores [N, C], whose classes are contiguous.
template <typename T>
ONNXTRAIN_MULTIVERSIONED [[gnu::flatten]] void log_sum_exp_rows(const T* x, int64_t classes, int64_t begin, int64_t end,
                                                                compute_type_t<T>* max, compute_type_t<T>* log_sum) {
  using C = compute_type_t<T>;
  for (int64_t n = begin; n < end; ++n) {
    const T* row = x + n * classes;
    C m = -std::numeric_limits<C>::infinity();
#pragma omp simd reduction(max : m)
    for (int64_t c = 0; c < classes; ++c) m = std::max(m, C(row[c]));
    // A fixed number of partial sums: every x86 level adds in the same order.
    const C sum = onednn::lane_sum<C>(classes, [&](int64_t c) { return vector_math::exp(C(row[c]) - m); });
    max[n] = m;
    log_sum[n] = std::log(sum);
  }
}

// Tasks [begin, end) of scores [N, C, D]: task t is a block of kColumnBlock positions d of
// one sample n (t = n * blocks + block), so that x is read in order.
template <typename T>
ONNXTRAIN_MULTIVERSIONED [[gnu::flatten]] void log_sum_exp_columns(const T* x, const LossShape& s, int64_t blocks,
                                                                   int64_t begin, int64_t end, compute_type_t<T>* max,
                                                                   compute_type_t<T>* log_sum) {
  using C = compute_type_t<T>;
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
}

template <typename T>
void log_sum_exp(const T* x, const LossShape& s, compute_type_t<T>* max, compute_type_t<T>* log_sum) {
  if (s.d == 1) {
    parallel_for(s.n, std::max<int64_t>(1, kTaskElements / s.classes),
                 [&](int64_t begin, int64_t end) { log_sum_exp_rows(x, s.classes, begin, end, max, log_sum); });
    return;
  }
  const int64_t blocks = (s.d + kColumnBlock - 1) / kColumnBlock;
  const int64_t width_max = std::min(s.d, kColumnBlock);
  parallel_for(s.n * blocks, std::max<int64_t>(1, kTaskElements / (s.classes * width_max + 1)),
               [&](int64_t begin, int64_t end) { log_sum_exp_columns(x, s, blocks, begin, end, max, log_sum); });
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

// ---- onnxruntime-training's versions ----

// ORT's ignore_index input: an int64 (or int32) scalar, absent when the input is.
std::optional<int64_t> ignore_index_input(KernelContext& ctx, size_t input) {
  if (!ctx.has_input(input)) return std::nullopt;
  const Tensor& t = ctx.input(input);
  if (t.numel() != 1 || (t.dtype() != DType::kInt64 && t.dtype() != DType::kInt32)) {
    ctx.fail("input " + std::to_string(input) + " (ignore_index) must be one int64 value, got " +
             std::string(dtype_name(t.dtype())) + shape_string(t.shape()));
  }
  return t.item_as_int64();
}

// com.microsoft::SoftmaxCrossEntropyLossInternal <reduction> (scores, labels, weights?,
// ignore_index?) => (output, log_prob): SoftmaxCrossEntropyLoss with ignore_index as an input.
const KernelRegistration kMicrosoftSoftmaxCrossEntropyLossInternal{
    "com.microsoft", "SoftmaxCrossEntropyLossInternal", 1, kLatestOpset, [](const KernelInfo& info) {
      const LossAttributes attributes = loss_attributes(info);
      return make_kernel([attributes](KernelContext& ctx) {
        LossAttributes a = attributes;
        a.ignore_index = ignore_index_input(ctx, 3);
        dispatch<ONNXTRAIN_FLOAT_TYPES>(ctx.input(0).dtype(), "SoftmaxCrossEntropyLossInternal",
                                        [&]<typename T>() { softmax_cross_entropy<T>(ctx, a); });
      });
    }};

// (softmax - onehot(target)) * w over the classes of one sample, from its log-probabilities
// `stride` elements apart: out[k * stride] = (exp(log_prob[k * stride]) - [k == target]) * w.
template <typename T>
ONNXTRAIN_MULTIVERSIONED [[gnu::flatten]] void softmax_minus_onehot(const T* log_prob, T* out, int64_t classes,
                                                                    int64_t stride, int64_t target,
                                                                    compute_type_t<T> w) {
  using C = compute_type_t<T>;
  for (int64_t k = 0; k < classes; ++k) {
    const C p = vector_math::exp(C(log_prob[k * stride]));
    out[k * stride] = static_cast<T>((k == target ? p - C(1) : p) * w);
  }
}

// The gradient of the softmax cross entropy with respect to the scores, from log_prob:
// (softmax - onehot(label)) * weight[label] * dY, dY one value or one per label; classes on
// axis 1; a label equal to ignore_index contributes nothing; "mean" divides by the summed
// weights of the other labels (their count without weights), as the loss does.
template <typename T, typename L>
void softmax_cross_entropy_grad(const Tensor& dy, const Tensor& log_prob, const Tensor& label, const Tensor* weight,
                                bool mean, std::optional<int64_t> ignore_index, Tensor& out) {
  using C = compute_type_t<T>;
  const int64_t n = log_prob.dim(0), classes = log_prob.dim(1);
  const int64_t inner = n && classes ? log_prob.numel() / (n * classes) : 0;
  const L* labels = label.data<L>();
  const auto label_weight = [&](int64_t at) -> C {
    const auto target = static_cast<int64_t>(labels[at]);
    if (ignore_index && target == *ignore_index) return C(0);
    return weight ? C(weight->data<T>()[target]) : C(1);
  };
  C total = 0;
  for (int64_t at = 0; at < label.numel(); ++at) total += label_weight(at);
  const C scale = mean && total != C(0) ? C(1) / total : C(1);
  const T* lp = log_prob.data<T>();
  const T* g = dy.data<T>();
  const bool per_label = dy.numel() != 1;
  T* o = out.data<T>();
  parallel_for(n, std::max<int64_t>(1, 8192 / std::max<int64_t>(classes * inner, 1)), [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; ++b) {
      for (int64_t i = 0; i < inner; ++i) {
        const int64_t at = b * inner + i;
        const C w = label_weight(at) * C(g[per_label ? at : 0]) * scale;
        const int64_t first = b * classes * inner + i;
        softmax_minus_onehot(lp + first, o + first, classes, inner, static_cast<int64_t>(labels[at]), w);
      }
    }
  });
}

// ORT's SoftmaxCrossEntropyLossGrad (dY, log_prob, label, weight?) <reduction, ignore_index>,
// and SoftmaxCrossEntropyLossInternalGrad (dY, log_prob, label, weight?, ignore_index?, bias?)
// <reduction>, which takes ignore_index as an input and adds bias (log_prob's shape) to the
// result (ORT fuses the Add that follows it).
KernelFactory ort_softmax_cross_entropy_grad(bool internal) {
  return [internal](const KernelInfo& info) {
    const std::string reduction = info.string_attribute("reduction", "mean");
    if (reduction != "mean" && reduction != "sum" && reduction != "none") {
      info.fail("reduction must be mean, sum or none, got '" + reduction + "'");
    }
    std::optional<int64_t> ignore_attribute;
    if (!internal && info.has_attribute("ignore_index")) ignore_attribute = info.int_attribute("ignore_index");
    return make_kernel([mean = reduction == "mean", ignore_attribute, internal](KernelContext& ctx) {
      const Tensor& dy = ctx.input(0);
      const Tensor& log_prob = ctx.input(1);
      const Tensor& label = ctx.input(2);
      const Tensor* weight = ctx.has_input(3) ? &ctx.input(3) : nullptr;
      const std::optional<int64_t> ignore_index = internal ? ignore_index_input(ctx, 4) : ignore_attribute;
      const Tensor* bias = internal && ctx.has_input(5) ? &ctx.input(5) : nullptr;
      if (log_prob.rank() < 2) ctx.fail("log_prob needs a class axis");
      const int64_t classes = log_prob.dim(1);
      if (label.numel() * classes != log_prob.numel()) ctx.fail("label must have the shape of log_prob without axis 1");
      if (dy.numel() != 1 && dy.numel() != label.numel()) ctx.fail("dY must hold one value or one per label");
      if (weight && (weight->numel() != classes || weight->dtype() != log_prob.dtype())) {
        ctx.fail("weight must hold one " + std::string(dtype_name(log_prob.dtype())) + " per class");
      }
      if (dy.dtype() != log_prob.dtype()) ctx.fail("dY and log_prob have different element types");
      if (bias && (bias->dtype() != log_prob.dtype() || bias->shape() != log_prob.shape())) {
        ctx.fail("bias is " + std::string(dtype_name(bias->dtype())) + shape_string(bias->shape()) + "; expected " +
                 std::string(dtype_name(log_prob.dtype())) + shape_string(log_prob.shape()) + " like log_prob");
      }
      Tensor& out = ctx.allocate_output(0, log_prob.dtype(), log_prob.shape());
      dispatch<float, double>(log_prob.dtype(), ctx.node().op_type, [&]<typename T>() {
        dispatch<int32_t, int64_t>(label.dtype(), "labels", [&]<typename L>() {
          for (int64_t at = 0; at < label.numel(); ++at) {
            const auto target = static_cast<int64_t>(label.data<L>()[at]);
            if ((!ignore_index || target != *ignore_index) && (target < 0 || target >= classes)) {
              ctx.fail("label " + std::to_string(target) + " is outside [0, " + std::to_string(classes) + ")");
            }
          }
          softmax_cross_entropy_grad<T, L>(dy, log_prob, label, weight, mean, ignore_index, out);
          if (bias == nullptr) return;
          T* o = out.data<T>();
          const T* b = bias->data<T>();
          for (int64_t i = 0; i < out.numel(); ++i) o[i] = static_cast<T>(o[i] + b[i]);
        });
      });
    });
  };
}

const KernelRegistration kMicrosoftSoftmaxCrossEntropyLossGrad{"com.microsoft", "SoftmaxCrossEntropyLossGrad", 1,
                                                               kLatestOpset, ort_softmax_cross_entropy_grad(false)};
const KernelRegistration kMicrosoftSoftmaxCrossEntropyLossInternalGrad{
    "com.microsoft", "SoftmaxCrossEntropyLossInternalGrad", 1, kLatestOpset, ort_softmax_cross_entropy_grad(true)};

// ---- SoftmaxCrossEntropyLossGrad: (softmax - onehot(label)) * g, classes on axis 1 ----
// g is dY (per label, or one value for all) divided by the number of labels when `mean`.

template <typename T, typename L>
void softmax_cross_entropy_grad(const Tensor& dy, const Tensor& log_prob, const Tensor& label, bool mean, Tensor& out) {
  using C = compute_type_t<T>;
  const int64_t n = log_prob.dim(0), classes = log_prob.dim(1);
  const int64_t inner = n && classes ? log_prob.numel() / (n * classes) : 0;
  const T* lp = log_prob.data<T>();
  const T* g = dy.data<T>();
  const L* labels = label.data<L>();
  const bool per_label = dy.numel() != 1;
  const C scale = mean && label.numel() > 0 ? C(1) / static_cast<C>(label.numel()) : C(1);
  T* o = out.data<T>();
  parallel_for(n, std::max<int64_t>(1, 8192 / std::max<int64_t>(classes * inner, 1)), [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; ++b) {
      for (int64_t i = 0; i < inner; ++i) {
        const int64_t at = b * inner + i;
        int64_t target = static_cast<int64_t>(labels[at]);
        if (target < 0) target += classes;  // OneHot counts negative labels from the end
        const int64_t first = b * classes * inner + i;
        softmax_minus_onehot(lp + first, o + first, classes, inner, target, C(g[per_label ? at : 0]) * scale);
      }
    }
  });
}

const KernelRegistration kSoftmaxCrossEntropyLossGrad{
    "org.onnxtrain", "SoftmaxCrossEntropyLossGrad", 1, kLatestOpset, [](const KernelInfo& info) {
      const bool mean = info.int_attribute("mean", 0) != 0;
      return make_kernel([mean](KernelContext& ctx) {
        const Tensor& dy = ctx.input(0);
        const Tensor& log_prob = ctx.input(1);
        const Tensor& label = ctx.input(2);
        if (log_prob.rank() < 2) ctx.fail("log_prob needs a class axis");
        const int64_t n = log_prob.dim(0), classes = log_prob.dim(1);
        const int64_t labels = n && classes ? log_prob.numel() / classes : 0;
        if (label.numel() != labels) ctx.fail("label must have the shape of log_prob without its class axis");
        if (dy.numel() != 1 && dy.shape() != label.shape()) {
          ctx.fail("dY is " + shape_string(dy.shape()) + ", expected the labels' shape " + shape_string(label.shape()) +
                   " or one value");
        }
        if (dy.dtype() != log_prob.dtype()) ctx.fail("dY and log_prob have different element types");
        Tensor& out = ctx.allocate_output(0, log_prob.dtype(), log_prob.shape());
        dispatch<ONNXTRAIN_FLOAT_TYPES>(log_prob.dtype(), "SoftmaxCrossEntropyLossGrad", [&]<typename T>() {
          dispatch<int32_t, int64_t>(label.dtype(), "SoftmaxCrossEntropyLossGrad labels", [&]<typename L>() {
            softmax_cross_entropy_grad<T, L>(dy, log_prob, label, mean, out);
          });
        });
      });
    }};

}  // namespace
}  // namespace onnxtrain
