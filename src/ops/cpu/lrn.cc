// LRN, local response normalization across channels (AlexNet, Inception v1):
//   y = x / (bias + alpha / size * sum of x^2 over channels [c - floor((size-1)/2),
//                                                          c + ceil((size-1)/2)])^beta
// on X [N, C, spatial...]. Each (sample, channel) is one task: it sums its window of
// planes position by position, so that every loop reads contiguous memory.
#include <cmath>

#include "core/dispatch.h"
#include "core/parallel.h"
#include "ops/kernel_registry.h"

namespace onnxtrain {
namespace {

struct LrnParams {
  float alpha = 1e-4f, beta = 0.75f, bias = 1.0f;
  int64_t size = 0;
};

// Channel c of one sample (`channels` planes of `inner` values); A accumulates (float or
// double) into `sums`, one per position.
template <typename T, typename A>
void lrn_channel(const T* x, T* y, int64_t c, int64_t channels, int64_t inner, const LrnParams& p,
                 std::vector<A>& sums) {
  const int64_t before = (p.size - 1) / 2, after = p.size - 1 - before;
  const A scale = static_cast<A>(p.alpha) / static_cast<A>(p.size);
  const int64_t lo = std::max<int64_t>(0, c - before), hi = std::min(channels - 1, c + after);
  std::fill(sums.begin(), sums.end(), A(0));
  for (int64_t k = lo; k <= hi; ++k) {
    const T* plane = x + k * inner;
    for (int64_t i = 0; i < inner; ++i) {
      const A v = static_cast<A>(static_cast<compute_type_t<T>>(plane[i]));
      sums[static_cast<size_t>(i)] += v * v;
    }
  }
  const T* xc = x + c * inner;
  T* yc = y + c * inner;
  for (int64_t i = 0; i < inner; ++i) {
    const A d = static_cast<A>(p.bias) + scale * sums[static_cast<size_t>(i)];
    const A v = static_cast<A>(static_cast<compute_type_t<T>>(xc[i]));
    yc[i] = static_cast<T>(static_cast<compute_type_t<T>>(v / std::pow(d, static_cast<A>(p.beta))));
  }
}

const KernelRegistration kLRN{
    "", "LRN", 1, kLatestOpset, [](const KernelInfo& info) {
      LrnParams p;
      p.alpha = info.float_attribute("alpha", 1e-4f);
      p.beta = info.float_attribute("beta", 0.75f);
      p.bias = info.float_attribute("bias", 1.0f);
      p.size = info.int_attribute("size");
      if (p.size < 1) info.fail("size is " + std::to_string(p.size) + ", expected 1 or more");
      return make_kernel([p](KernelContext& ctx) {
        const Tensor& x = ctx.input(0);
        if (x.rank() < 3) {
          ctx.fail("X must be [N, C, D1, ...] (rank 3 or more), got " + shape_string(x.shape()));
        }
        Tensor& y = ctx.allocate_output(0, x.dtype(), x.shape());
        if (x.numel() == 0) return;
        const int64_t n = x.dim(0), c = x.dim(1), inner = x.numel() / (n * c);
        dispatch<float, double, Float16, BFloat16>(x.dtype(), "LRN", [&]<typename T>() {
          using A = std::conditional_t<std::is_same_v<T, double>, double, float>;
          const T* px = x.data<T>();
          T* py = y.data<T>();
          const int64_t grain = std::max<int64_t>(1, 4096 / (inner * p.size));
          parallel_for(n * c, grain, [&](int64_t begin, int64_t end) {
            std::vector<A> sums(static_cast<size_t>(inner));
            for (int64_t sc = begin; sc < end; ++sc) {
              const int64_t at = sc / c * c * inner;
              lrn_channel<T, A>(px + at, py + at, sc % c, c, inner, p, sums);
            }
          });
        });
      });
    }};

}  // namespace
}  // namespace onnxtrain
