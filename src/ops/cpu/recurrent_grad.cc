// The gradients of the recurrent nets (recurrent.cc): org.onnxtrain::{RNN,GRU,LSTM}Grad,
// backpropagation through time, emitted by src/autodiff/rules/recurrent.cc. Inputs: the
// forward op's inputs (same positions, omitted ones empty) followed by the gradients of its
// outputs (dY, dY_h and, for LSTM, dY_c; each may be empty); the forward op's attributes.
// Outputs: dX, dW, dR, dB, d initial_h and, for LSTM, d initial_c and dP, each optional.
//
// The gradient kernels take the forward's record of each step (pre-activations and states)
// as their last input when the training forward gave it (org.onnxtrain::*Training,
// passes/share_recurrent_record.h), else run the forward again to record it; then walk the
// steps backwards, each step's d(H R^T) R on R packed once (StepProduct), batch rows side
// by side on threads as in the forward; the weight gradients and dX are a few GEMMs over all
// time steps at the end.
#include <algorithm>
#include <exception>
#include <optional>
#include <string>
#include <vector>

#include "core/dispatch.h"
#include "core/parallel.h"
#include "ops/cpu/recurrent.h"
#include "ops/kernel_registry.h"

namespace onnxtrain::recurrent {
namespace {

// The gradient of plain_lstm_cell for one row: dh (the gradient of the step's h, less dY's
// share), dy (dY's row), dc (in: the gradient of the step's C; out: of C_prev) and what the
// step recorded (act, c_prev, hc); writes the row's gate gradients dg [4H] (i o f c).
template <typename T>
ONNXTRAIN_MULTIVERSIONED [[gnu::flatten]] void plain_lstm_cell_gradient(const T* __restrict act,
                                                                        const T* __restrict c_prev,
                                                                        const T* __restrict hc, const T* __restrict dy,
                                                                        const T* __restrict dh, T* __restrict dc,
                                                                        T* __restrict dg, int64_t n) {
  for (int64_t j = 0; j < n; ++j) {
    const T i = act[j], o = act[n + j], f = act[2 * n + j], g = act[3 * n + j];
    const T dhj = dh[j] + dy[j];
    const T dxo = dhj * hc[j] * (o * (T(1) - o));
    const T dct = dc[j] + dhj * o * (T(1) - hc[j] * hc[j]);
    dc[j] = dct * f;
    dg[j] = dct * g * (i * (T(1) - i));
    dg[n + j] = dxo;
    dg[2 * n + j] = dct * c_prev[j] * (f * (T(1) - f));
    dg[3 * n + j] = dct * i * (T(1) - g * g);
  }
}

// GRU's share of a row's gradient once the activation derivatives der [3H] (z r h) are known:
// dh (the gradient of the step's h, less dY's share dy), the gates act (z r h activated), hp
// (H_prev), lin (linear_before_reset: H Rh^T + Rbh, else null); writes the gate gradients dg
// and drec (their recurrent product's), rin (the matrix Rh multiplied) and dhp (H_prev's
// gradient through the cell itself). Without linear_before_reset, r's gradients come later.
template <typename T>
ONNXTRAIN_MULTIVERSIONED [[gnu::flatten]] void gru_cell_gradient(const T* __restrict act, const T* __restrict der,
                                                                 const T* __restrict hp, const T* __restrict lin,
                                                                 const T* __restrict dh, const T* __restrict dy,
                                                                 T* __restrict dg, T* __restrict drec,
                                                                 T* __restrict rin, T* __restrict dhp, int64_t n) {
  const T *z = act, *r = act + n, *ht = act + 2 * n;
  if (lin != nullptr) {
    for (int64_t j = 0; j < n; ++j) {
      const T dhj = dh[j] + dy[j];
      const T dxz = dhj * (hp[j] - ht[j]) * der[j];
      const T dxh = dhj * (T(1) - z[j]) * der[2 * n + j];
      const T dxr = dxh * lin[j] * der[n + j];
      dg[j] = drec[j] = dxz;
      dg[n + j] = drec[n + j] = dxr;
      dg[2 * n + j] = dxh;
      drec[2 * n + j] = dxh * r[j];
      rin[j] = hp[j];
      dhp[j] = dhj * z[j];
    }
    return;
  }
  for (int64_t j = 0; j < n; ++j) {
    const T dhj = dh[j] + dy[j];
    const T dxz = dhj * (hp[j] - ht[j]) * der[j];
    const T dxh = dhj * (T(1) - z[j]) * der[2 * n + j];
    dg[j] = drec[j] = dxz;
    dg[2 * n + j] = drec[2 * n + j] = dxh;
    rin[j] = r[j] * hp[j];
    dhp[j] = dhj * z[j];
  }
}

// One direction's steps backwards for a range of batch rows: the rows never meet until the
// weight gradients, which the caller takes from dgates and drec over all steps at once.
// dy: time-major [seq, batch, H] or null. dgates ([seq, batch, GH]; zeros where a row is past
// its length) gets the gradients of the pre-activations as X W^T + Wb sees them; drec
// ([seq, batch, GH]) those of the recurrent product's output (different from dgates only in
// GRU's h gate), with rin ([seq, batch, H]) the matrix Rh multiplied.
template <typename T>
struct Backpropagation {
  const RecurrentAttributes& a;
  const Sizes& s;
  const std::vector<int64_t>& lens;
  const Direction<T>& dir;
  const Record<T>& rec;
  const T* dy;
  T* dgates;
  T* drec;                                  // GRU
  T* rin;                                   // GRU
  bool whole;                               // every row runs the whole sequence
  const StepProduct<T>& recurrent_product;  // d(H R^T) R, over GH (GRU without linear_before_reset: 2H)
  const StepProduct<T>* reset_product;      // GRU without linear_before_reset: dxh Rh

