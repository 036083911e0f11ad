// The recurrent nets of ONNX: RNN, GRU and LSTM (every direction, activation, clip,
// sequence_lens, initial state, peepholes, input_forget, linear_before_reset, layout 0 and
// 1). Their gradients, org.onnxtrain::{RNN,GRU,LSTM}Grad, are in recurrent_grad.cc; what
// both share in recurrent.h. org.onnxtrain::{RNN,GRU,LSTM}Training, a training graph's
// forward inside the executor (passes/share_recurrent_record.h), is the same kernel with the
// record its gradient reads as one more output.
//
// One direction runs as: the input projection X W^T + biases for every time step in one
// GEMM; then per step one GEMM of the hidden state by R^T for the whole batch, and the
// gate arithmetic row by row, rows in parallel. With sequence_lens, row b of step s reads
// time s (forward) or len_b - 1 - s (reverse) and is idle from s = len_b on: its state is
// carried, its Y rows are zero.
#include "ops/cpu/recurrent.h"

#include <algorithm>
#include <cctype>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/dispatch.h"
#include "core/parallel.h"
#include "ops/kernel_registry.h"

namespace onnxtrain::recurrent {
namespace {

struct ActivationName {
  const char* name;
  Activation::Kind kind;
  bool uses_alpha, uses_beta;
  double default_alpha, default_beta;  // onnxruntime's defaults
};

constexpr ActivationName kActivationNames[] = {
    {"relu", Activation::Kind::kRelu, false, false, 0, 0},
    {"tanh", Activation::Kind::kTanh, false, false, 0, 0},
    {"sigmoid", Activation::Kind::kSigmoid, false, false, 0, 0},
    {"affine", Activation::Kind::kAffine, true, true, 0, 0},
    {"leakyrelu", Activation::Kind::kLeakyRelu, true, false, 0.01, 0},
    {"thresholdedrelu", Activation::Kind::kThresholdedRelu, true, false, 0, 0},
    {"scaledtanh", Activation::Kind::kScaledTanh, true, true, 0, 0},
    {"hardsigmoid", Activation::Kind::kHardSigmoid, true, true, 0.2, 0.5},
    {"elu", Activation::Kind::kElu, true, false, 1.0, 0},
    {"softsign", Activation::Kind::kSoftsign, false, false, 0, 0},
    {"softplus", Activation::Kind::kSoftplus, false, false, 0, 0},
};

std::vector<std::string> strings_attribute(const KernelInfo& info, std::string_view name) {
  const ir::Attribute* a = info.node().attribute(name);
  if (a == nullptr) return {};
  return a->strings;
}

std::vector<Activation> read_activations(const KernelInfo& info, Cell cell, int64_t directions) {
  const size_t per = activations_per_direction(cell);
  std::vector<std::string> names = strings_attribute(info, "activations");
  if (names.empty()) {
    if (cell == Cell::kRnn) names = {"Tanh"};
    if (cell == Cell::kGru) names = {"Sigmoid", "Tanh"};
    if (cell == Cell::kLstm) names = {"Sigmoid", "Tanh", "Tanh"};
  }
  if (names.size() == per && directions == 2) {
    const std::vector<std::string> one = names;
    names.insert(names.end(), one.begin(), one.end());
  }
  if (names.size() != per * static_cast<size_t>(directions)) {
    info.fail("activations has " + std::to_string(names.size()) + " names, expected " +
              std::to_string(per * static_cast<size_t>(directions)) + " (" + std::to_string(per) + " per direction)");
  }
  const std::vector<float> alphas = info.floats_attribute("activation_alpha", std::vector<float>{});
  const std::vector<float> betas = info.floats_attribute("activation_beta", std::vector<float>{});
  size_t next_alpha = 0, next_beta = 0;
  std::vector<Activation> out;
  for (const std::string& name : names) {
    std::string lower = name;
    std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char ch) { return std::tolower(ch); });
    const ActivationName* found = nullptr;
    for (const ActivationName& a : kActivationNames) {
      if (lower == a.name) found = &a;
    }
    if (found == nullptr) {
      info.fail("activation '" + name +
                "' is not one of Relu, Tanh, Sigmoid, Affine, LeakyRelu, ThresholdedRelu, ScaledTanh, "
                "HardSigmoid, Elu, Softsign, Softplus");
    }
    Activation a{found->kind, found->default_alpha, found->default_beta};
    if (found->uses_alpha && next_alpha < alphas.size()) a.alpha = alphas[next_alpha++];
    if (found->uses_beta && next_beta < betas.size()) a.beta = betas[next_beta++];
    out.push_back(a);
  }
  return out;
}

}  // namespace

