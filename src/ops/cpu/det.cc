// Det: the determinant of each square matrix of X [..., M, M], by LU decomposition with
// partial pivoting in double.
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "core/dispatch.h"
#include "core/parallel.h"
#include "ops/kernel_registry.h"

namespace onnxtrain {
namespace {

double determinant(std::vector<double>& a, int64_t m) {
  double det = 1;
  for (int64_t col = 0; col < m; ++col) {
    int64_t pivot = col;
    for (int64_t r = col + 1; r < m; ++r) {
      if (std::abs(a[static_cast<size_t>(r * m + col)]) > std::abs(a[static_cast<size_t>(pivot * m + col)])) pivot = r;
    }
    const double p = a[static_cast<size_t>(pivot * m + col)];
    if (p == 0) return 0;
    if (pivot != col) {
      for (int64_t k = 0; k < m; ++k)
        std::swap(a[static_cast<size_t>(pivot * m + k)], a[static_cast<size_t>(col * m + k)]);
      det = -det;
    }
    det *= p;
    for (int64_t r = col + 1; r < m; ++r) {
      const double f = a[static_cast<size_t>(r * m + col)] / p;
      for (int64_t k = col + 1; k < m; ++k)
        a[static_cast<size_t>(r * m + k)] -= f * a[static_cast<size_t>(col * m + k)];
    }
  }
  return det;
}

const KernelRegistration kDet{"", "Det", 11, kLatestOpset, [](const KernelInfo&) {
                                return make_kernel([](KernelContext& ctx) {
                                  const Tensor& x = ctx.input(0);
                                  if (x.rank() < 2 || x.dim(-1) != x.dim(-2)) {
                                    ctx.fail("X must be [..., M, M], got " + shape_string(x.shape()));
                                  }
                                  const Shape out(x.shape().begin(), x.shape().end() - 2);
                                  Tensor& y = ctx.allocate_output(0, x.dtype(), out);
                                  const int64_t m = x.dim(-1), count = y.numel();
                                  dispatch<float, double, Float16, BFloat16>(x.dtype(), "Det", [&]<typename T>() {
                                    using C = compute_type_t<T>;
                                    const T* px = x.data<T>();
                                    T* py = y.data<T>();
                                    parallel_for(count, 16, [&](int64_t begin, int64_t end) {
                                      std::vector<double> a(static_cast<size_t>(m * m));
                                      for (int64_t i = begin; i < end; ++i) {
                                        for (int64_t k = 0; k < m * m; ++k) {
                                          a[static_cast<size_t>(k)] =
                                              static_cast<double>(static_cast<C>(px[i * m * m + k]));
                                        }
                                        py[i] = static_cast<T>(static_cast<C>(determinant(a, m)));
                                      }
                                    });
                                  });
                                });
                              }};

}  // namespace
}  // namespace onnxtrain
