// ConvGrad (org.onnxtrain, and com.microsoft's of the same inputs and outputs):
// (dY, X, W) => (dX, dW, dB) with Conv's attributes, on oneDNN's backward primitives where
// they apply and by direct loops over the window otherwise.
#include <algorithm>
#include <cstring>
#include <numeric>
#include <vector>

#include "core/dispatch.h"
#include "core/parallel.h"
#include "ops/cpu/conv.h"
#include "ops/cpu/onednn.h"
#include "ops/cpu/window.h"
#include "ops/kernel_registry.h"

namespace onnxtrain {
namespace {

// dX and dW by direct loops over (output position, kernel offset) pairs: any float type,
// any number of spatial axes.
template <typename T>
void conv_grad_loop(const ConvGeometry& s, const T* dy, const T* x, const T* w, T* dx, T* dw) {
  using C = compute_type_t<T>;
  const std::vector<int64_t> map = window::window_map(s);
  const int64_t os = s.out_size(), ks = s.kernel_size(), is = s.in_size();
  const int64_t cg = s.c / s.group, mg = s.m / s.group;
  if (dx) {
    parallel_for(s.n * s.c, 1, [&](int64_t begin, int64_t end) {
      std::vector<C> acc(static_cast<size_t>(is));
      for (int64_t nc = begin; nc < end; ++nc) {
        const int64_t n = nc / s.c, c = nc % s.c, grp = c / cg, ci = c % cg;
        std::fill(acc.begin(), acc.end(), C(0));
        for (int64_t mi = 0; mi < mg; ++mi) {
          const int64_t m = grp * mg + mi;
          const T* g = dy + (n * s.m + m) * os;
          const T* wk = w + (m * cg + ci) * ks;
          for (int64_t oi = 0; oi < os; ++oi) {
            const C gv = C(g[oi]);
            for (int64_t ki = 0; ki < ks; ++ki) {
              const int64_t at = map[static_cast<size_t>(oi * ks + ki)];
              if (at >= 0) acc[static_cast<size_t>(at)] += gv * C(wk[ki]);
            }
          }
        }
        T* out = dx + nc * is;
        for (int64_t i = 0; i < is; ++i) out[i] = static_cast<T>(acc[static_cast<size_t>(i)]);
      }
    });
  }
  if (dw) {
    parallel_for(s.m * cg, 1, [&](int64_t begin, int64_t end) {
      std::vector<C> acc(static_cast<size_t>(ks));
      for (int64_t mc = begin; mc < end; ++mc) {
        const int64_t m = mc / cg, ci = mc % cg, grp = m / mg;
        std::fill(acc.begin(), acc.end(), C(0));
        for (int64_t n = 0; n < s.n; ++n) {
          const T* g = dy + (n * s.m + m) * os;
          const T* xin = x + (n * s.c + grp * cg + ci) * is;
          for (int64_t oi = 0; oi < os; ++oi) {
            const C gv = C(g[oi]);
            for (int64_t ki = 0; ki < ks; ++ki) {
              const int64_t at = map[static_cast<size_t>(oi * ks + ki)];
              if (at >= 0) acc[static_cast<size_t>(ki)] += gv * C(xin[at]);
            }
          }
        }
        T* out = dw + mc * ks;
        for (int64_t k = 0; k < ks; ++k) out[k] = static_cast<T>(acc[static_cast<size_t>(k)]);
      }
    });
  }
}

template <typename T>
void bias_grad(const ConvGeometry& s, const T* dy, T* db) {
  using C = compute_type_t<T>;
  const int64_t os = s.out_size();
  parallel_for(s.m, 1, [&](int64_t begin, int64_t end) {
    for (int64_t m = begin; m < end; ++m) {
      C sum = 0;
      for (int64_t n = 0; n < s.n; ++n) {
        const T* g = dy + (n * s.m + m) * os;
        for (int64_t i = 0; i < os; ++i) sum += C(g[i]);
      }
      db[m] = static_cast<T>(sum);
    }
  });
}

// oneDNN's backward-data and backward-weights primitives for float32, per shape. They
// compute in layouts oneDNN picks (channel-blocked, several times faster than plain NCHW);
// inputs and outputs are reordered from and to the plain layouts.
struct PreparedConvGrad {
  // With their arguments declared; their scratchpads come from the run's scratch memory
  // (the memory plan's arena), not from oneDNN's own allocation, which would keep the
  // largest one (per-thread weight gradient partials: threads x the weights) resident.
  onednn::Primitive data, weights;
  // Plain (user) layouts.
  onednn::memory::desc src, wei, dst, bias;
  // The primitives' layouts.
  onednn::memory::desc data_diff_dst, data_wei, data_diff_src;
  onednn::memory::desc weights_src, weights_diff_dst, weights_diff_wei;
  bool cropped = false;  // src is a view of X without its last, unused rows
  bool ok = false;
};

PreparedConvGrad prepare_conv_grad(const ConvGeometry& s) {
  using onednn::memory;
  const auto type = memory::data_type::f32;
  memory::dims src_dims = {s.n, s.c}, dst_dims = {s.n, s.m}, wei_dims;
  src_dims.insert(src_dims.end(), s.in.begin(), s.in.end());
  dst_dims.insert(dst_dims.end(), s.out.begin(), s.out.end());
  if (s.group > 1)
    wei_dims = {s.group, s.m / s.group, s.c / s.group};
  else
    wei_dims = {s.m, s.c};
  wei_dims.insert(wei_dims.end(), s.kernel.begin(), s.kernel.end());
  memory::dims strides, dilation, pad_l, pad_r;
  const memory::dims full_src_strides = onednn::plain_strides(src_dims);
  bool cropped = false;
  for (size_t d = 0; d < s.in.size(); ++d) {
    strides.push_back(s.strides[d]);
    dilation.push_back(s.dilations[d] - 1);
    pad_l.push_back(s.pad_begin[d]);
    // oneDNN wants the end padding that makes the sizes consistent exactly. When the last
    // windows stop short of the input's end (a strided 1x1 convolution), the input is
    // cropped instead: a view with the full tensor's strides.
    const int64_t extent = (s.kernel[d] - 1) * s.dilations[d] + 1;
    const int64_t right = (s.out[d] - 1) * s.strides[d] + extent - s.in[d] - s.pad_begin[d];
    if (s.pad_begin[d] < 0) return {};
    if (right < 0) {
      src_dims[2 + d] += right;
      cropped = true;
    }
    pad_r.push_back(std::max<int64_t>(right, 0));
  }
  PreparedConvGrad p;
  p.cropped = cropped;
  p.src = memory::desc(src_dims, type, full_src_strides);
  p.dst = onednn::plain_desc(dst_dims, type);
  p.wei = onednn::plain_desc(wei_dims, type);
  p.bias = onednn::plain_desc({s.m}, type);
  const memory::desc src_any = onednn::any_desc(src_dims, type);
  const memory::desc dst_any = onednn::any_desc(dst_dims, type);
  const memory::desc wei_any = onednn::any_desc(wei_dims, type);
  try {
    dnnl::convolution_forward::desc fwd(dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct, src_any,
                                        wei_any, p.bias, dst_any, strides, dilation, pad_l, pad_r);
    dnnl::convolution_forward::primitive_desc fwd_pd(fwd, onednn::engine());
    dnnl::convolution_backward_data::desc bd(dnnl::algorithm::convolution_direct, src_any, wei_any, dst_any, strides,
                                             dilation, pad_l, pad_r);
    dnnl::convolution_backward_data::primitive_desc bd_pd(bd, onednn::primitive_attr(), onednn::engine(), fwd_pd);
    dnnl::convolution_backward_weights::desc bw(dnnl::algorithm::convolution_direct, src_any, wei_any, p.bias, dst_any,
                                                strides, dilation, pad_l, pad_r);
    dnnl::convolution_backward_weights::primitive_desc bw_pd(bw, onednn::primitive_attr(), onednn::engine(), fwd_pd);
    p.data_diff_dst = bd_pd.diff_dst_desc();
    p.data_wei = bd_pd.weights_desc();
    p.data_diff_src = bd_pd.diff_src_desc();
    p.weights_src = bw_pd.src_desc();
    p.weights_diff_dst = bw_pd.diff_dst_desc();
    p.weights_diff_wei = bw_pd.diff_weights_desc();
    const int threads = omp_get_max_threads();  // what the primitives were created for
    p.data = onednn::Primitive(dnnl::convolution_backward_data(bd_pd), bd_pd, threads);
    p.data.add_argument(DNNL_ARG_DIFF_DST, p.data_diff_dst);
    p.data.add_argument(DNNL_ARG_WEIGHTS, p.data_wei);
    p.data.add_argument(DNNL_ARG_DIFF_SRC, p.data_diff_src);
    p.weights = onednn::Primitive(dnnl::convolution_backward_weights(bw_pd), bw_pd, threads);
    p.weights.add_argument(DNNL_ARG_SRC, p.weights_src);
    p.weights.add_argument(DNNL_ARG_DIFF_DST, p.weights_diff_dst);
    p.weights.add_argument(DNNL_ARG_DIFF_WEIGHTS, p.weights_diff_wei);
    p.weights.add_argument(DNNL_ARG_DIFF_BIAS, p.bias);
    p.ok = true;
  } catch (const dnnl::error&) {
    return {};
  }
  return p;
}

// `data` (plain layout `plain`) in layout `want`: itself, or a reordered scratch copy.
const void* in_layout(KernelContext& ctx, const onednn::memory::desc& plain, const onednn::memory::desc& want,
                      const void* data, Tensor& scratch) {
  if (plain == want) return data;
  scratch = onednn::scratch_bytes(ctx, want.get_size());
  onednn::reorder(plain, data, want, scratch.raw_data());
  return scratch.raw_data();
}

class ConvGradKernel final : public OpKernel {
 public:
  explicit ConvGradKernel(const KernelInfo& info) {
    pads_ = info.ints_attribute("pads");
    strides_ = info.ints_attribute("strides");
    dilations_ = info.ints_attribute("dilations");
    group_ = info.int_attribute("group", 1);
    if (pads_.size() != 2 * strides_.size() || dilations_.size() != strides_.size()) {
      info.fail("pads, strides and dilations disagree on the number of spatial axes");
    }
  }

