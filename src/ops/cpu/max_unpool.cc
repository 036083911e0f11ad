// MaxUnpool: X [N, C, D1...] scattered into zeros at the flat positions Indices names (as
// MaxPool's Indices output gives them, over the whole unpooled tensor). The unpooled shape
// is (D - 1) * stride - pad_begin - pad_end + kernel per axis; an output_shape input makes
// the output that shape, holding the unpooled tensor in its leading corner (as the ONNX
// reference and the backend tests do).
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "core/dispatch.h"
#include "ops/kernel_registry.h"

namespace onnxtrain {
namespace {

const KernelRegistration kMaxUnpool{
    "", "MaxUnpool", 9, kLatestOpset, {.host_inputs = {2}}, [](const KernelInfo& info) {
      const std::vector<int64_t> kernel = info.ints_attribute("kernel_shape");
      const std::vector<int64_t> strides_attribute = info.ints_attribute("strides", std::vector<int64_t>{});
      const std::vector<int64_t> pads_attribute = info.ints_attribute("pads", std::vector<int64_t>{});
      const size_t r = kernel.size();
      const std::vector<int64_t> strides = strides_attribute.empty() ? std::vector<int64_t>(r, 1) : strides_attribute;
      const std::vector<int64_t> pads = pads_attribute.empty() ? std::vector<int64_t>(2 * r, 0) : pads_attribute;
      if (r == 0 || strides.size() != r || pads.size() != 2 * r) {
        info.fail("kernel_shape, strides and pads must hold r, r and 2r values (r >= 1)");
      }
      return make_kernel([kernel, strides, pads](KernelContext& ctx) {
        const Tensor& x = ctx.input(0);
        const Tensor& indices = ctx.input(1);
        const size_t r = kernel.size();
        if (x.rank() != r + 2) {
          ctx.fail("X must be [N, C] and " + std::to_string(r) + " spatial axes, got " + shape_string(x.shape()));
        }
        if (indices.shape() != x.shape() || indices.dtype() != DType::kInt64) {
          ctx.fail("I must be int64 of X's shape " + shape_string(x.shape()) + ", got " +
                   shape_string(indices.shape()));
        }
        Shape unpooled{x.dim(0), x.dim(1)};
        for (size_t a = 0; a < r; ++a) {
          unpooled.push_back((x.dim(static_cast<int64_t>(a + 2)) - 1) * strides[a] - pads[a] - pads[a + r] + kernel[a]);
        }
        Shape out = unpooled;
        if (ctx.has_input(2)) {
          out = ctx.input(2).to_int64_vector();
          if (out.size() != unpooled.size()) {
            ctx.fail("output_shape must hold " + std::to_string(unpooled.size()) + " sizes, got " +
                     std::to_string(out.size()));
          }
        }
        for (size_t a = 0; a < out.size(); ++a) {
          if (out[a] < unpooled[a] || unpooled[a] < 0) {
            ctx.fail("output_shape " + shape_string(out) + " is smaller than the unpooled shape " +
                     shape_string(unpooled));
          }
        }
        Tensor& y = ctx.allocate_output(0, x.dtype(), out);
        if (y.numel() == 0) return;
        std::memset(y.raw_data(), 0, y.nbytes());
        const int64_t total = shape_size(unpooled);
        const int64_t* idx = indices.data<int64_t>();
        for (int64_t i = 0; i < x.numel(); ++i) {
          if (idx[i] < 0 || idx[i] >= total) {
            ctx.fail("index " + std::to_string(idx[i]) + " is outside the unpooled tensor " + shape_string(unpooled));
          }
        }
        // Flat position p of the unpooled shape, at the same coordinates in the output.
        auto place = [&](int64_t p) {
          int64_t at = 0, scale = 1;
          for (size_t a = out.size(); a-- > 0;) {
            at += p % unpooled[a] * scale;
            p /= unpooled[a];
            scale *= out[a];
          }
          return at;
        };
        const size_t bytes = dtype_bytes(x.dtype(), 1);
        const auto* src = static_cast<const unsigned char*>(x.raw_data());
        auto* dst = static_cast<unsigned char*>(y.raw_data());
        for (int64_t i = 0; i < x.numel(); ++i) {
          std::memcpy(dst + static_cast<size_t>(place(idx[i])) * bytes, src + static_cast<size_t>(i) * bytes, bytes);
        }
      });
    }};

}  // namespace
}  // namespace onnxtrain
