// Ops that move elements without arithmetic, for any element type (copied as bytes):
//
// - CenterCropPad: each listed axis cropped or zero-padded to its target size about its
//   centre (the extra element, when the difference is odd, goes to the end);
// - DepthToSpace / SpaceToDepth: blocks of `blocksize` x `blocksize` channels to and from
//   pixels (DCR: depth-column-row, the default, or CRD);
// - ReverseSequence: the first sequence_lens[b] steps of each batch entry reversed;
// - TensorScatter (opset 24, a KV cache update): past_cache with update written along
//   `axis` from write_indices[b] on (wrapping around with mode circular).
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "core/parallel.h"
#include "ops/cpu/axis.h"
#include "ops/kernel_registry.h"

namespace onnxtrain {
namespace {

size_t element_bytes(const Tensor& t) {
  return dtype_bytes(t.dtype(), 1);
}

// Copies the box of `extent` starting at `from` in src into dst at `to` (row-major shapes).
void copy_box(const Tensor& src, const std::vector<int64_t>& from, Tensor& dst, const std::vector<int64_t>& to,
              const std::vector<int64_t>& extent) {
  const size_t rank = extent.size(), bytes = element_bytes(src);
  for (int64_t e : extent) {
    if (e <= 0) return;
  }
  if (rank == 0) {
    std::memcpy(dst.raw_data(), src.raw_data(), bytes);
    return;
  }
  std::vector<int64_t> src_strides(rank, 1), dst_strides(rank, 1);
  for (size_t a = rank - 1; a-- > 0;) {
    src_strides[a] = src_strides[a + 1] * src.dim(static_cast<int64_t>(a + 1));
    dst_strides[a] = dst_strides[a + 1] * dst.dim(static_cast<int64_t>(a + 1));
  }
  const auto* s = static_cast<const unsigned char*>(src.raw_data());
  auto* d = static_cast<unsigned char*>(dst.raw_data());
  const size_t row = static_cast<size_t>(extent[rank - 1]) * bytes;
  std::vector<int64_t> index(rank, 0);  // over every axis but the last
  while (true) {
    int64_t so = 0, dof = 0;
    for (size_t a = 0; a < rank; ++a) {
      so += (from[a] + index[a]) * src_strides[a];
      dof += (to[a] + index[a]) * dst_strides[a];
    }
    std::memcpy(d + static_cast<size_t>(dof) * bytes, s + static_cast<size_t>(so) * bytes, row);
    size_t a = rank - 1;
    while (a-- > 0) {
      if (++index[a] < extent[a]) break;
      index[a] = 0;
    }
    if (a == static_cast<size_t>(-1)) return;
  }
}

const KernelRegistration kCenterCropPad{
    "", "CenterCropPad", 18, kLatestOpset, {.host_inputs = {1}}, [](const KernelInfo& info) {
      const std::vector<int64_t> axes_attribute = info.ints_attribute("axes", std::vector<int64_t>{});
      return make_kernel([axes_attribute](KernelContext& ctx) {
        const Tensor& x = ctx.input(0);
        const std::vector<int64_t> target = ctx.input(1).to_int64_vector();
        const int64_t rank = static_cast<int64_t>(x.rank());
        std::vector<int64_t> axes = normalize_axes(ctx, axes_attribute, rank);
        if (axes.empty()) {
          for (int64_t a = 0; a < rank; ++a) axes.push_back(a);
        }
        if (target.size() != axes.size()) {
          ctx.fail("shape holds " + std::to_string(target.size()) + " sizes for " + std::to_string(axes.size()) +
                   " axes");
        }
        Shape out = x.shape();
        std::vector<int64_t> from(x.rank(), 0), to(x.rank(), 0), extent = x.shape();
        for (size_t k = 0; k < axes.size(); ++k) {
          const int64_t a = axes[k];
          if (target[k] < 0) ctx.fail("shape holds a negative size: " + std::to_string(target[k]));
          const int64_t dim = x.dim(a);
          out[static_cast<size_t>(a)] = target[k];
          from[static_cast<size_t>(a)] = std::max<int64_t>(0, (dim - target[k]) / 2);
          to[static_cast<size_t>(a)] = std::max<int64_t>(0, (target[k] - dim) / 2);
          extent[static_cast<size_t>(a)] = std::min(dim, target[k]);
        }
        Tensor& y = ctx.allocate_output(0, x.dtype(), out);
        if (y.numel() == 0) return;
        std::memset(y.raw_data(), 0, y.nbytes());
        copy_box(x, from, y, to, extent);
      });
    }};

// y[n, c', h', w'] = x[n, source(c', h', w'), h, w] (or its inverse for SpaceToDepth): the
// channel within the block at (i, j) is (i * b + j) * C' + c (DCR) or c * b^2 + i * b + j (CRD).
void depth_space(KernelContext& ctx, int64_t block, bool crd, bool to_space) {
  const Tensor& x = ctx.input(0);
  if (x.rank() != 4) ctx.fail("input must be [N, C, H, W], got " + shape_string(x.shape()));
  const int64_t n = x.dim(0), b2 = block * block;
  // The [N, C, H, W] of the space side and the channels of one block position.
  int64_t c, h, w;
  if (to_space) {
    if (x.dim(1) % b2 != 0) {
      ctx.fail("channels " + std::to_string(x.dim(1)) + " are not a multiple of blocksize^2 = " + std::to_string(b2));
    }
    c = x.dim(1) / b2, h = x.dim(2) * block, w = x.dim(3) * block;
  } else {
    if (x.dim(2) % block != 0 || x.dim(3) % block != 0) {
      ctx.fail("height and width " + shape_string(x.shape()) + " are not multiples of blocksize " +
               std::to_string(block));
    }
    c = x.dim(1), h = x.dim(2), w = x.dim(3);
  }
  const int64_t hs = h / block, ws = w / block;  // the depth side's spatial sizes
  const Shape out = to_space ? Shape{n, c, h, w} : Shape{n, c * b2, hs, ws};
  Tensor& y = ctx.allocate_output(0, x.dtype(), out);
  if (y.numel() == 0) return;
  const size_t bytes = element_bytes(x);
  const auto* src = static_cast<const unsigned char*>(x.raw_data());
  auto* dst = static_cast<unsigned char*>(y.raw_data());
  parallel_for(n * c * h, 64, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {  // one row of the space side: (n, ch, row)
      const int64_t row = r % h, ch = r / h % c, b = r / (h * c);
      const int64_t hd = row / block, i = row % block;
      for (int64_t col = 0; col < w; ++col) {
        const int64_t wd = col / block, j = col % block;
        const int64_t depth_channel = crd ? ch * b2 + i * block + j : (i * block + j) * c + ch;
        const int64_t space_at = r * w + col;
        const int64_t depth_at = ((b * c * b2 + depth_channel) * hs + hd) * ws + wd;
        const int64_t from = to_space ? depth_at : space_at, to = to_space ? space_at : depth_at;
        std::memcpy(dst + static_cast<size_t>(to) * bytes, src + static_cast<size_t>(from) * bytes, bytes);
      }
    }
  });
}

int64_t blocksize(const KernelInfo& info) {
  const int64_t block = info.int_attribute("blocksize");
  if (block < 1) info.fail("blocksize is " + std::to_string(block) + ", expected 1 or more");
  return block;
}

const KernelRegistration kDepthToSpace{
    "", "DepthToSpace", 1, kLatestOpset, [](const KernelInfo& info) {
      const int64_t block = blocksize(info);
      const std::string mode = info.string_attribute("mode", "DCR");
      if (mode != "DCR" && mode != "CRD") info.fail("mode is \"" + mode + "\", expected DCR or CRD");
      return make_kernel([block, crd = mode == "CRD"](KernelContext& ctx) { depth_space(ctx, block, crd, true); });
    }};

const KernelRegistration kSpaceToDepth{
    "", "SpaceToDepth", 1, kLatestOpset, [](const KernelInfo& info) {
      const int64_t block = blocksize(info);
      return make_kernel([block](KernelContext& ctx) { depth_space(ctx, block, false, false); });
    }};

const KernelRegistration kReverseSequence{
    "", "ReverseSequence", 10, kLatestOpset, {.host_inputs = {1}}, [](const KernelInfo& info) {
      const int64_t batch_axis = info.int_attribute("batch_axis", 1), time_axis = info.int_attribute("time_axis", 0);
      if (!((batch_axis == 0 && time_axis == 1) || (batch_axis == 1 && time_axis == 0))) {
        info.fail("batch_axis and time_axis must be 0 and 1 in some order, got " + std::to_string(batch_axis) +
                  " and " + std::to_string(time_axis));
      }
      return make_kernel([batch_axis, time_axis](KernelContext& ctx) {
        const Tensor& x = ctx.input(0);
        const std::vector<int64_t> lengths = ctx.input(1).to_int64_vector();
        if (x.rank() < 2) ctx.fail("input must have rank 2 or more, got " + shape_string(x.shape()));
        const int64_t batches = x.dim(batch_axis), steps = x.dim(time_axis);
        if (static_cast<int64_t>(lengths.size()) != batches) {
          ctx.fail("sequence_lens holds " + std::to_string(lengths.size()) + " lengths for a batch of " +
                   std::to_string(batches));
        }
        for (int64_t len : lengths) {
          if (len < 0 || len > steps) {
            ctx.fail("sequence length " + std::to_string(len) + " is outside [0, " + std::to_string(steps) + "]");
          }
        }
        Tensor& y = ctx.allocate_output(0, x.dtype(), x.shape());
        if (y.numel() == 0) return;
        const size_t row = static_cast<size_t>(x.numel() / (batches * steps)) * element_bytes(x);
        const auto* src = static_cast<const unsigned char*>(x.raw_data());
        auto* dst = static_cast<unsigned char*>(y.raw_data());
        // Row (b, t) lies at (b * steps + t) with batch first, (t * batches + b) with time first.
        auto at = [&](int64_t b, int64_t t) {
          return static_cast<size_t>(batch_axis == 0 ? b * steps + t : t * batches + b) * row;
        };
        for (int64_t b = 0; b < batches; ++b) {
          const int64_t len = lengths[static_cast<size_t>(b)];
          for (int64_t t = 0; t < steps; ++t) std::memcpy(dst + at(b, t), src + at(b, t < len ? len - 1 - t : t), row);
        }
      });
    }};

const KernelRegistration kTensorScatter{
    "", "TensorScatter", 24, kLatestOpset, {.host_inputs = {2}}, [](const KernelInfo& info) {
      const std::string mode = info.string_attribute("mode", "linear");
      if (mode != "linear" && mode != "circular") info.fail("mode is \"" + mode + "\", expected linear or circular");
      const int64_t axis_attribute = info.int_attribute("axis", -2);
      return make_kernel([circular = mode == "circular", axis_attribute](KernelContext& ctx) {
        const Tensor& cache = ctx.input(0);
        const Tensor& update = ctx.input(1);
        const int64_t rank = static_cast<int64_t>(cache.rank());
        const int64_t axis = axis_attribute < 0 ? axis_attribute + rank : axis_attribute;
        if (axis < 1 || axis >= rank) {
          ctx.fail("axis " + std::to_string(axis_attribute) + " must name a sequence axis after the batch axis of " +
                   shape_string(cache.shape()));
        }
        bool compatible = update.rank() == cache.rank() && update.dtype() == cache.dtype();
        for (int64_t a = 0; a < rank && compatible; ++a) {
          compatible = a == axis ? update.dim(a) <= cache.dim(a) : update.dim(a) == cache.dim(a);
        }
        if (!compatible) {
          ctx.fail("update " + shape_string(update.shape()) + " must match past_cache " + shape_string(cache.shape()) +
                   " (and its element type) but along axis " + std::to_string(axis) + ", where it may be shorter");
        }
        const int64_t batches = cache.dim(0), capacity = cache.dim(axis), length = update.dim(axis);
        std::vector<int64_t> starts(static_cast<size_t>(batches), 0);
        if (ctx.has_input(2)) {
          starts = ctx.input(2).to_int64_vector();
          if (static_cast<int64_t>(starts.size()) != batches) {
            ctx.fail("write_indices holds " + std::to_string(starts.size()) + " indices for a batch of " +
                     std::to_string(batches));
          }
        }
        for (int64_t start : starts) {
          if (start < 0 || (!circular && start + length > capacity)) {
            ctx.fail("write index " + std::to_string(start) + " with " + std::to_string(length) +
                     " updates leaves the cache of " + std::to_string(capacity));
          }
        }
        Tensor& present = ctx.allocate_output(0, cache.dtype(), cache.shape());
        if (present.numel() == 0) return;
        std::memcpy(present.raw_data(), cache.raw_data(), cache.nbytes());
        if (update.numel() == 0) return;
        int64_t outer = 1, inner = 1;
        for (int64_t a = 0; a < axis; ++a) outer *= cache.dim(a);
        for (int64_t a = axis + 1; a < rank; ++a) inner *= cache.dim(a);
        const size_t row = static_cast<size_t>(inner) * element_bytes(cache);
        const int64_t per_batch = outer / batches;
        const auto* src = static_cast<const unsigned char*>(update.raw_data());
        auto* dst = static_cast<unsigned char*>(present.raw_data());
        for (int64_t o = 0; o < outer; ++o) {
          const int64_t start = starts[static_cast<size_t>(o / per_batch)];
          for (int64_t s = 0; s < length; ++s) {
            const int64_t at = circular ? (start + s) % capacity : start + s;
            std::memcpy(dst + static_cast<size_t>(o * capacity + at) * row,
                        src + static_cast<size_t>(o * length + s) * row, row);
          }
        }
      });
    }};

}  // namespace
}  // namespace onnxtrain