RecurrentAttributes read_attributes(const KernelInfo& info, Cell cell) {
  RecurrentAttributes a;
  a.cell = cell;
  a.hidden = info.int_attribute("hidden_size", 0);
  const std::string direction = info.string_attribute("direction", std::string("forward"));
  if (direction == "bidirectional") {
    a.directions = 2;
  } else if (direction == "reverse") {
    a.reverse = true;
  } else if (direction != "forward") {
    info.fail("direction is '" + direction + "', expected forward, reverse or bidirectional");
  }
  a.activations = read_activations(info, cell, a.directions);
  if (info.has_attribute("clip")) {
    a.clip = info.float_attribute("clip");
    if (!(*a.clip > 0)) info.fail("clip is " + std::to_string(*a.clip) + ", expected a positive threshold");
  }
  if (cell == Cell::kLstm) a.input_forget = info.int_attribute("input_forget", 0) != 0;
  if (cell == Cell::kGru) a.linear_before_reset = info.int_attribute("linear_before_reset", 0) != 0;
  a.layout = info.int_attribute("layout", 0);
  if (a.layout != 0 && a.layout != 1) info.fail("layout is " + std::to_string(a.layout) + ", expected 0 or 1");
  return a;
}

void expect_shape(KernelContext& ctx, const Tensor& t, const char* name, const Shape& expected) {
  if (t.shape() != expected) {
    ctx.fail(std::string(name) + " is " + shape_string(t.shape()) + ", expected " + shape_string(expected));
  }
}

bool present(KernelContext& ctx, size_t i) {
  return ctx.has_input(i) && ctx.input(i).numel() > 0;
}

Sizes check_inputs(KernelContext& ctx, const RecurrentAttributes& a) {
  const Tensor& x = ctx.input(kX);
  const Tensor& w = ctx.input(kW);
  const Tensor& r = ctx.input(kR);
  if (x.rank() != 3) ctx.fail("X must have rank 3, got " + shape_string(x.shape()));
  if (w.rank() != 3) ctx.fail("W must have rank 3, got " + shape_string(w.shape()));
  Sizes s;
  s.seq = a.layout == 0 ? x.dim(0) : x.dim(1);
  s.batch = a.layout == 0 ? x.dim(1) : x.dim(0);
  s.input = x.dim(2);
  s.directions = a.directions;
  s.gates = gate_count(a.cell);
  s.hidden = a.hidden > 0 ? a.hidden : w.dim(1) / s.gates;
  if (s.hidden <= 0) ctx.fail("hidden_size must be positive");
  const DType dtype = x.dtype();
  for (size_t i : {kW, kR}) {
    if (ctx.input(i).dtype() != dtype) ctx.fail("W, R and X must have the same element type");
  }
  expect_shape(ctx, w, "W", {s.directions, s.gh(), s.input});
  expect_shape(ctx, r, "R", {s.directions, s.gh(), s.hidden});
  if (present(ctx, kB)) expect_shape(ctx, ctx.input(kB), "B", {s.directions, 2 * s.gh()});
  if (present(ctx, kSequenceLens)) {
    const Tensor& lens = ctx.input(kSequenceLens);
    expect_shape(ctx, lens, "sequence_lens", {s.batch});
    if (lens.dtype() != DType::kInt32 && lens.dtype() != DType::kInt64) ctx.fail("sequence_lens must be int32");
  }
  const Shape state = a.layout == 0 ? Shape{s.directions, s.batch, s.hidden} : Shape{s.batch, s.directions, s.hidden};
  if (present(ctx, kInitialH)) expect_shape(ctx, ctx.input(kInitialH), "initial_h", state);
  if (a.cell == Cell::kLstm) {
    if (present(ctx, kInitialC)) expect_shape(ctx, ctx.input(kInitialC), "initial_c", state);
    if (present(ctx, kP)) expect_shape(ctx, ctx.input(kP), "P", {s.directions, 3 * s.hidden});
  }
  const size_t float_inputs = a.cell == Cell::kLstm ? 8 : 6;
  for (size_t i : {kB, kInitialH, kInitialC, kP}) {
    if (i < float_inputs && present(ctx, i) && ctx.input(i).dtype() != dtype) {
      ctx.fail("every float input must have X's element type");
    }
  }
  return s;
}