  void compute(KernelContext& ctx) override {
    const Tensor& dy = ctx.input(0);
    const Tensor& x = ctx.input(1);
    const Tensor& w = ctx.input(2);
    const size_t spatial = strides_.size();
    if (x.rank() != spatial + 2 || w.rank() != spatial + 2 || dy.rank() != spatial + 2) {
      ctx.fail("X, W and dY must have " + std::to_string(spatial + 2) + " axes");
    }
    ConvGeometry s;
    s.n = x.dim(0);
    s.c = x.dim(1);
    s.m = w.dim(0);
    s.group = group_;
    if (s.c % group_ != 0 || s.m % group_ != 0 || w.dim(1) * group_ != s.c) ctx.fail("channels do not match group");
    s.in.assign(x.shape().begin() + 2, x.shape().end());
    s.out.assign(dy.shape().begin() + 2, dy.shape().end());
    s.kernel.assign(w.shape().begin() + 2, w.shape().end());
    s.strides = strides_;
    s.dilations = dilations_;
    s.pad_begin.assign(pads_.begin(), pads_.begin() + static_cast<int64_t>(spatial));
    const bool want_dx = ctx.has_output(0), want_dw = ctx.has_output(1), want_db = ctx.has_output(2);
    Tensor* dx = want_dx ? &ctx.allocate_output(0, x.dtype(), x.shape()) : nullptr;
    Tensor* dw = want_dw ? &ctx.allocate_output(1, w.dtype(), w.shape()) : nullptr;
    Tensor* db = want_db ? &ctx.allocate_output(2, dy.dtype(), {s.m}) : nullptr;
    if (dy.dtype() == DType::kFloat32 && run_onednn(ctx, s, dy, x, w, dx, dw, db)) return;
    dispatch<ONNXTRAIN_FLOAT_TYPES>(dy.dtype(), "ConvGrad", [&]<typename T>() {
      conv_grad_loop<T>(s, dy.data<T>(), x.data<T>(), w.data<T>(), dx ? dx->data<T>() : nullptr,
                        dw ? dw->data<T>() : nullptr);
      if (db) bias_grad<T>(s, dy.data<T>(), db->data<T>());
    });
  }