  // Rows [first, last): dh, dc (in: the gradients of the final state, out: of the initial
  // one), [last - first, H] each.
  void run(int64_t first, int64_t last, T* dh, T* dc) const {
    const int64_t H = s.hidden, GH = s.gh(), B = s.batch, rows = last - first;
    const bool gru = a.cell == Cell::kGru;
    const bool plain = plain_lstm(a, dir);
    // The rows of a step lie together in dgates when they all read the same time; else they
    // are gathered for the products.
    const bool together = !dir.reverse || whole;
    // Without GRU's share through the cell itself, the product writes dh directly.
    const bool direct = !gru && whole;
    std::vector<T> gathered(together ? 0 : static_cast<size_t>(rows * GH));
    std::vector<T> dhp(gru ? static_cast<size_t>(rows * H) : 0);  // d H_prev from the cell itself
    std::vector<T> dreset(gru && !a.linear_before_reset ? static_cast<size_t>(rows * H) : 0);
    std::vector<T> dh_rec(direct ? 0 : static_cast<size_t>(rows * H));
    std::vector<T> derivatives(plain ? 0 : static_cast<size_t>(rows * GH));
    std::vector<T> dhc(plain ? 0 : static_cast<size_t>(rows * H));
    const std::vector<T> no_dy(dy == nullptr ? static_cast<size_t>(H) : 0, T(0));
    const int64_t grain = row_grain(GH);
    for (int64_t step = s.seq - 1; step >= 0; --step) {
      const bool backwards = step % 2 == 1;  // as the forward: the blocks last read are in cache
      auto active = [&](int64_t b) { return step < lens[static_cast<size_t>(first + b)]; };
      auto row_of = [&](int64_t b) {
        return time_of(dir.reverse, step, lens[static_cast<size_t>(first + b)]) * B + first + b;
      };
      // The step's rows of base ([seq, batch, GH]) from column `column` on, row stride GH.
      auto step_rows = [&](const T* base, int64_t column) -> const T* {
        if (together) return base + ((dir.reverse ? s.seq - 1 - step : step) * B + first) * GH + column;
        for (int64_t b = 0; b < rows; ++b) {
          T* dst = gathered.data() + b * GH;
          if (active(b)) {
            std::copy_n(base + row_of(b) * GH, GH, dst);
          } else {
            std::fill_n(dst, GH, T(0));
          }
        }
        return gathered.data() + column;
      };
      parallel_for(rows, grain, [&](int64_t begin, int64_t end) {
        for (int64_t b = begin; b < end; ++b) {
          if (active(b))
            cell_gradient(b, row_of(b), plain, dh + b * H, dc + b * H, no_dy.data(), dhp, derivatives, dhc);
        }
      });
      if (gru && !a.linear_before_reset) {
        reset_product->run(step_rows(dgates, 2 * H), GH, dreset.data(), H, rows, backwards);
        parallel_for(rows, grain, [&](int64_t begin, int64_t end) {
          for (int64_t b = begin; b < end; ++b) {
            if (active(b)) reset_gradient(b, row_of(b), dreset, dhp, derivatives);
          }
        });
      }
      recurrent_product.run(step_rows(gru ? drec : dgates, 0), GH, direct ? dh : dh_rec.data(), H, rows, backwards);
      if (direct) continue;
      for (int64_t b = 0; b < rows; ++b) {
        if (!active(b)) continue;
        for (int64_t j = 0; j < H; ++j) {
          const size_t k = static_cast<size_t>(b * H + j);
          dh[k] = (gru ? dhp[k] : T(0)) + dh_rec[k];
        }
      }
    }
  }