std::vector<int64_t> sequence_lengths(KernelContext& ctx, const Sizes& s) {
  std::vector<int64_t> lens(static_cast<size_t>(s.batch), s.seq);
  if (!present(ctx, kSequenceLens)) return lens;
  const Tensor& t = ctx.input(kSequenceLens);
  for (int64_t b = 0; b < s.batch; ++b) {
    const int64_t v = t.dtype() == DType::kInt32 ? t.data<int32_t>()[b] : t.data<int64_t>()[b];
    if (v < 0 || v > s.seq) {
      ctx.fail("sequence_lens[" + std::to_string(b) + "] is " + std::to_string(v) + ", expected 0 to " +
               std::to_string(s.seq));
    }
    lens[static_cast<size_t>(b)] = v;
  }
  return lens;
}

namespace {

// The biases every step adds to X W^T: Wb + Rb, but GRU's h gate Wbh alone (its Rbh sits
// inside the reset); zeros without B.
template <typename T>
std::vector<T> step_bias(const RecurrentAttributes& a, const Sizes& s, const Direction<T>& dir) {
  const int64_t GH = s.gh();
  std::vector<T> bias(static_cast<size_t>(GH), T(0));
  if (dir.wb == nullptr) return bias;
  const int64_t rb_end = a.cell == Cell::kGru ? 2 * s.hidden : GH;
  for (int64_t j = 0; j < GH; ++j) bias[static_cast<size_t>(j)] = dir.wb[j] + (j < rb_end ? dir.rb[j] : T(0));
  return bias;
}

// One direction's steps, after the input projection, for a range of batch rows: the rows
// of a batch never meet, so ranges run side by side without a barrier per step.
template <typename T>
struct Recurrence {
  const RecurrentAttributes& a;
  const Sizes& s;
  const std::vector<int64_t>& lens;
  const Direction<T>& dir;
  OutputRows<T> y;
  Record<T>* record;
  const T* xw;    // [seq, batch, GH] X W^T
  const T* bias;  // [GH] step_bias
  const StepProduct<T>& recurrent_product;
  const StepProduct<T>* reset_product;  // GRU without linear_before_reset