 private:
  bool run_onednn(KernelContext& ctx, const ConvGeometry& s, const Tensor& dy, const Tensor& x, const Tensor& w,
                  Tensor* dx, Tensor* dw, Tensor* db) {
    std::vector<int64_t> key;
    onednn::append_key(key, dy);
    onednn::append_key(key, x);
    onednn::append_key(key, w);
    PreparedConvGrad& p = cache_.get(key, [&] { return prepare_conv_grad(s); });
    if (!p.ok) return false;
    // dY in the data pass's layout; the weights pass reuses it when it wants the same one.
    Tensor dy_scratch;
    if (dx) {
      Tensor w_scratch, dx_scratch;
      const void* diff_dst = in_layout(ctx, p.dst, p.data_diff_dst, dy.raw_data(), dy_scratch);
      const void* weights = in_layout(ctx, p.wei, p.data_wei, w.raw_data(), w_scratch);
      const bool direct = p.data_diff_src == p.src;
      if (p.cropped) std::fill_n(dx->data<float>(), dx->numel(), 0.0f);  // the rows no window reads
      if (!direct) dx_scratch = onednn::scratch_bytes(ctx, p.data_diff_src.get_size());
      void* out = direct ? dx->raw_data() : dx_scratch.raw_data();
      p.data.run(ctx, {{DNNL_ARG_DIFF_DST, diff_dst}, {DNNL_ARG_WEIGHTS, weights}, {DNNL_ARG_DIFF_SRC, out}});
      if (!direct) onednn::reorder(p.data_diff_src, out, p.src, dx->raw_data());
    }
    if (dw || db) {
      Tensor dy_weights_scratch, x_scratch, dw_scratch, db_scratch;
      const bool reuse = dx && p.weights_diff_dst == p.data_diff_dst;
      const void* dy_data = reuse && dy_scratch.defined() ? dy_scratch.raw_data() : dy.raw_data();
      const void* diff_dst =
          reuse ? dy_data : in_layout(ctx, p.dst, p.weights_diff_dst, dy.raw_data(), dy_weights_scratch);
      const void* src = in_layout(ctx, p.src, p.weights_src, x.raw_data(), x_scratch);
      const bool direct = dw && p.weights_diff_wei == p.wei;
      if (!direct) dw_scratch = onednn::scratch_bytes(ctx, p.weights_diff_wei.get_size());
      void* dw_out = direct ? dw->raw_data() : dw_scratch.raw_data();
      void* db_out = db ? db->raw_data() : (db_scratch = ctx.allocate_scratch(DType::kFloat32, {s.m})).raw_data();
      p.weights.run(ctx, {{DNNL_ARG_SRC, src},
                          {DNNL_ARG_DIFF_DST, diff_dst},
                          {DNNL_ARG_DIFF_WEIGHTS, dw_out},
                          {DNNL_ARG_DIFF_BIAS, db_out}});
      if (dw && !direct) onednn::reorder(p.weights_diff_wei, dw_out, p.wei, dw->raw_data());
    }
    return true;
  }

  std::vector<int64_t> pads_, strides_, dilations_;
  int64_t group_ = 1;
  onednn::ShapeCache<PreparedConvGrad> cache_;
};

const KernelRegistration kConvGrad{"org.onnxtrain", "ConvGrad", 1, kLatestOpset,
                                   [](const KernelInfo& info) { return std::make_unique<ConvGradKernel>(info); }};

// (dY, X, W) => (dX, dW, dB) with Conv's attributes.
const KernelRegistration kMicrosoftConvGrad{"com.microsoft", "ConvGrad", 1, kLatestOpset,
                                            same_kernel_as("org.onnxtrain", "ConvGrad")};

}  // namespace
}  // namespace onnxtrain
