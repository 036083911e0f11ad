// The gradients of the recurrent nets (recurrent.cc): org.onnxtrain::{RNN,GRU,LSTM}Grad,
// backpropagation through time, emitted by src/autodiff/rules/recurrent.cc. Inputs: the
// forward op's inputs (same positions, omitted ones empty) followed by the gradients of its
// outputs (dY, dY_h and, for LSTM, dY_c; each may be empty); the forward op's attributes.
// Outputs: dX, dW, dR, dB, d initial_h and, for LSTM, d initial_c and dP, each optional.
//
// The gradient kernels run the forward again recording each step (pre-activations and
// states), then walk the steps backwards; the weight gradients are a few GEMMs over all
// time steps at the end.
#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "core/dispatch.h"
#include "core/parallel.h"
#include "ops/cpu/recurrent.h"
#include "ops/kernel_registry.h"

namespace onnxtrain::recurrent {
namespace {

// Gradients of one direction. dy: time-major [seq, batch, H] or null; dh, dc: in the
// gradients of the final state (zeros when absent), out those of the initial state. dgates
// ([seq, batch, GH], zero-filled) gets the gradients of the pre-activations as X W^T + Wb
// sees them; drec ([seq, batch, GH]) those of the recurrent product's output (different
// from dgates only in GRU's h gate), with rin ([seq, batch, H]) the matrix Rh multiplied.
template <typename T>
void backward_direction(const RecurrentAttributes& a, const Sizes& s, const std::vector<int64_t>& lens,
                        const Direction<T>& dir, const Record<T>& rec, const T* dy, std::vector<T>& dh,
                        std::vector<T>& dc, std::vector<T>& dgates, std::vector<T>& drec, std::vector<T>& rin) {
  const int64_t H = s.hidden, GH = s.gh(), B = s.batch;
  const bool gru = a.cell == Cell::kGru;
  std::vector<T> step_grad(static_cast<size_t>(B * GH));  // the step's gradient by R's rows
  std::vector<T> dhp(static_cast<size_t>(B * H));         // d H_prev from the cell itself
  std::vector<T> dreset(gru ? static_cast<size_t>(B * H) : 0);
  std::vector<T> dh_rec(static_cast<size_t>(B * H));
  std::vector<T> derivatives(static_cast<size_t>(B * GH));
  const StepProduct<T> recurrent_grad_product(dir.r, H, GH, 1, H, B);  // dG R
  std::optional<StepProduct<T>> reset_grad_product;                    // dxh Rh
  if (gru && !a.linear_before_reset) reset_grad_product.emplace(dir.r + 2 * H * H, H, H, 1, H, B);
  std::vector<T> dhp_scratch(static_cast<size_t>(B * H));
  const int64_t grain = row_grain(GH);
  for (int64_t step = s.seq - 1; step >= 0; --step) {
    auto active = [&](int64_t b) { return step < lens[static_cast<size_t>(b)]; };
    std::fill(step_grad.begin(), step_grad.end(), T(0));
    // Phase 1: everything but GRU's r gate (which needs d(r H_prev) Rh first).
    parallel_for(B, grain, [&](int64_t begin, int64_t end) {
      for (int64_t b = begin; b < end; ++b) {
        if (!active(b)) continue;
        const int64_t t = time_of(dir.reverse, step, lens[static_cast<size_t>(b)]);
        const size_t row = static_cast<size_t>(t * B + b);
        T* dhb = dh.data() + b * H;
        if (dy != nullptr) {
          const T* dyr = dy + row * H;
          for (int64_t j = 0; j < H; ++j) dhb[j] += dyr[j];
        }
        const T* pre = rec.pre.data() + row * GH;
        const T* hp = rec.hprev.data() + row * H;
        T* dg = dgates.data() + row * GH;
        T* dgs = step_grad.data() + b * GH;
        T* dhpb = dhp.data() + b * H;
        const T* act = rec.act.data() + row * GH;
        T* der = derivatives.data() + b * GH;  // each gate's activation derivative
        if (a.cell == Cell::kRnn) {
          activation_derivative(dir.f, a.clip, pre, act, der, H);
          for (int64_t j = 0; j < H; ++j) {
            dg[j] = dgs[j] = dhb[j] * der[j];
            dhpb[j] = 0;
          }
        } else if (gru) {
          T* dr = drec.data() + row * GH;
          T* rn = rin.data() + row * H;
          const T *z = act, *r = act + H, *ht = act + 2 * H;
          activation_derivative(dir.f, a.clip, pre, z, der, 2 * H);
          activation_derivative(dir.g, a.clip, pre + 2 * H, ht, der + 2 * H, H);
          for (int64_t j = 0; j < H; ++j) {
            const T dxz = dhb[j] * (hp[j] - ht[j]) * der[j];
            const T dxh = dhb[j] * (T(1) - z[j]) * der[2 * H + j];
            dg[j] = dgs[j] = dr[j] = dxz;
            dg[2 * H + j] = dxh;
            dhpb[j] = dhb[j] * z[j];
          }
          if (a.linear_before_reset) {
            const T* lin = rec.hr.data() + row * H;
            for (int64_t j = 0; j < H; ++j) {
              const T dxh = dg[2 * H + j];
              dg[H + j] = dgs[H + j] = dr[H + j] = dxh * lin[j] * der[H + j];
              dgs[2 * H + j] = dr[2 * H + j] = dxh * r[j];
              rn[j] = hp[j];
            }
          } else {
            for (int64_t j = 0; j < H; ++j) {
              dgs[2 * H + j] = dr[2 * H + j] = dg[2 * H + j];
              rn[j] = r[j] * hp[j];
            }
          }
        } else {
          const T* cp = rec.cprev.data() + row * H;
          const T* cn = rec.c.data() + row * H;
          const T* hc = rec.hc.data() + row * H;
          T* dcb = dc.data() + b * H;
          const T *pi = dir.p, *po = dir.p != nullptr ? dir.p + H : nullptr,
                  *pf = dir.p != nullptr ? dir.p + 2 * H : nullptr;
          const T *i = act, *o = act + H, *f = act + 2 * H, *g = act + 3 * H;
          T *di_x = der, *do_x = der + H, *df_x = der + 2 * H, *dg_x = der + 3 * H;
          activation_derivative(dir.f, a.clip, pre, act, der, a.input_forget ? 2 * H : 3 * H);
          activation_derivative(dir.g, a.clip, pre + 3 * H, g, dg_x, H);
          T* dhc = dhp_scratch.data() + b * H;  // h'(C)
          activation_derivative(dir.h, std::optional<double>{}, cn, hc, dhc, H);
          if (a.input_forget) std::fill(df_x, df_x + H, T(0));
          const T sign_if = a.input_forget ? T(-1) : T(0);
          for (int64_t j = 0; j < H; ++j) {
            const T dxo = dhb[j] * hc[j] * do_x[j];
            const T dct = dcb[j] + dhb[j] * o[j] * dhc[j] + (po != nullptr ? dxo * po[j] : T(0));
            const T df = dct * cp[j];
            const T dxi = (dct * g[j] + sign_if * df) * di_x[j];
            const T dxf = df * df_x[j];
            const T dxc = dct * i[j] * dg_x[j];
            dcb[j] = dct * f[j] + (pi != nullptr ? dxi * pi[j] + dxf * pf[j] : T(0));
            dg[j] = dgs[j] = dxi;
            dg[H + j] = dgs[H + j] = dxo;
            dg[2 * H + j] = dgs[2 * H + j] = dxf;
            dg[3 * H + j] = dgs[3 * H + j] = dxc;
            dhpb[j] = 0;
          }
        }
      }
    });
    if (gru && !a.linear_before_reset) {
      // d(r (.) H_prev) = dxh Rh; then r's gradient and H_prev's share through the reset.
      reset_grad_product->run(step_grad.data() + 2 * H, GH, dreset.data(), H, B);
      parallel_for(B, grain, [&](int64_t begin, int64_t end) {
        for (int64_t b = begin; b < end; ++b) {
          if (!active(b)) continue;
          const int64_t t = time_of(dir.reverse, step, lens[static_cast<size_t>(b)]);
          const size_t row = static_cast<size_t>(t * B + b);
          const T* hp = rec.hprev.data() + row * H;
          T* dg = dgates.data() + row * GH;
          T* dr = drec.data() + row * GH;
          T* dgs = step_grad.data() + b * GH;
          const T* r = rec.act.data() + row * GH + H;
          const T* der = derivatives.data() + b * GH;
          for (int64_t j = 0; j < H; ++j) {
            const T drs = dreset[static_cast<size_t>(b * H + j)];
            const T dxr = drs * hp[j] * der[H + j];
            dg[H + j] = dgs[H + j] = dr[H + j] = dxr;
            dhp[static_cast<size_t>(b * H + j)] += drs * r[j];
            dgs[2 * H + j] = 0;  // already carried into H_prev through the reset
          }
        }
      });
    }
    recurrent_grad_product.run(step_grad.data(), GH, dh_rec.data(), H, B);
    for (int64_t b = 0; b < B; ++b) {
      if (!active(b)) continue;
      for (int64_t j = 0; j < H; ++j) {
        const size_t k = static_cast<size_t>(b * H + j);
        dh[k] = dhp[k] + dh_rec[k];
      }
    }
  }
}

template <typename T>
void backward(KernelContext& ctx, const RecurrentAttributes& a, const Sizes& s) {
  const int available = omp_get_max_threads();
  const ThreadScope threads(run_threads(s));
  const RecurrentLayout lay{a.layout, s.seq, s.batch, s.directions, s.hidden};
  const std::vector<int64_t> lens = sequence_lengths(ctx, s);
  const std::vector<T> x = time_major_x<T>(ctx.input(kX), s, lay);
  const DType dtype = ctx.input(kX).dtype();
  const bool lstm = a.cell == Cell::kLstm;
  const size_t grads_at = lstm ? 8 : 6;  // where dY sits
  const Shape y_shape =
      a.layout == 0 ? Shape{s.seq, s.directions, s.batch, s.hidden} : Shape{s.batch, s.seq, s.directions, s.hidden};
  const Shape state = a.layout == 0 ? Shape{s.directions, s.batch, s.hidden} : Shape{s.batch, s.directions, s.hidden};
  auto grad_input = [&](size_t k) -> const T* {
    const size_t i = grads_at + k;
    if (i >= ctx.input_count() || !present(ctx, i)) return nullptr;
    const Tensor& t = ctx.input(i);
    static constexpr const char* kNames[] = {"dY", "dY_h", "dY_c"};
    expect_shape(ctx, t, kNames[k], k == 0 ? y_shape : state);
    if (t.dtype() != dtype) ctx.fail(std::string(kNames[k]) + " must have X's element type");
    return t.template data<T>();
  };
  const T* dy = grad_input(0);
  const T* dyh = grad_input(1);
  const T* dyc = lstm ? grad_input(2) : nullptr;
  const int64_t H = s.hidden, GH = s.gh(), B = s.batch, SB = s.seq * s.batch;

  std::vector<std::vector<T>> dxs(static_cast<size_t>(s.directions));  // each direction's share of dX
  Tensor* dw = ctx.has_output(1) ? &ctx.allocate_output(1, dtype, ctx.input(kW).shape()) : nullptr;
  Tensor* dr = ctx.has_output(2) ? &ctx.allocate_output(2, dtype, ctx.input(kR).shape()) : nullptr;
  Tensor* db = ctx.has_output(3) ? &ctx.allocate_output(3, dtype, {s.directions, 2 * GH}) : nullptr;
  const Shape state_shape = a.layout == 0 ? Shape{s.directions, B, H} : Shape{B, s.directions, H};
  Tensor* dh0 = ctx.has_output(4) ? &ctx.allocate_output(4, dtype, state_shape) : nullptr;
  Tensor* dc0 = lstm && ctx.has_output(5) ? &ctx.allocate_output(5, dtype, state_shape) : nullptr;
  Tensor* dp = lstm && ctx.has_output(6) ? &ctx.allocate_output(6, dtype, {s.directions, 3 * H}) : nullptr;

  for_each_direction(s, available, [&](int64_t d) {
    std::vector<T> dydir(dy != nullptr ? static_cast<size_t>(SB * H) : 0);
    std::vector<T>& dx = dxs[static_cast<size_t>(d)];
    dx.assign(static_cast<size_t>(SB * s.input), T(0));
    const Direction<T> dir = direction_inputs<T>(ctx, a, s, lay, x.data(), d);
    Record<T> rec;
    rec.pre.assign(static_cast<size_t>(SB * GH), T(0));
    rec.hprev.assign(static_cast<size_t>(SB * H), T(0));
    if (lstm) {
      rec.cprev.assign(static_cast<size_t>(SB * H), T(0));
      rec.c.assign(static_cast<size_t>(SB * H), T(0));
    }
    if (a.cell == Cell::kGru && a.linear_before_reset) rec.hr.assign(static_cast<size_t>(SB * H), T(0));
    rec.act.assign(static_cast<size_t>(SB * GH), T(0));
    if (lstm) rec.hc.assign(static_cast<size_t>(SB * H), T(0));
    {
      std::vector<T> h = dir.h0, c = dir.c0;
      std::vector<T> y(static_cast<size_t>(SB * H), T(0));
      run_direction<T>(a, s, lens, dir, y.data(), h, c, &rec);
    }
    if (dy != nullptr) {
      for (int64_t t = 0; t < s.seq; ++t)
        for (int64_t b = 0; b < B; ++b) std::copy_n(dy + lay.y(t, d, b), H, dydir.data() + (t * B + b) * H);
    }
    std::vector<T> dh(static_cast<size_t>(B * H), T(0)), dc(static_cast<size_t>(B * H), T(0));
    for (int64_t b = 0; b < B; ++b) {
      if (dyh != nullptr) std::copy_n(dyh + lay.state(d, b), H, dh.data() + b * H);
      if (dyc != nullptr) std::copy_n(dyc + lay.state(d, b), H, dc.data() + b * H);
    }
    std::vector<T> dgates(static_cast<size_t>(SB * GH), T(0));
    std::vector<T> drec(a.cell == Cell::kGru ? static_cast<size_t>(SB * GH) : 0, T(0));
    std::vector<T> rin(a.cell == Cell::kGru ? static_cast<size_t>(SB * H) : 0, T(0));
    backward_direction<T>(a, s, lens, dir, rec, dy != nullptr ? dydir.data() : nullptr, dh, dc, dgates, drec, rin);

    // dX += dG W; dW = dG^T X; dR = dRec^T H_prev (GRU's h gate: by rin); dB = column sums.
    gemm<T>(false, false, SB, s.input, GH, T(1), dgates.data(), GH, dir.w, s.input, T(1), dx.data(), s.input);
    if (dw != nullptr) {
      gemm<T>(true, false, GH, s.input, SB, T(1), dgates.data(), GH, x.data(), s.input, T(0),
              dw->data<T>() + d * GH * s.input, s.input);
    }
    const std::vector<T>& dr_rows = a.cell == Cell::kGru ? drec : dgates;
    if (dr != nullptr) {
      T* out = dr->data<T>() + d * GH * H;
      const int64_t plain_rows = a.cell == Cell::kGru ? 2 * H : GH;
      gemm<T>(true, false, plain_rows, H, SB, T(1), dr_rows.data(), GH, rec.hprev.data(), H, T(0), out, H);
      if (a.cell == Cell::kGru) {
        gemm<T>(true, false, H, H, SB, T(1), drec.data() + 2 * H, GH, rin.data(), H, T(0), out + 2 * H * H, H);
      }
    }
    if (db != nullptr) {
      T* out = db->data<T>() + d * 2 * GH;
      std::fill(out, out + 2 * GH, T(0));
      for (int64_t row = 0; row < SB; ++row) {
        for (int64_t j = 0; j < GH; ++j) {
          out[j] += dgates[static_cast<size_t>(row * GH + j)];
          out[GH + j] += dr_rows[static_cast<size_t>(row * GH + j)];
        }
      }
    }
    if (dp != nullptr) {
      T* out = dp->data<T>() + d * 3 * H;
      std::fill(out, out + 3 * H, T(0));
      for (int64_t row = 0; row < SB; ++row) {
        const T* g = dgates.data() + row * GH;
        const T* cp = rec.cprev.data() + row * H;
        const T* cn = rec.c.data() + row * H;
        for (int64_t j = 0; j < H; ++j) {
          out[j] += g[j] * cp[j];                  // i
          out[H + j] += g[H + j] * cn[j];          // o
          out[2 * H + j] += g[2 * H + j] * cp[j];  // f
        }
      }
    }
    for (int64_t b = 0; b < B; ++b) {
      if (dh0 != nullptr) std::copy_n(dh.data() + b * H, H, dh0->data<T>() + lay.state(d, b));
      if (dc0 != nullptr) std::copy_n(dc.data() + b * H, H, dc0->data<T>() + lay.state(d, b));
    }
  });
  if (ctx.has_output(0)) {
    std::vector<T>& dx = dxs[0];
    for (size_t d = 1; d < dxs.size(); ++d)
      for (size_t i = 0; i < dx.size(); ++i) dx[i] += dxs[d][i];
    T* out = ctx.allocate_output(0, dtype, ctx.input(kX).shape()).template data<T>();
    for (int64_t t = 0; t < s.seq; ++t)
      for (int64_t b = 0; b < B; ++b)
        std::copy_n(dx.data() + (t * B + b) * s.input, s.input, out + lay.x(t, b, s.input));
  }
}

KernelFactory backward_kernel(Cell cell) {
  return [cell](const KernelInfo& info) {
    const RecurrentAttributes a = read_attributes(info, cell);
    return make_kernel([a](KernelContext& ctx) {
      const Sizes s = check_inputs(ctx, a);
      dispatch<float, double>(ctx.input(kX).dtype(), cell_name(a.cell), [&]<typename T>() { backward<T>(ctx, a, s); });
    });
  };
}

constexpr const char* kDomain = "org.onnxtrain";

const KernelRegistration kRNNGrad{kDomain, "RNNGrad", 1, kLatestOpset, backward_kernel(Cell::kRnn)};
const KernelRegistration kGRUGrad{kDomain, "GRUGrad", 1, kLatestOpset, backward_kernel(Cell::kGru)};
const KernelRegistration kLSTMGrad{kDomain, "LSTMGrad", 1, kLatestOpset, backward_kernel(Cell::kLstm)};

}  // namespace
}  // namespace onnxtrain::recurrent