  // Rows [first, last): h, c their state (in: initial, out: final), [last - first, H] each.
  // The hidden state ping-pongs between h and a second buffer: each step reads one and
  // writes the other (rows past their length carried over), rather than copying it first.
  void run(int64_t first, int64_t last, T* h, T* c) const {
    const int64_t H = s.hidden, GH = s.gh(), B = s.batch, rows = last - first;
    const bool gru = a.cell == Cell::kGru;
    std::vector<T> rec(static_cast<size_t>(rows * GH));
    std::vector<T> acts(static_cast<size_t>(rows * GH));            // activated gates
    std::vector<T> reset(gru ? static_cast<size_t>(rows * H) : 0);  // r (.) H_prev, or r
    std::vector<T> hlin(gru ? static_cast<size_t>(rows * H) : 0);   // (r (.) H_prev) Rh^T
    std::vector<T> other_h(static_cast<size_t>(rows * H));
    T* hprev_all = h;  // the state this step reads
    T* hnext_all = other_h.data();
    const int64_t grain = row_grain(GH);
    const T* rbh = gru && dir.rb != nullptr ? dir.rb + 2 * H : nullptr;
    const T* bi = bias;
    const T *pi = dir.p, *po = dir.p != nullptr ? dir.p + H : nullptr, *pf = dir.p != nullptr ? dir.p + 2 * H : nullptr;
    const bool plain = plain_lstm(a, dir);
    for (int64_t step = 0; step < s.seq; ++step) {
      const bool backwards = step % 2 == 1;
      recurrent_product.run(hprev_all, H, rec.data(), GH, rows, backwards);
      auto active = [&](int64_t b) { return step < lens[static_cast<size_t>(first + b)]; };
      auto time = [&](int64_t b) { return time_of(dir.reverse, step, lens[static_cast<size_t>(first + b)]); };
      // GRU's phase 1: its pre-activations and r, which the reset product needs.
      if (gru) {
        parallel_for(rows, grain, [&](int64_t begin, int64_t end) {
          for (int64_t b = begin; b < end; ++b) {
            if (!active(b)) continue;
            T* pre = rec.data() + b * GH;
            const T* xr = xw + (time(b) * B + first + b) * GH;
            // The h gate keeps its recurrent part apart (linear_before_reset) or gets it later.
            for (int64_t j = 0; j < 2 * H; ++j) pre[j] += xr[j] + bi[j];
            if (!a.linear_before_reset) {
              for (int64_t j = 2 * H; j < GH; ++j) pre[j] = xr[j] + bi[j];
            }
            T* r = acts.data() + b * GH + H;
            activate(dir.f, a.clip, pre + H, r, H);
            T* rs = reset.data() + b * H;
            const T* hp = hprev_all + b * H;
            for (int64_t j = 0; j < H; ++j) rs[j] = a.linear_before_reset ? r[j] : r[j] * hp[j];
          }
        });
        if (!a.linear_before_reset) reset_product->run(reset.data(), H, hlin.data(), H, rows, backwards);
      }
      // Phase 2: the cell.
      parallel_for(rows, grain, [&](int64_t begin, int64_t end) {
        for (int64_t b = begin; b < end; ++b) {
          const T* hp = hprev_all + b * H;
          T* hb = hnext_all + b * H;
          if (!active(b)) {
            std::copy(hp, hp + H, hb);
            continue;
          }
          const int64_t t = time(b);
          const int64_t row = t * B + first + b;
          T* pre = rec.data() + b * GH;
          T* act = acts.data() + b * GH;
          const T* xr = xw + row * GH;
          if (record != nullptr) std::copy(hp, hp + H, record->hprev + row * H);
          if (a.cell == Cell::kRnn) {
            for (int64_t j = 0; j < GH; ++j) pre[j] += xr[j] + bi[j];
            if (record != nullptr) std::copy(pre, pre + GH, record->pre + row * GH);
            activate(dir.f, a.clip, pre, hb, H);
            if (record != nullptr) std::copy(hb, hb + H, record->act + row * GH);
          } else if (gru) {
            T* xh = pre + 2 * H;
            if (a.linear_before_reset) {
              const T* r = act + H;
              T* lin_out = record != nullptr ? record->hr + row * H : nullptr;
              for (int64_t j = 0; j < H; ++j) {
                const T lin = xh[j] + (rbh != nullptr ? rbh[j] : T(0));  // H Rh^T + Rbh
                if (lin_out != nullptr) lin_out[j] = lin;
                xh[j] = (xr[2 * H + j] + bi[2 * H + j]) + r[j] * lin;
              }
            } else {
              const T* hl = hlin.data() + b * H;
              for (int64_t j = 0; j < H; ++j) xh[j] += hl[j] + (rbh != nullptr ? rbh[j] : T(0));
            }
            if (record != nullptr) std::copy(pre, pre + GH, record->pre + row * GH);
            T* z = act;
            T* ht = act + 2 * H;
            activate(dir.f, a.clip, pre, z, H);
            activate(dir.g, a.clip, xh, ht, H);
            for (int64_t j = 0; j < H; ++j) hb[j] = (T(1) - z[j]) * ht[j] + z[j] * hp[j];
            if (record != nullptr) std::copy(act, act + GH, record->act + row * GH);
          } else if (plain && record == nullptr) {
            plain_lstm_cell<false, T>(pre, xr, bi, c + b * H, hb, nullptr, nullptr, nullptr, nullptr, H);
          } else if (plain) {
            plain_lstm_cell<true, T>(pre, xr, bi, c + b * H, hb, record->act + row * GH, record->cprev + row * H,
                                     record->c + row * H, record->hc + row * H, H);
          } else {
            for (int64_t j = 0; j < GH; ++j) pre[j] += xr[j] + bi[j];
            // gates i o f c at 0, H, 2H, 3H
            T* cb = c + b * H;
            if (record != nullptr) std::copy(cb, cb + H, record->cprev + row * H);
            if (pi != nullptr) {
              for (int64_t j = 0; j < H; ++j) {
                pre[j] += pi[j] * cb[j];
                pre[2 * H + j] += pf[j] * cb[j];
              }
            }
            T *i = act, *o = act + H, *f = act + 2 * H, *g = act + 3 * H;
            activate(dir.f, a.clip, pre, i, H);
            if (a.input_forget) {
              for (int64_t j = 0; j < H; ++j) f[j] = T(1) - i[j];
            } else {
              activate(dir.f, a.clip, pre + 2 * H, f, H);
            }
            activate(dir.g, a.clip, pre + 3 * H, g, H);
            for (int64_t j = 0; j < H; ++j) cb[j] = f[j] * cb[j] + i[j] * g[j];
            if (po != nullptr) {
              for (int64_t j = 0; j < H; ++j) pre[H + j] += po[j] * cb[j];
            }
            activate(dir.f, a.clip, pre + H, o, H);
            activate(dir.h, std::optional<double>{}, cb, hb, H);
            if (record != nullptr) {
              std::copy(hb, hb + H, record->hc + row * H);
              std::copy(act, act + GH, record->act + row * GH);
            }
            for (int64_t j = 0; j < H; ++j) hb[j] *= o[j];
            if (record != nullptr) {
              std::copy(pre, pre + GH, record->pre + row * GH);
              std::copy(cb, cb + H, record->c + row * H);
            }
          }
          if (y.base != nullptr) std::copy(hb, hb + H, y.row(t, first + b));
        }
      });
      std::swap(hprev_all, hnext_all);
    }
    if (hprev_all != h) std::copy(hprev_all, hprev_all + rows * H, h);
  }
};

}  // namespace

