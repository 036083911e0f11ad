// Col2Im: the inverse of im2col. Input [N, C * prod(block_shape), L] holds, for each of the
// L sliding-block positions (strides, dilations, pads as in Conv) over an image of
// image_shape, the block's C * prod(block_shape) values; the output [N, C, image_shape...]
// is the sum, at each pixel, of every block value that lands on it. Any number of spatial
// axes.
#include <string>
#include <vector>

#include "core/dispatch.h"
#include "core/parallel.h"
#include "ops/kernel_registry.h"

namespace onnxtrain {
namespace {

struct Col2ImGeometry {
  std::vector<int64_t> image, block, strides, dilations, pads_begin, blocks;  // blocks: positions per axis
  int64_t block_size = 1, positions = 1, pixels = 1;
};

std::vector<int64_t> attribute_or(const std::vector<int64_t>& given, size_t count, int64_t fallback) {
  return given.empty() ? std::vector<int64_t>(count, fallback) : given;
}

Col2ImGeometry geometry(KernelContext& ctx, const std::vector<int64_t>& strides, const std::vector<int64_t>& dilations,
                        const std::vector<int64_t>& pads) {
  Col2ImGeometry g;
  g.image = ctx.input(1).to_int64_vector();
  g.block = ctx.input(2).to_int64_vector();
  const size_t r = g.image.size();
  if (r == 0 || g.block.size() != r) {
    ctx.fail("image_shape and block_shape must list the same number (1 or more) of sizes, got " + std::to_string(r) +
             " and " + std::to_string(g.block.size()));
  }
  g.strides = attribute_or(strides, r, 1);
  g.dilations = attribute_or(dilations, r, 1);
  const std::vector<int64_t> all_pads = attribute_or(pads, 2 * r, 0);
  if (g.strides.size() != r || g.dilations.size() != r || all_pads.size() != 2 * r) {
    ctx.fail("strides, dilations and pads must hold " + std::to_string(r) + ", " + std::to_string(r) + " and " +
             std::to_string(2 * r) + " values");
  }
  for (size_t a = 0; a < r; ++a) {
    if (g.block[a] < 1 || g.strides[a] < 1 || g.dilations[a] < 1 || g.image[a] < 0) {
      ctx.fail("block sizes, strides and dilations must be 1 or more and image sizes 0 or more");
    }
    g.pads_begin.push_back(all_pads[a]);
    const int64_t span = g.dilations[a] * (g.block[a] - 1) + 1;
    const int64_t room = g.image[a] + all_pads[a] + all_pads[a + r] - span;
    g.blocks.push_back(room < 0 ? 0 : room / g.strides[a] + 1);
    g.block_size *= g.block[a];
    g.positions *= g.blocks.back();
    g.pixels *= g.image[a];
  }
  return g;
}

template <typename T>
void col2im(const Tensor& x, const Col2ImGeometry& g, Tensor& y) {
  using C = compute_type_t<T>;
  const size_t r = g.image.size();
  const int64_t n = x.dim(0), channels = x.dim(1) / g.block_size;
  const T* px = x.data<T>();
  T* py = y.data<T>();
  parallel_for(n * channels, 1, [&](int64_t begin, int64_t end) {
    std::vector<C> sums(static_cast<size_t>(g.pixels));
    std::vector<int64_t> k(r), l(r);
    for (int64_t nc = begin; nc < end; ++nc) {
      std::fill(sums.begin(), sums.end(), C(0));
      const T* in = px + nc * g.block_size * g.positions;
      for (int64_t kk = 0; kk < g.block_size; ++kk) {
        for (int64_t rest = kk, a = static_cast<int64_t>(r) - 1; a >= 0; --a) {
          k[static_cast<size_t>(a)] = rest % g.block[static_cast<size_t>(a)];
          rest /= g.block[static_cast<size_t>(a)];
        }
        for (int64_t ll = 0; ll < g.positions; ++ll) {
          for (int64_t rest = ll, a = static_cast<int64_t>(r) - 1; a >= 0; --a) {
            l[static_cast<size_t>(a)] = rest % g.blocks[static_cast<size_t>(a)];
            rest /= g.blocks[static_cast<size_t>(a)];
          }
          int64_t at = 0;
          bool inside = true;
          for (size_t a = 0; a < r && inside; ++a) {
            const int64_t p = l[a] * g.strides[a] - g.pads_begin[a] + k[a] * g.dilations[a];
            inside = p >= 0 && p < g.image[a];
            at = at * g.image[a] + p;
          }
          if (inside) sums[static_cast<size_t>(at)] += static_cast<C>(in[kk * g.positions + ll]);
        }
      }
      T* out = py + nc * g.pixels;
      for (int64_t i = 0; i < g.pixels; ++i) out[i] = static_cast<T>(sums[static_cast<size_t>(i)]);
    }
  });
}

const KernelRegistration kCol2Im{
    "", "Col2Im", 18, kLatestOpset, {.host_inputs = {1, 2}}, [](const KernelInfo& info) {
      const std::vector<int64_t> strides = info.ints_attribute("strides", std::vector<int64_t>{});
      const std::vector<int64_t> dilations = info.ints_attribute("dilations", std::vector<int64_t>{});
      const std::vector<int64_t> pads = info.ints_attribute("pads", std::vector<int64_t>{});
      return make_kernel([strides, dilations, pads](KernelContext& ctx) {
        const Tensor& x = ctx.input(0);
        const Col2ImGeometry g = geometry(ctx, strides, dilations, pads);
        if (x.rank() != 3 || x.dim(1) % g.block_size != 0 || x.dim(2) != g.positions) {
          ctx.fail("input must be [N, C * " + std::to_string(g.block_size) + ", " + std::to_string(g.positions) +
                   "] for these image_shape, block_shape, strides, dilations and pads, got " + shape_string(x.shape()));
        }
        Shape out{x.dim(0), x.dim(1) / g.block_size};
        out.insert(out.end(), g.image.begin(), g.image.end());
        Tensor& y = ctx.allocate_output(0, x.dtype(), out);
        if (y.numel() == 0) return;
        dispatch<ONNXTRAIN_NUMERIC_TYPES>(x.dtype(), "Col2Im", [&]<typename T>() { col2im<T>(x, g, y); });
      });
    }};

}  // namespace
}  // namespace onnxtrain