  // Row `row` ([seq, batch] index) of local row b: its gate gradients, dc, and (GRU) dhp.
  void cell_gradient(int64_t b, int64_t row, bool plain, T* dhb, T* dcb, const T* no_dy, std::vector<T>& dhp,
                     std::vector<T>& derivatives, std::vector<T>& dhc_rows) const {
    const int64_t H = s.hidden, GH = s.gh();
    const T* dyr = dy != nullptr ? dy + row * H : no_dy;
    T* dg = dgates + row * GH;
    const T* act = rec.act + row * GH;
    if (plain) {
      plain_lstm_cell_gradient(act, rec.cprev + row * H, rec.hc + row * H, dyr, dhb, dcb, dg, H);
      return;
    }
    const T* pre = rec.pre + row * GH;
    const T* hp = rec.hprev + row * H;
    T* der = derivatives.data() + b * GH;  // each gate's activation derivative
    if (a.cell == Cell::kGru) {
      activation_derivative(dir.f, a.clip, pre, act, der, 2 * H);
      activation_derivative(dir.g, a.clip, pre + 2 * H, act + 2 * H, der + 2 * H, H);
      const T* lin = a.linear_before_reset ? rec.hr + row * H : nullptr;
      gru_cell_gradient(act, der, hp, lin, dhb, dyr, dg, drec + row * GH, rin + row * H, dhp.data() + b * H, H);
      return;
    }
    for (int64_t j = 0; j < H; ++j) dhb[j] += dyr[j];
    if (a.cell == Cell::kRnn) {
      activation_derivative(dir.f, a.clip, pre, act, der, H);
      for (int64_t j = 0; j < H; ++j) dg[j] = dhb[j] * der[j];
      return;
    }
    const T* cp = rec.cprev + row * H;
    const T* cn = rec.c + row * H;
    const T* hc = rec.hc + row * H;
    const T *pi = dir.p, *po = dir.p != nullptr ? dir.p + H : nullptr, *pf = dir.p != nullptr ? dir.p + 2 * H : nullptr;
    const T *i = act, *o = act + H, *f = act + 2 * H, *g = act + 3 * H;
    T *di_x = der, *do_x = der + H, *df_x = der + 2 * H, *dg_x = der + 3 * H;
    activation_derivative(dir.f, a.clip, pre, act, der, a.input_forget ? 2 * H : 3 * H);
    activation_derivative(dir.g, a.clip, pre + 3 * H, g, dg_x, H);
    T* dhc = dhc_rows.data() + b * H;  // h'(C)
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
      dg[j] = dxi;
      dg[H + j] = dxo;
      dg[2 * H + j] = dxf;
      dg[3 * H + j] = dxc;
    }
  }