template <typename T>
void run_direction(const RecurrentAttributes& a, const Sizes& s, const std::vector<int64_t>& lens,
                   const Direction<T>& dir, OutputRows<T> y, std::vector<T>& h, std::vector<T>& c, Record<T>* record,
                   const StepProduct<T>* packed_recurrent, const StepProduct<T>* packed_reset, T* projection) {
  const int64_t H = s.hidden, GH = s.gh(), B = s.batch;
  const bool gru = a.cell == Cell::kGru;
  // X W^T, all steps at once (every element written: no need to clear it first), below; in
  // the caller's buffer when it gives one.
  std::unique_ptr<T[]> own_xw;
  T* xw = projection;
  if (xw == nullptr) {
    own_xw = std::make_unique_for_overwrite<T[]>(static_cast<size_t>(s.seq * B * GH));
    xw = own_xw.get();
  }
  const auto project = [&](int64_t first, int64_t last) {
    gemm<T>(false, true, last - first, GH, s.input, T(1), dir.x + first * s.input, s.input, dir.w, s.input, T(0),
            xw + first * GH, GH);
  };
  const std::vector<T> bias = step_bias(a, s, dir);
  // GRU without linear_before_reset multiplies only z and r by R in each step's product,
  // h after the reset.
  const int64_t rec_cols = gru && !a.linear_before_reset ? 2 * H : GH;
  // H R^T, and GRU's (r (.) H) Rh^T: the kernel's packed ones when it has them and they serve
  // this batch, else packed for this run.
  const int parts = batch_parts(s);
  const int64_t part_rows = (B + parts - 1) / parts;
  const bool use_packed = packed_recurrent != nullptr && streamed(part_rows);
  std::unique_ptr<StepProduct<T>> own_recurrent, own_reset;
  if (!use_packed) {
    own_recurrent = std::make_unique<StepProduct<T>>(dir.r, rec_cols, H, H, 1, part_rows);
    if (gru && !a.linear_before_reset) {
      own_reset = std::make_unique<StepProduct<T>>(dir.r + 2 * H * H, H, H, H, 1, part_rows);
    }
  }
  const Recurrence<T> recurrence{a,
                                 s,
                                 lens,
                                 dir,
                                 y,
                                 record,
                                 xw,
                                 bias.data(),
                                 use_packed ? *packed_recurrent : *own_recurrent,
                                 use_packed ? packed_reset : own_reset.get()};
  if (parts == 1) {
    project(0, s.seq * B);
    recurrence.run(0, B, h.data(), a.cell == Cell::kLstm ? c.data() : nullptr);
    return;
  }
  // Each part a share_work item (run_parts): each projects its share of the steps'
  // rows, then, past one barrier, runs its batch rows through the steps.
  const int64_t all_rows = s.seq * B, projected_rows = (all_rows + parts - 1) / parts;
  run_parts(
      parts,
      [&](int part) {
        project(std::min(all_rows, part * projected_rows), std::min(all_rows, (part + 1) * projected_rows));
      },
      [&](int part) {
        const int64_t first = std::min<int64_t>(B, part * part_rows), last = std::min<int64_t>(B, first + part_rows);
        if (first < last) {
          recurrence.run(first, last, h.data() + first * H, a.cell == Cell::kLstm ? c.data() + first * H : nullptr);
        }
      });
}

