// The pools' gradient kernels (org.onnxtrain): MaxPoolGrad scatters dY to the positions
// MaxPool's Indices name; AveragePoolGrad shares each dY among its window's inputs.
#include <algorithm>
#include <cstring>
#include <numeric>
#include <vector>

#include "core/dispatch.h"
#include "core/parallel.h"
#include "ops/cpu/window.h"
#include "ops/kernel_registry.h"

namespace onnxtrain {
namespace {

// ---- MaxPoolGrad: dY added at the flat input positions Indices names ----

const KernelRegistration kMaxPoolGrad{
    "org.onnxtrain", "MaxPoolGrad", 1, kLatestOpset, [](const KernelInfo&) {
      return make_kernel([](KernelContext& ctx) {
        const Tensor& dy = ctx.input(0);
        const Tensor& indices = ctx.input(1);
        const Shape shape = ctx.input(2).to_int64_vector();
        if (indices.numel() != dy.numel()) ctx.fail("Indices and dY differ in size");
        if (indices.dtype() != DType::kInt64) ctx.fail("Indices must be int64");
        Tensor& dx = ctx.allocate_output(0, dy.dtype(), shape);
        const int64_t planes = shape.size() >= 2 ? shape[0] * shape[1] : 1;
        const int64_t plane_in = planes ? dx.numel() / planes : 0;
        const int64_t plane_out = planes ? dy.numel() / planes : 0;
        const int64_t* idx = indices.data<int64_t>();
        for (int64_t p = 0; p < planes; ++p) {  // checked here: no throwing inside the threads
          for (int64_t i = p * plane_out; i < (p + 1) * plane_out; ++i) {
            if (idx[i] < p * plane_in || idx[i] >= (p + 1) * plane_in) {
              ctx.fail("index " + std::to_string(idx[i]) + " lies outside its (sample, channel) plane");
            }
          }
        }
        dispatch<ONNXTRAIN_FLOAT_TYPES>(dy.dtype(), "MaxPoolGrad", [&]<typename T>() {
          using C = compute_type_t<T>;
          T* out = dx.data<T>();
          const T* g = dy.data<T>();
          // Indices of plane p (sample, channel) point into plane p of the input.
          parallel_for(planes, 1, [&](int64_t begin, int64_t end) {
            for (int64_t p = begin; p < end; ++p) {
              T* plane = out + p * plane_in;
              std::fill(plane, plane + plane_in, T(0));
              for (int64_t i = p * plane_out; i < (p + 1) * plane_out; ++i) {
                const int64_t at = idx[i] - p * plane_in;
                plane[at] = static_cast<T>(C(plane[at]) + C(g[i]));
              }
            }
          });
        });
      });
    }};

const KernelRegistration kAveragePoolGrad{
    "org.onnxtrain", "AveragePoolGrad", 1, kLatestOpset, [](const KernelInfo& info) {
      window::Window base;
      base.kernel = info.ints_attribute("kernel_shape");
      const std::vector<int64_t> pads = info.ints_attribute("pads");
      base.strides = info.ints_attribute("strides");
      base.dilations = info.ints_attribute("dilations");
      const bool include_pad = info.int_attribute("count_include_pad", 0) != 0;
      const size_t rank = base.kernel.size();
      if (pads.size() != 2 * rank || base.strides.size() != rank || base.dilations.size() != rank) {
        info.fail("kernel_shape, pads, strides and dilations disagree on the number of spatial axes");
      }
      base.pad_begin.assign(pads.begin(), pads.begin() + static_cast<int64_t>(rank));
      base.pad_end.assign(pads.begin() + static_cast<int64_t>(rank), pads.end());
      return make_kernel([base, include_pad, rank](KernelContext& ctx) {
        const Tensor& dy = ctx.input(0);
        const Shape shape = ctx.input(1).to_int64_vector();
        if (shape.size() != rank + 2 || dy.rank() != rank + 2) ctx.fail("rank does not match kernel_shape");
        window::Window g = base;
        g.in.assign(shape.begin() + 2, shape.end());
        g.out.assign(dy.shape().begin() + 2, dy.shape().end());
        const std::vector<int64_t> map = window::window_map(g);
        const int64_t os = g.out_size(), ks = g.kernel_size(), is = g.in_size();
        std::vector<int64_t> counts(static_cast<size_t>(os), 0);
        for (int64_t oi = 0; oi < os; ++oi) {
          for (int64_t ki = 0; ki < ks; ++ki) {
            const int64_t at = map[static_cast<size_t>(oi * ks + ki)];
            if (at >= 0 || (include_pad && at == -2)) ++counts[static_cast<size_t>(oi)];
          }
        }
        Tensor& dx = ctx.allocate_output(0, dy.dtype(), shape);
        const int64_t planes = shape[0] * shape[1];
        dispatch<ONNXTRAIN_FLOAT_TYPES>(dy.dtype(), "AveragePoolGrad", [&]<typename T>() {
          using C = compute_type_t<T>;
          parallel_for(planes, 1, [&](int64_t begin, int64_t end) {
            std::vector<C> acc(static_cast<size_t>(is));
            for (int64_t p = begin; p < end; ++p) {
              std::fill(acc.begin(), acc.end(), C(0));
              const T* g_plane = dy.data<T>() + p * os;
              for (int64_t oi = 0; oi < os; ++oi) {
                const int64_t count = counts[static_cast<size_t>(oi)];
                if (count == 0) continue;
                const C share = C(g_plane[oi]) / C(count);
                for (int64_t ki = 0; ki < ks; ++ki) {
                  const int64_t at = map[static_cast<size_t>(oi * ks + ki)];
                  if (at >= 0) acc[static_cast<size_t>(at)] += share;
                }
              }
              T* out = dx.data<T>() + p * is;
              for (int64_t i = 0; i < is; ++i) out[i] = static_cast<T>(acc[static_cast<size_t>(i)]);
            }
          });
        });
      });
    }};

}  // namespace
}  // namespace onnxtrain