  // GRU without linear_before_reset, after d(r (.) H_prev) = dxh Rh: r's gradient and
  // H_prev's share through the reset.
  void reset_gradient(int64_t b, int64_t row, const std::vector<T>& dreset, std::vector<T>& dhp,
                      const std::vector<T>& derivatives) const {
    const int64_t H = s.hidden, GH = s.gh();
    const T* hp = rec.hprev + row * H;
    T* dg = dgates + row * GH;
    T* dr = drec + row * GH;
    const T* r = rec.act + row * GH + H;
    const T* der = derivatives.data() + b * GH;
    for (int64_t j = 0; j < H; ++j) {
      const T drs = dreset[static_cast<size_t>(b * H + j)];
      dg[H + j] = dr[H + j] = drs * hp[j] * der[H + j];
      dhp[static_cast<size_t>(b * H + j)] += drs * r[j];
    }
  }
};

// c [m, n] = op(a) b (op(a) = a^T when a_t), as gemm, its rows in ranges shared among the
// threads (share_ranges), each range one thread's product: oneDNN's OpenMP team instead
// waits in barriers, spinning, for a partner that gets no core on a busy machine.
template <typename T>
void shared_gemm(bool a_t, int64_t m, int64_t n, int64_t k, const T* a, int64_t lda, const T* b, int64_t ldb, T* c,
                 int64_t ldc) {
  const int threads =
      onednn::threads_for(2.0 * static_cast<double>(m * n * k), onednn::kFlopsPerThread, omp_get_max_threads());
  if (threads <= 1) {
    gemm<T>(a_t, false, m, n, k, T(1), a, lda, b, ldb, T(0), c, ldc);
    return;
  }
  share_ranges(m, 64, threads, [&](int64_t first, int64_t last) {
    gemm<T>(a_t, false, last - first, n, k, T(1), a_t ? a + first : a + first * lda, lda, b, ldb, T(0), c + first * ldc,
            ldc);
  });
}

// The buffers of one direction, from the run's arena (kept from run to run: multi-megabyte
// heap buffers were handed back to the system after each run and faulted in again, page by
// page, in the next: some 1400 faults per training step of an LSTM 32 x 16 x 256).
template <typename T>
struct DirectionBuffers {
  Record<T> rec;
  T* projection = nullptr;  // X W^T
  T* dgates = nullptr;
  T* drec = nullptr;  // GRU
  T* rin = nullptr;   // GRU
  T* dx = nullptr;    // [seq, batch, I] this direction's share of dX
};

template <typename T>
void backward(KernelContext& ctx, const RecurrentAttributes& a, const Sizes& s) {
  const int available = omp_get_max_threads();
  const RecurrentLayout lay{a.layout, s.seq, s.batch, s.directions, s.hidden};
  const std::vector<int64_t> lens = sequence_lengths(ctx, s);
  const bool whole = std::all_of(lens.begin(), lens.end(), [&](int64_t len) { return len == s.seq; });
  const std::vector<T> x = time_major_x<T>(ctx.input(kX), s, lay);
  const DType dtype = ctx.input(kX).dtype();
  const bool lstm = a.cell == Cell::kLstm, gru = a.cell == Cell::kGru;
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

  // Every buffer's row is written when every row runs the whole sequence; else the rows past
  // a row's length are zeros. Taken here, not on the directions' threads.
  std::vector<Tensor> scratch;
  const auto take = [&](int64_t n, bool clear) {
    scratch.push_back(ctx.allocate_scratch(dtype, {n}));
    T* p = scratch.back().template data<T>();
    if (clear) std::fill_n(p, n, T(0));
    return p;
  };
  // The forward's record when the training forward gave it (org.onnxtrain::*Training); else
  // the forward runs again here to record the steps. The backward only reads it.
  const RecordLayout record_layout(a, s, plain_lstm_net(a, present(ctx, kP)));
  T* given = nullptr;
  if (const size_t at = record_input(a.cell); at < ctx.input_count() && present(ctx, at)) {
    const Tensor& t = ctx.input(at);
    expect_shape(ctx, t, "the forward's record", {s.directions, record_layout.direction_size()});
    if (t.dtype() != dtype) ctx.fail("the forward's record must have X's element type");
    given = const_cast<T*>(t.template data<T>());
  }
  std::vector<Direction<T>> dirs;
  std::vector<DirectionBuffers<T>> buffers(static_cast<size_t>(s.directions));
  for (int64_t d = 0; d < s.directions; ++d) {
    dirs.push_back(direction_inputs<T>(ctx, a, s, lay, x.data(), d));
    DirectionBuffers<T>& buf = buffers[static_cast<size_t>(d)];
    const bool clear = !whole;
    if (given != nullptr) {
      buf.rec = record_layout.at(given, d);
    } else {
      Record<T>& rec = buf.rec;
      if (!plain_lstm(a, dirs.back())) rec.pre = take(SB * GH, clear);
      rec.hprev = take(SB * H, clear);
      if (lstm) {
        rec.cprev = take(SB * H, clear);
        rec.c = take(SB * H, clear);
        rec.hc = take(SB * H, clear);
      }
      if (gru && a.linear_before_reset) rec.hr = take(SB * H, clear);
      rec.act = take(SB * GH, clear);
      buf.projection = take(SB * GH, false);
    }
    buf.dgates = take(SB * GH, clear);
    if (gru) {
      buf.drec = take(SB * GH, clear);
      buf.rin = take(SB * H, clear);
    }
    buf.dx = take(SB * s.input, false);
  }
  Tensor* dw = ctx.has_output(1) ? &ctx.allocate_output(1, dtype, ctx.input(kW).shape()) : nullptr;
  Tensor* dr = ctx.has_output(2) ? &ctx.allocate_output(2, dtype, ctx.input(kR).shape()) : nullptr;
  Tensor* db = ctx.has_output(3) ? &ctx.allocate_output(3, dtype, {s.directions, 2 * GH}) : nullptr;
  const Shape state_shape = a.layout == 0 ? Shape{s.directions, B, H} : Shape{B, s.directions, H};
  Tensor* dh0 = ctx.has_output(4) ? &ctx.allocate_output(4, dtype, state_shape) : nullptr;
  Tensor* dc0 = lstm && ctx.has_output(5) ? &ctx.allocate_output(5, dtype, state_shape) : nullptr;
  Tensor* dp = lstm && ctx.has_output(6) ? &ctx.allocate_output(6, dtype, {s.directions, 3 * H}) : nullptr;

  for_each_direction(s, available, [&](int64_t d) {
    const Direction<T>& dir = dirs[static_cast<size_t>(d)];
    // The forward again, recording each step, unless the training forward recorded them.
    DirectionBuffers<T>& buf = buffers[static_cast<size_t>(d)];
    Record<T>& rec = buf.rec;
    if (given == nullptr) {
      const ThreadScope threads(forward_threads(s));
      std::vector<T> h = dir.h0, c = dir.c0;
      run_direction<T>(a, s, lens, dir, OutputRows<T>{}, h, c, &rec, nullptr, nullptr, buf.projection);
    }
    // dY of this direction, time-major [seq, batch, H]: dY itself for one direction in layout 0.
    std::vector<T> dydir;
    const T* dy_rows = dy;
    if (dy != nullptr && (a.layout != 0 || s.directions != 1)) {
      dydir.resize(static_cast<size_t>(SB * H));
      for (int64_t t = 0; t < s.seq; ++t)
        for (int64_t b = 0; b < B; ++b) std::copy_n(dy + lay.y(t, d, b), H, dydir.data() + (t * B + b) * H);
      dy_rows = dydir.data();
    }
    std::vector<T> dh(static_cast<size_t>(B * H), T(0)), dc(static_cast<size_t>(B * H), T(0));
    for (int64_t b = 0; b < B; ++b) {
      if (dyh != nullptr) std::copy_n(dyh + lay.state(d, b), H, dh.data() + b * H);
      if (dyc != nullptr) std::copy_n(dyc + lay.state(d, b), H, dc.data() + b * H);
    }
    T* dgates = buf.dgates;
    T* drec = buf.drec;
    T* rin = buf.rin;
    {
      const int parts = batch_parts(s);
      const int64_t part_rows = (B + parts - 1) / parts;
      const int64_t depth = gru && !a.linear_before_reset ? 2 * H : GH;
      const StepProduct<T> recurrent_product(dir.r, H, depth, 1, H, part_rows);
      std::optional<StepProduct<T>> reset_product;
      if (gru && !a.linear_before_reset) reset_product.emplace(dir.r + 2 * H * H, H, H, 1, H, part_rows);
      const Backpropagation<T> steps{a,
                                     s,
                                     lens,
                                     dir,
                                     rec,
                                     dy_rows,
                                     dgates,
                                     drec,
                                     rin,
                                     whole,
                                     recurrent_product,
                                     reset_product ? &*reset_product : nullptr};
      const ThreadScope threads(run_threads(s));
      run_parts(
          parts, [](int) {},
          [&](int part) {
            const int64_t first = std::min<int64_t>(B, part * part_rows),
                          last = std::min<int64_t>(B, first + part_rows);
            if (first < last) steps.run(first, last, dh.data() + first * H, dc.data() + first * H);
          });
    }

    // dX = dG W; dW = dG^T X; dR = dRec^T H_prev (GRU's h gate: by rin); dB = column sums;
    // each one product over every step.
    shared_gemm<T>(false, SB, s.input, GH, dgates, GH, dir.w, s.input, buf.dx, s.input);
    if (dw != nullptr) {
      shared_gemm<T>(true, GH, s.input, SB, dgates, GH, x.data(), s.input, dw->data<T>() + d * GH * s.input, s.input);
    }
    const T* dr_rows = gru ? drec : dgates;
    if (dr != nullptr) {
      T* out = dr->data<T>() + d * GH * H;
      const int64_t plain_rows = gru ? 2 * H : GH;
      shared_gemm<T>(true, plain_rows, H, SB, dr_rows, GH, rec.hprev, H, out, H);
      if (gru) shared_gemm<T>(true, H, H, SB, drec + 2 * H, GH, rin, H, out + 2 * H * H, H);
    }
    if (db != nullptr) {
      T* out = db->data<T>() + d * 2 * GH;
      std::fill(out, out + 2 * GH, T(0));
      for (int64_t row = 0; row < SB; ++row) {
        const T* g = dgates + row * GH;
        for (int64_t j = 0; j < GH; ++j) out[j] += g[j];
      }
      if (gru) {
        for (int64_t row = 0; row < SB; ++row) {
          const T* g = drec + row * GH;
          for (int64_t j = 0; j < GH; ++j) out[GH + j] += g[j];
        }
      } else {
        std::copy(out, out + GH, out + GH);
      }
    }
    if (dp != nullptr) {
      T* out = dp->data<T>() + d * 3 * H;
      std::fill(out, out + 3 * H, T(0));
      for (int64_t row = 0; row < SB; ++row) {
        const T* g = dgates + row * GH;
        const T* cp = rec.cprev + row * H;
        const T* cn = rec.c + row * H;
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
    T* dx = buffers[0].dx;
    if (s.directions == 2) {
      for (int64_t i = 0; i < SB * s.input; ++i) dx[i] += buffers[1].dx[i];
    }
    T* out = ctx.allocate_output(0, dtype, ctx.input(kX).shape()).template data<T>();
    for (int64_t t = 0; t < s.seq; ++t)
      for (int64_t b = 0; b < B; ++b) std::copy_n(dx + (t * B + b) * s.input, s.input, out + lay.x(t, b, s.input));
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