template void run_direction<float>(const RecurrentAttributes&, const Sizes&, const std::vector<int64_t>&,
                                   const Direction<float>&, OutputRows<float>, std::vector<float>&, std::vector<float>&,
                                   Record<float>*, const StepProduct<float>*, const StepProduct<float>*, float*);
template void run_direction<double>(const RecurrentAttributes&, const Sizes&, const std::vector<int64_t>&,
                                    const Direction<double>&, OutputRows<double>, std::vector<double>&,
                                    std::vector<double>&, Record<double>*, const StepProduct<double>*,
                                    const StepProduct<double>*, double*);

namespace {

// A constant R (inference) packed once, when the kernel is created: per direction, the
// step products H R^T (z and r only for GRU without linear_before_reset) and that GRU's
// (r (.) H) Rh^T, for the float32 batches that stream (streamed()).
struct PackedRecurrence {
  Tensor r;  // the constant, kept alive
  std::vector<StepProduct<float>> recurrent, reset;
};

std::shared_ptr<const PackedRecurrence> pack_recurrence(const KernelInfo& info, const RecurrentAttributes& a) {
  const Tensor* r = info.packable_constant_input(kR);
  const int64_t gates = gate_count(a.cell);
  if (r == nullptr || r->dtype() != DType::kFloat32 || r->rank() != 3 || r->dim(0) != a.directions) return nullptr;
  const int64_t H = r->dim(2);
  if (H <= 0 || r->dim(1) != gates * H || (a.hidden > 0 && a.hidden != H)) return nullptr;
  auto packed = std::make_shared<PackedRecurrence>();
  packed->r = *r;
  const bool split_reset = a.cell == Cell::kGru && !a.linear_before_reset;
  for (int64_t d = 0; d < a.directions; ++d) {
    const float* rd = packed->r.data<float>() + d * gates * H * H;
    packed->recurrent.emplace_back(rd, split_reset ? 2 * H : gates * H, H, H, 1, kStreamedRows);
    if (split_reset) packed->reset.emplace_back(rd + 2 * H * H, H, H, H, 1, kStreamedRows);
  }
  return packed;
}

template <typename T>
void forward(KernelContext& ctx, const RecurrentAttributes& a, const Sizes& s, const PackedRecurrence* packed) {
  const int available = omp_get_max_threads();
  const ThreadScope threads(forward_threads(s));
  const RecurrentLayout lay{a.layout, s.seq, s.batch, s.directions, s.hidden};
  const std::vector<int64_t> lens = sequence_lengths(ctx, s);
  // X is time-major already in layout 0.
  std::vector<T> x_copy;
  if (a.layout != 0) x_copy = time_major_x<T>(ctx.input(kX), s, lay);
  const T* x = a.layout == 0 ? ctx.input(kX).data<T>() : x_copy.data();
  const DType dtype = ctx.input(kX).dtype();
  const Shape y_shape =
      a.layout == 0 ? Shape{s.seq, s.directions, s.batch, s.hidden} : Shape{s.batch, s.seq, s.directions, s.hidden};
  const Shape state_shape =
      a.layout == 0 ? Shape{s.directions, s.batch, s.hidden} : Shape{s.batch, s.directions, s.hidden};
  T* y = ctx.has_output(0) ? ctx.allocate_output(0, dtype, y_shape).template data<T>() : nullptr;
  T* yh = ctx.has_output(1) ? ctx.allocate_output(1, dtype, state_shape).template data<T>() : nullptr;
  T* yc = a.cell == Cell::kLstm && ctx.has_output(2) ? ctx.allocate_output(2, dtype, state_shape).template data<T>()
                                                     : nullptr;
  const int64_t H = s.hidden;
  // Y's rows past a row's length are zeros; the steps write every other row.
  const bool short_rows = std::any_of(lens.begin(), lens.end(), [&](int64_t len) { return len < s.seq; });
  if (y != nullptr && short_rows) std::fill_n(y, s.seq * s.directions * s.batch * H, T(0));
  // A training graph's forward (org.onnxtrain::*Training) also gives what its gradient reads.
  const RecordLayout record_layout(a, s, plain_lstm_net(a, present(ctx, kP)));
  T* record = nullptr;
  if (ctx.has_output(record_output(a.cell))) {
    const int64_t size = record_layout.direction_size();
    record = ctx.allocate_output(record_output(a.cell), dtype, {s.directions, size}).template data<T>();
    if (short_rows) std::fill_n(record, s.directions * size, T(0));
  }
  for_each_direction(s, available, [&](int64_t d) {
    const Direction<T> dir = direction_inputs<T>(ctx, a, s, lay, x, d);
    std::vector<T> h = dir.h0, c = dir.c0;
    OutputRows<T> y_rows;
    if (y != nullptr) {
      y_rows = {y + lay.y(0, d, 0), lay.y(1, d, 0) - lay.y(0, d, 0), lay.y(0, d, 1) - lay.y(0, d, 0)};
    }
    const StepProduct<T>*packed_recurrent = nullptr, *packed_reset = nullptr;
    if constexpr (std::is_same_v<T, float>) {
      if (packed != nullptr) {
        packed_recurrent = &packed->recurrent[static_cast<size_t>(d)];
        if (!packed->reset.empty()) packed_reset = &packed->reset[static_cast<size_t>(d)];
      }
    }
    Record<T> rec;
    if (record != nullptr) rec = record_layout.at(record, d);
    run_direction<T>(a, s, lens, dir, y_rows, h, c, record != nullptr ? &rec : nullptr, packed_recurrent, packed_reset);
    for (int64_t b = 0; b < s.batch; ++b) {
      if (yh != nullptr) std::copy_n(h.data() + b * H, H, yh + lay.state(d, b));
      if (yc != nullptr) std::copy_n(c.data() + b * H, H, yc + lay.state(d, b));
    }
  });
}

KernelFactory forward_kernel(Cell cell) {
  return [cell](const KernelInfo& info) {
    const RecurrentAttributes a = read_attributes(info, cell);
    std::shared_ptr<const PackedRecurrence> packed = pack_recurrence(info, a);
    return make_kernel([a, packed](KernelContext& ctx) {
      const Sizes s = check_inputs(ctx, a);
      dispatch<float, double>(ctx.input(kX).dtype(), cell_name(a.cell),
                              [&]<typename T>() { forward<T>(ctx, a, s, packed.get()); });
    });
  };
}

const KernelRegistration kRNN{"", "RNN", 7, kLatestOpset, forward_kernel(Cell::kRnn)};
const KernelRegistration kGRU{"", "GRU", 7, kLatestOpset, forward_kernel(Cell::kGru)};
const KernelRegistration kLSTM{"", "LSTM", 7, kLatestOpset, forward_kernel(Cell::kLstm)};
// A training graph's forward with its record as an extra output (RecordLayout); only inside
// the executor (passes/share_recurrent_record.h), never saved.
const KernelRegistration kRNNTraining{"org.onnxtrain", "RNNTraining", 1, kLatestOpset, forward_kernel(Cell::kRnn)};
const KernelRegistration kGRUTraining{"org.onnxtrain", "GRUTraining", 1, kLatestOpset, forward_kernel(Cell::kGru)};
const KernelRegistration kLSTMTraining{"org.onnxtrain", "LSTMTraining", 1, kLatestOpset, forward_kernel(Cell::kLstm)};

}  // namespace
}  // namespace onnxtrain::recurrent
