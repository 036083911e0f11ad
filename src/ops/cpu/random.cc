// Random generators: RandomUniform, RandomNormal, RandomUniformLike, RandomNormalLike,
// Bernoulli and Multinomial.
//
// ONNX does not specify the generator. Here it is counter-based, like Dropout's
// (activation.cc): each run of a kernel takes a stream from splitmix64 of (seed, run
// number), and element i's draw is splitmix64's i-th output of that stream, so a result
// does not depend on how the work is split across threads. With the `seed` attribute the
// sequence of outputs a session draws, run after run, is reproducible; without it every
// kernel seeds itself from std::random_device.
#include <atomic>
#include <bit>
#include <cmath>
#include <memory>
#include <numbers>
#include <random>

#include "core/dispatch.h"
#include "core/parallel.h"
#include "ops/kernel_registry.h"

namespace onnxtrain {
namespace {

constexpr uint64_t kGoldenGamma = 0x9e3779b97f4a7c15ull;
constexpr int64_t kGrain = 16384;

uint64_t splitmix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Draw i of a stream as a double in [0, 1) with 53 random bits.
double uniform01(uint64_t stream, uint64_t i) {
  return static_cast<double>(splitmix(stream + kGoldenGamma * (i + 1)) >> 11) * 0x1p-53;
}

// Element i's standard normal value (Box-Muller on draws 2i and 2i + 1).
double standard_normal(uint64_t stream, uint64_t i) {
  const double u1 = 1.0 - uniform01(stream, 2 * i);  // (0, 1]: log stays finite
  const double u2 = uniform01(stream, 2 * i + 1);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

// The seed of a kernel and the count of its runs.
class RandomSource {
 public:
  explicit RandomSource(const KernelInfo& info) {
    if (info.has_attribute("seed")) {
      seed_ = std::bit_cast<uint32_t>(info.float_attribute("seed"));
    } else {
      std::random_device device;
      seed_ = (static_cast<uint64_t>(device()) << 32) ^ device();
    }
  }
  // A fresh stream for one run.
  uint64_t next_stream() { return splitmix(seed_ + kGoldenGamma * (runs_.fetch_add(1) + 1)); }

 private:
  uint64_t seed_ = 0;
  std::atomic<uint64_t> runs_{0};
};

template <typename T>
T from_double(double v) {
  if constexpr (std::is_same_v<T, bool>) {
    return v != 0.0;
  } else if constexpr (std::is_integral_v<T>) {
    return static_cast<T>(v);
  } else {
    return static_cast<T>(static_cast<compute_type_t<T>>(v));
  }
}

// Fills `out` with value(stream, i) for every element.
template <typename F>
void fill(Tensor& out, std::string_view op, uint64_t stream, F value) {
  dispatch<ONNXTRAIN_FLOAT_TYPES>(out.dtype(), op, [&]<typename T>() {
    T* y = out.data<T>();
    parallel_for(out.numel(), kGrain, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) y[i] = from_double<T>(value(stream, static_cast<uint64_t>(i)));
    });
  });
}

enum class Distribution { kUniform, kNormal };

// RandomUniform / RandomNormal (shape from the attribute) and their *Like forms (the shape
// and, unless `dtype` says otherwise, the element type of the input).
KernelFactory distribution_factory(Distribution kind, bool like) {
  return [kind, like](const KernelInfo& info) {
    const bool uniform = kind == Distribution::kUniform;
    // low and high, or mean and scale.
    const double a = info.float_attribute(uniform ? "low" : "mean", 0.0f);
    const double b = info.float_attribute(uniform ? "high" : "scale", 1.0f);
    const std::optional<DType> dtype =
        info.has_attribute("dtype") || !like
            ? std::optional(dtype_from_onnx(static_cast<int32_t>(info.int_attribute("dtype", 1))))
            : std::nullopt;
    if (dtype && !is_floating(*dtype)) {
      info.fail("dtype " + std::string(dtype_name(*dtype)) + " is not a floating-point type");
    }
    const Shape shape = like ? Shape{} : info.ints_attribute("shape");
    for (int64_t d : shape) {
      if (d < 0) info.fail("shape " + shape_string(shape) + " has a negative dimension");
    }
    auto source = std::make_shared<RandomSource>(info);
    return make_kernel([=](KernelContext& ctx) {
      const DType out_dtype = dtype ? *dtype : ctx.input(0).dtype();
      Tensor& y = ctx.allocate_output(0, out_dtype, like ? ctx.input(0).shape() : shape);
      const uint64_t stream = source->next_stream();
      if (y.numel() == 0) return;
      const std::string& op = ctx.node().op_type;
      if (uniform) {
        fill(y, op, stream, [a, b](uint64_t s, uint64_t i) { return a + (b - a) * uniform01(s, i); });
      } else {
        fill(y, op, stream, [a, b](uint64_t s, uint64_t i) { return a + b * standard_normal(s, i); });
      }
    });
  };
}

const KernelRegistration kRandomUniform{"", "RandomUniform", 1, kLatestOpset,
                                        distribution_factory(Distribution::kUniform, false)};
const KernelRegistration kRandomNormal{"", "RandomNormal", 1, kLatestOpset,
                                       distribution_factory(Distribution::kNormal, false)};
const KernelRegistration kRandomUniformLike{"", "RandomUniformLike", 1, kLatestOpset,
                                            distribution_factory(Distribution::kUniform, true)};
const KernelRegistration kRandomNormalLike{"", "RandomNormalLike", 1, kLatestOpset,
                                           distribution_factory(Distribution::kNormal, true)};

// Bernoulli (p) => 1 with probability p[i], else 0, of `dtype` (default: p's type).
const KernelRegistration kBernoulli{
    "", "Bernoulli", 15, kLatestOpset, [](const KernelInfo& info) {
      const std::optional<DType> dtype =
          info.has_attribute("dtype")
              ? std::optional(dtype_from_onnx(static_cast<int32_t>(info.int_attribute("dtype"))))
              : std::nullopt;
      auto source = std::make_shared<RandomSource>(info);
      return make_kernel([=](KernelContext& ctx) {
        const Tensor& p = ctx.input(0);
        Tensor& y = ctx.allocate_output(0, dtype ? *dtype : p.dtype(), p.shape());
        const uint64_t stream = source->next_stream();
        if (y.numel() == 0) return;
        dispatch<ONNXTRAIN_FLOAT_TYPES>(p.dtype(), "Bernoulli", [&]<typename P>() {
          dispatch<ONNXTRAIN_NUMERIC_TYPES, bool>(y.dtype(), "Bernoulli output", [&]<typename T>() {
            const P* pp = p.data<P>();
            T* out = y.data<T>();
            parallel_for(y.numel(), kGrain, [&](int64_t begin, int64_t end) {
              for (int64_t i = begin; i < end; ++i) {
                const double pi = static_cast<double>(static_cast<compute_type_t<P>>(pp[i]));
                const bool one = uniform01(stream, static_cast<uint64_t>(i)) < pi;
                out[i] = from_double<T>(one ? 1.0 : 0.0);
              }
            });
          });
        });
      });
    }};

// Multinomial (input [batch, classes] of unnormalized log-probabilities) =>
// [batch, sample_size] class indices of `dtype` (int32 or int64, default int32).
template <typename P, typename I>
void sample_classes(const KernelContext& ctx, const P* logits, I* out, int64_t batch, int64_t classes, int64_t samples,
                    uint64_t stream) {
  // An error cannot leave an OpenMP region: the workers note a bad row, the caller fails.
  std::atomic<int64_t> bad_row{-1};
  parallel_for(batch, 1, [&](int64_t begin, int64_t end) {
    std::vector<double> cumulative(static_cast<size_t>(classes));
    for (int64_t b = begin; b < end; ++b) {
      const P* row = logits + b * classes;
      double top = -INFINITY;
      for (int64_t c = 0; c < classes; ++c) top = std::max(top, static_cast<double>(compute_type_t<P>(row[c])));
      double total = 0;
      for (int64_t c = 0; c < classes; ++c) {
        total += std::exp(static_cast<double>(compute_type_t<P>(row[c])) - top);
        cumulative[static_cast<size_t>(c)] = total;
      }
      if (!std::isfinite(total)) {
        bad_row.store(b);
        continue;
      }
      for (int64_t s = 0; s < samples; ++s) {
        const double u = uniform01(stream, static_cast<uint64_t>(b * samples + s)) * total;
        const auto at = std::upper_bound(cumulative.begin(), cumulative.end(), u) - cumulative.begin();
        out[b * samples + s] = static_cast<I>(std::min<int64_t>(at, classes - 1));
      }
    }
  });
  if (const int64_t b = bad_row.load(); b >= 0) {
    ctx.fail("row " + std::to_string(b) + " of the input has no finite log-probabilities to sample from");
  }
}

const KernelRegistration kMultinomial{
    "", "Multinomial", 7, kLatestOpset, [](const KernelInfo& info) {
      const DType dtype = dtype_from_onnx(static_cast<int32_t>(info.int_attribute("dtype", 6)));
      if (dtype != DType::kInt32 && dtype != DType::kInt64) {
        info.fail("dtype " + std::string(dtype_name(dtype)) + " is not int32 or int64");
      }
      const int64_t samples = info.int_attribute("sample_size", 1);
      if (samples < 1) info.fail("sample_size is " + std::to_string(samples) + ", expected 1 or more");
      auto source = std::make_shared<RandomSource>(info);
      return make_kernel([=](KernelContext& ctx) {
        const Tensor& x = ctx.input(0);
        if (x.rank() != 2) ctx.fail("input must be [batch_size, class_size], got " + shape_string(x.shape()));
        if (x.dim(1) < 1) ctx.fail("input has no classes: " + shape_string(x.shape()));
        Tensor& y = ctx.allocate_output(0, dtype, {x.dim(0), samples});
        const uint64_t stream = source->next_stream();
        dispatch<ONNXTRAIN_FLOAT_TYPES>(x.dtype(), "Multinomial", [&]<typename P>() {
          dispatch<int32_t, int64_t>(dtype, "Multinomial output", [&]<typename I>() {
            sample_classes<P, I>(ctx, x.data<P>(), y.data<I>(), x.dim(0), x.dim(1), samples, stream);
          });
        });
      });
    }};

}  // namespace
}  // namespace onnxtrain
