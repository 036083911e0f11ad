// What the recurrent nets' forward kernels (recurrent.cc) and their gradients
// (recurrent_grad.cc) share: the attributes, the gate activations, the step products, the
// inputs of one direction and the forward of one direction, which the gradients run again to
// record each step.
#pragma once

#include <onnxtrain/tensor.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <dnnl.hpp>
#include <exception>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "core/parallel.h"
#include "core/work_share.h"
#include "ops/cpu/multiversion.h"
#include "ops/cpu/onednn.h"
#include "ops/cpu/vector_math.h"
#include "ops/cpu/weight_stream.h"
#include "ops/kernel.h"

namespace onnxtrain::recurrent {

enum class Cell { kRnn, kGru, kLstm };

inline const char* cell_name(Cell cell) {
  return cell == Cell::kRnn ? "RNN" : cell == Cell::kGru ? "GRU" : "LSTM";
}
inline int64_t gate_count(Cell cell) {
  return cell == Cell::kRnn ? 1 : cell == Cell::kGru ? 3 : 4;
}
inline size_t activations_per_direction(Cell cell) {
  return cell == Cell::kRnn ? 1 : cell == Cell::kGru ? 2 : 3;
}

// ---- activations (the list in the ONNX RNN specs) ----

struct Activation {
  enum class Kind {
    kRelu,
    kTanh,
    kSigmoid,
    kAffine,
    kLeakyRelu,
    kThresholdedRelu,
    kScaledTanh,
    kHardSigmoid,
    kElu,
    kSoftsign,
    kSoftplus
  };
  Kind kind = Kind::kTanh;
  double alpha = 0, beta = 0;

  template <typename A>
  A apply(A x) const {
    const A a = static_cast<A>(alpha), b = static_cast<A>(beta);
    switch (kind) {
      case Kind::kRelu:
        return x > 0 ? x : A(0);
      case Kind::kTanh:
        return std::tanh(x);
      case Kind::kSigmoid:
        return A(1) / (A(1) + std::exp(-x));
      case Kind::kAffine:
        return a * x + b;
      case Kind::kLeakyRelu:
        return x >= 0 ? x : a * x;
      case Kind::kThresholdedRelu:
        return x > a ? x : A(0);
      case Kind::kScaledTanh:
        return a * std::tanh(b * x);
      case Kind::kHardSigmoid:
        return std::min(std::max(a * x + b, A(0)), A(1));
      case Kind::kElu:
        return x >= 0 ? x : a * (std::exp(x) - A(1));
      case Kind::kSoftsign:
        return x / (A(1) + std::abs(x));
      case Kind::kSoftplus:
        return x > 0 ? x + std::log1p(std::exp(-x)) : std::log1p(std::exp(x));
    }
    return x;
  }

  // dy/dx at x, where y = apply(x).
  template <typename A>
  A derivative(A x, A y) const {
    const A a = static_cast<A>(alpha), b = static_cast<A>(beta);
    switch (kind) {
      case Kind::kRelu:
        return x > 0 ? A(1) : A(0);
      case Kind::kTanh:
        return A(1) - y * y;
      case Kind::kSigmoid:
        return y * (A(1) - y);
      case Kind::kAffine:
        return a;
      case Kind::kLeakyRelu:
        return x >= 0 ? A(1) : a;
      case Kind::kThresholdedRelu:
        return x > a ? A(1) : A(0);
      case Kind::kScaledTanh: {
        const A t = std::tanh(b * x);
        return a * b * (A(1) - t * t);
      }
      case Kind::kHardSigmoid: {
        const A v = a * x + b;
        return v > 0 && v < 1 ? a : A(0);
      }
      case Kind::kElu:
        return x >= 0 ? A(1) : y + a;
      case Kind::kSoftsign: {
        const A d = A(1) + std::abs(x);
        return A(1) / (d * d);
      }
      case Kind::kSoftplus:
        return A(1) / (A(1) + std::exp(-x));
    }
    return A(1);
  }
};

// ---- attributes ----

struct RecurrentAttributes {
  Cell cell = Cell::kLstm;
  int64_t hidden = 0;
  int64_t directions = 1;
  bool reverse = false;                 // direction "reverse" (bidirectional: direction 1 is the reverse one)
  std::vector<Activation> activations;  // activations_per_direction(cell) per direction
  std::optional<double> clip;
  bool input_forget = false;
  bool linear_before_reset = false;
  int64_t layout = 0;

  const Activation& activation(int64_t direction, size_t k) const {
    return activations[static_cast<size_t>(direction) * activations_per_direction(cell) + k];
  }
  bool reverse_direction(int64_t d) const { return directions == 2 ? d == 1 : reverse; }
};

// The attributes of an RNN, GRU or LSTM node (and of its gradient), checked.
RecurrentAttributes read_attributes(const KernelInfo& info, Cell cell);

// ---- matrix products ----

// c [m, n] (row stride ldc) = alpha * op(a) op(b) + beta * c, row-major; op(a) is [m, k],
// a itself [k, m] when a_t; op(b) is [k, n], b itself [n, k] when b_t.
template <typename T>
void gemm(bool a_t, bool b_t, int64_t m, int64_t n, int64_t k, T alpha, const T* a, int64_t lda, const T* b,
          int64_t ldb, T beta, T* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  // A step's product is often a few microseconds of work: it stays on one thread then.
  const ThreadScope threads(
      onednn::threads_for(2.0 * static_cast<double>(m * n * k), onednn::kFlopsPerThread, omp_get_max_threads()));
  if constexpr (std::is_same_v<T, float>) {
    if (k > 0) {
      dnnl::sgemm(a_t ? 'T' : 'N', b_t ? 'T' : 'N', m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
      return;
    }
  }
  // Plain loops (float64, or k = 0): op(b) copied row-major so the inner loop is contiguous.
  std::vector<T> bt;
  const T* bp = b;
  int64_t ldbp = ldb;
  if (b_t) {
    bt.resize(static_cast<size_t>(k * n));
    for (int64_t p = 0; p < k; ++p)
      for (int64_t j = 0; j < n; ++j) bt[static_cast<size_t>(p * n + j)] = b[j * ldb + p];
    bp = bt.data();
    ldbp = n;
  }
  const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(1, k * n));
  parallel_for(m, grain, [&](int64_t begin, int64_t end) {
    std::vector<T> row(static_cast<size_t>(n));
    for (int64_t i = begin; i < end; ++i) {
      std::fill(row.begin(), row.end(), T(0));
      for (int64_t p = 0; p < k; ++p) {
        const T av = a_t ? a[p * lda + i] : a[i * lda + p];
        if (av == T(0)) continue;
        const T* br = bp + p * ldbp;
        for (int64_t j = 0; j < n; ++j) row[static_cast<size_t>(j)] += av * br[j];
      }
      T* cr = c + i * ldc;
      for (int64_t j = 0; j < n; ++j)
        cr[j] = alpha * row[static_cast<size_t>(j)] + (beta == T(0) ? T(0) : beta * cr[j]);
    }
  });
}

// The batches whose step products run on weights packed once per run (StepProduct) rather
// than sgemm, which packs them again every step.
inline constexpr int64_t kStreamedRows = 256;
inline bool streamed(int64_t rows) {
  return rows >= 1 && rows <= kStreamedRows;
}

namespace step_product {

inline constexpr int64_t kBlock = WeightStream::kBlock;            // outputs per block
inline constexpr int64_t kMaxColumns = WeightStream::kMaxColumns;  // columns per pass
using Lanes = WeightStream::Lanes;

// For the blocks [first, last) of packed W ([blocks][depth][16]), last to first when
// `backwards`, and kColumns columns (column c's element k at in[c * ldi + k]):
// out[c * ldo + o] = sum over k of W(o, k) * column c's k, o < outputs. Each sum is split kSplit ways along the depth
// so that kColumns * kSplit chains of FMAs overlap: one column in one chain waits out each FMA's latency (a batch-1
// step ran at about a quarter of the FMA rate so). The parts are added in a fixed order, whatever the vector width.
template <int kColumns, int kSplit>
ONNXTRAIN_MULTIVERSIONED void block_products(const float* packed, int64_t depth, int64_t outputs, int64_t first,
                                             int64_t last, bool backwards, const float* in, int64_t ldi, float* out,
                                             int64_t ldo) {
  for (int64_t i = 0; i < last - first; ++i) {
    const int64_t block = backwards ? last - 1 - i : first + i;
    const float* w = packed + block * depth * kBlock;
    Lanes acc[kSplit][kColumns] = {};
    int64_t k = 0;
    for (; k + kSplit <= depth; k += kSplit)
      for (int part = 0; part < kSplit; ++part) {
        Lanes wk;
        std::memcpy(&wk, w + (k + part) * kBlock, sizeof wk);
        for (int c = 0; c < kColumns; ++c) acc[part][c] += wk * in[c * ldi + k + part];
      }
    for (; k < depth; ++k) {
      Lanes wk;
      std::memcpy(&wk, w + k * kBlock, sizeof wk);
      for (int c = 0; c < kColumns; ++c) acc[0][c] += wk * in[c * ldi + k];
    }
    const int64_t o = block * kBlock;
    const int64_t valid = std::min(kBlock, outputs - o);
    for (int c = 0; c < kColumns; ++c) {
      Lanes sum = acc[0][c];
      for (int part = 1; part < kSplit; ++part) sum += acc[part][c];
      float* dst = out + c * ldo + o;
      if (valid == kBlock) {
        std::memcpy(dst, &sum, sizeof sum);
      } else {
        for (int64_t j = 0; j < valid; ++j) dst[j] = sum[j];
      }
    }
  }
}

using Products = void (*)(const float*, int64_t, int64_t, int64_t, int64_t, bool, const float*, int64_t, float*,
                          int64_t);

// block_products for 1 to kMaxColumns columns: the fewer the columns, the more ways the
// depth is split (at least 4 chains).
inline constexpr Products kProducts[kMaxColumns] = {&block_products<1, 4>, &block_products<2, 2>, &block_products<3, 2>,
                                                    &block_products<4, 1>, &block_products<5, 1>, &block_products<6, 1>,
                                                    &block_products<7, 1>, &block_products<8, 1>};

}  // namespace step_product

// A product each step repeats with the same weights: out [rows, n] (row stride ldo) =
// in [rows, k] (row stride ldi) W^T, with W(o, j) at w[o * os + j * ks]. In float32, for
// batches that stream, the weights are packed once into blocks of 16 outputs along the
// depth, which each step streams through once per 8 rows of the batch, their sums in
// registers. A run alternates `backwards` from step to step: the blocks the last step read
// are still in the core's cache (weights of about its size, 1 MB for an LSTM of H = 256,
// read in one order every step, would each be evicted just before being read again).
template <typename T>
class StepProduct {
 public:
  StepProduct(const T* w, int64_t n, int64_t k, int64_t os, int64_t ks, int64_t rows)
      : w_(w), n_(n), k_(k), os_(os), ks_(ks) {
    if constexpr (std::is_same_v<T, float>) {
      if (streamed(rows) && n > 0 && k > 0) pack();
    }
  }

  void run(const T* in, int64_t ldi, T* out, int64_t ldo, int64_t rows, bool backwards = false) const {
    if constexpr (std::is_same_v<T, float>) {
      if (packed_.numel() > 0 && streamed(rows)) {
        run_packed(in, ldi, out, ldo, rows, backwards);
        return;
      }
    }
    if (ks_ == 1) {
      gemm<T>(false, true, rows, n_, k_, T(1), in, ldi, w_, os_, T(0), out, ldo);
    } else {
      gemm<T>(false, false, rows, n_, k_, T(1), in, ldi, w_, ks_, T(0), out, ldo);
    }
  }

 private:
  static constexpr int64_t kBlock = step_product::kBlock;

  // W into [ceil(n / 16)][k][16], zeros past the last output.
  void pack() {
    const int64_t blocks = (n_ + kBlock - 1) / kBlock;
    packed_ = Tensor::zeros(DType::kFloat32, {blocks, k_, kBlock});
    float* dst = packed_.data<float>();
    const auto pack = [&](int64_t o, int64_t j) {
      dst[((o / kBlock) * k_ + j) * kBlock + o % kBlock] = w_[o * os_ + j * ks_];
    };
    if (os_ == 1) {  // read W along its rows either way
      for (int64_t j = 0; j < k_; ++j)
        for (int64_t o = 0; o < n_; ++o) pack(o, j);
    } else {
      for (int64_t o = 0; o < n_; ++o)
        for (int64_t j = 0; j < k_; ++j) pack(o, j);
    }
  }

  void run_packed(const float* in, int64_t ldi, float* out, int64_t ldo, int64_t rows, bool backwards) const {
    const int64_t blocks = packed_.dim(0);
    const int64_t block_bytes = k_ * kBlock * static_cast<int64_t>(sizeof(float));
    const float* packed = packed_.data<float>();
    parallel_for(blocks, std::max<int64_t>(1, static_cast<int64_t>(onednn::kBytesPerThread) / block_bytes),
                 [&](int64_t first, int64_t last) {
                   if (rows <= step_product::kMaxColumns) {
                     step_product::kProducts[static_cast<size_t>(rows - 1)](packed, k_, n_, first, last, backwards, in,
                                                                            ldi, out, ldo);
                     return;
                   }
                   // A block's weights, read again for the next rows, come from the cache.
                   for (int64_t i = 0; i < last - first; ++i)
                     for (int64_t r = 0; r < rows; r += step_product::kMaxColumns) {
                       const int64_t block = backwards ? last - 1 - i : first + i;
                       const int64_t count = std::min(step_product::kMaxColumns, rows - r);
                       step_product::kProducts[static_cast<size_t>(count - 1)](packed, k_, n_, block, block + 1, false,
                                                                               in + r * ldi, ldi, out + r * ldo, ldo);
                     }
                 });
  }

  const T* w_;
  int64_t n_, k_, os_, ks_;
  Tensor packed_;  // float32 only
};

// ---- the problem: sizes and the inputs of one direction ----

// Input indices shared by the three ops (LSTM adds initial_c 6 and P 7).
enum Input : size_t { kX = 0, kW = 1, kR = 2, kB = 3, kSequenceLens = 4, kInitialH = 5, kInitialC = 6, kP = 7 };

struct Sizes {
  int64_t seq = 0, batch = 0, input = 0, hidden = 0, directions = 1, gates = 1;
  int64_t gh() const { return gates * hidden; }
};

// Fails unless `t` has the shape `expected`.
void expect_shape(KernelContext& ctx, const Tensor& t, const char* name, const Shape& expected);
// Whether optional input i is given and not empty.
bool present(KernelContext& ctx, size_t i);
// Checks the inputs' shapes and element types against the attributes; their sizes.
Sizes check_inputs(KernelContext& ctx, const RecurrentAttributes& a);
// sequence_lens as int64 (every row the whole sequence when absent), checked.
std::vector<int64_t> sequence_lengths(KernelContext& ctx, const Sizes& s);

// Offsets of the layout-dependent tensors.
struct RecurrentLayout {
  int64_t layout, seq, batch, directions, hidden;
  // Y: [seq, dirs, batch, H] or [batch, seq, dirs, H]
  int64_t y(int64_t t, int64_t d, int64_t b) const {
    return layout == 0 ? ((t * directions + d) * batch + b) * hidden : ((b * seq + t) * directions + d) * hidden;
  }
  // Y_h, Y_c, initial_h, initial_c: [dirs, batch, H] or [batch, dirs, H]
  int64_t state(int64_t d, int64_t b) const {
    return layout == 0 ? (d * batch + b) * hidden : (b * directions + d) * hidden;
  }
  // X: [seq, batch, I] or [batch, seq, I]
  int64_t x(int64_t t, int64_t b, int64_t input) const {
    return layout == 0 ? (t * batch + b) * input : (b * seq + t) * input;
  }
};

// The tensors of one direction; x is time-major [seq, batch, I].
template <typename T>
struct Direction {
  const T* x = nullptr;
  const T* w = nullptr;   // [GH, I]
  const T* r = nullptr;   // [GH, H]
  const T* wb = nullptr;  // [GH] or null
  const T* rb = nullptr;  // [GH] or null
  const T* p = nullptr;   // [3H] (i, o, f) or null
  std::vector<T> h0, c0;  // [batch, H]
  bool reverse = false;
  Activation f, g, h;
};

// What the forward records for the gradient, indexed by time (not step): row (t, b). The
// buffers are the gradient's (null where the cell records nothing there).
template <typename T>
struct Record {
  T* pre = nullptr;    // [seq, batch, GH] the gate pre-activations (before clip); not for plain_lstm
  T* hprev = nullptr;  // [seq, batch, H] the hidden state the step read
  T* cprev = nullptr;  // LSTM: [seq, batch, H] the cell state the step read
  T* c = nullptr;      // LSTM: [seq, batch, H] the cell state the step wrote
  T* hr = nullptr;     // GRU with linear_before_reset: [seq, batch, H] H Rh^T + Rbh
  T* act = nullptr;    // [seq, batch, GH] the activated gates (RNN: H itself)
  T* hc = nullptr;     // LSTM: [seq, batch, H] h(C)
};

// The record as one tensor, the extra output of org.onnxtrain::{RNN,GRU,LSTM}Training (a
// training graph's forward, passes/share_recurrent_record.h) and the last input of the
// gradient, which then need not run the forward again: per direction, seq * batch rows of
// each buffer the cell records, one buffer after the other (act, pre unless every direction
// is the plain LSTM cell, hprev, LSTM's cprev, c and hc, GRU's hr with linear_before_reset).
// Rows past a row's length are zeros.
struct RecordLayout {
  int64_t rows = 0;  // seq * batch
  int64_t gh = 0, hidden = 0;
  bool pre = false, lstm = false, hr = false;

  RecordLayout(const RecurrentAttributes& a, const Sizes& s, bool every_direction_plain)
      : rows(s.seq * s.batch),
        gh(s.gh()),
        hidden(s.hidden),
        pre(!every_direction_plain),
        lstm(a.cell == Cell::kLstm),
        hr(a.cell == Cell::kGru && a.linear_before_reset) {}
  // Values per row and direction.
  int64_t width() const { return gh * (pre ? 2 : 1) + hidden * (1 + (lstm ? 3 : 0) + (hr ? 1 : 0)); }
  int64_t direction_size() const { return rows * width(); }
  // The buffers of direction d of the record at base.
  template <typename T>
  Record<T> at(T* base, int64_t d) const {
    T* p = base + d * direction_size();
    const auto next = [&](int64_t columns) {
      T* buffer = p;
      p += rows * columns;
      return buffer;
    };
    Record<T> r;
    r.act = next(gh);
    if (pre) r.pre = next(gh);
    r.hprev = next(hidden);
    if (lstm) {
      r.cprev = next(hidden);
      r.c = next(hidden);
      r.hc = next(hidden);
    }
    if (hr) r.hr = next(hidden);
    return r;
  }
};

// Where the record is: output of the training forward, input of the gradient.
inline size_t record_output(Cell cell) {
  return cell == Cell::kLstm ? 3 : 2;
}
inline size_t record_input(Cell cell) {
  return cell == Cell::kLstm ? 11 : 8;
}

inline int64_t time_of(bool reverse, int64_t step, int64_t len) {
  return reverse ? len - 1 - step : step;
}

// y[j] = act(clip(x[j])) for j < n. Sigmoid and Tanh, nearly every net's, run
// vector_math's branch-free forms so that the loop vectorizes; the rest stay scalar.
template <typename T>
ONNXTRAIN_MULTIVERSIONED [[gnu::flatten]] void activate(const Activation& act, const std::optional<double>& clip,
                                                        const T* x, T* y, int64_t n) {
  const T hi = clip ? static_cast<T>(*clip) : std::numeric_limits<T>::infinity();
  const T lo = -hi;
  switch (act.kind) {
    case Activation::Kind::kSigmoid:
      for (int64_t j = 0; j < n; ++j) y[j] = vector_math::sigmoid(std::min(std::max(x[j], lo), hi));
      return;
    case Activation::Kind::kTanh:
      for (int64_t j = 0; j < n; ++j) y[j] = vector_math::tanh(std::min(std::max(x[j], lo), hi));
      return;
    default:
      for (int64_t j = 0; j < n; ++j) y[j] = act.apply(std::min(std::max(x[j], lo), hi));
  }
}

// Whether direction dir of an LSTM is the usual cell (Sigmoid, Tanh, Tanh; no clip, peepholes
// or input_forget), which plain_lstm_cell runs; its gradient reads no pre-activations.
inline bool plain_lstm(const RecurrentAttributes& a, int64_t direction, bool peepholes) {
  using Kind = Activation::Kind;
  return a.cell == Cell::kLstm && a.activation(direction, 0).kind == Kind::kSigmoid &&
         a.activation(direction, 1).kind == Kind::kTanh && a.activation(direction, 2).kind == Kind::kTanh && !a.clip &&
         !peepholes && !a.input_forget;
}
template <typename T>
bool plain_lstm(const RecurrentAttributes& a, const Direction<T>& dir) {
  using Kind = Activation::Kind;
  return a.cell == Cell::kLstm && dir.f.kind == Kind::kSigmoid && dir.g.kind == Kind::kTanh &&
         dir.h.kind == Kind::kTanh && !a.clip && dir.p == nullptr && !a.input_forget;
}
// Whether every direction of the net is the plain LSTM cell (its record then has no pre).
inline bool plain_lstm_net(const RecurrentAttributes& a, bool peepholes) {
  for (int64_t d = 0; d < a.directions; ++d) {
    if (!plain_lstm(a, d, peepholes)) return false;
  }
  return true;
}

// The usual LSTM cell (Sigmoid, Tanh, Tanh; no clip, peepholes or input_forget) of one row
// in one pass: pre [4H] (i o f c, before the step's X W^T and biases) + xr + bias, c updated,
// h written: 5 activations and 4 loops over the row in one. kRecorded: the step also records
// what its gradient reads, the activated gates act [4H] (i o f c), C before (c_prev) and
// after (c_next) the step, and h(C) (hc); without it those pointers are not touched (null).
template <bool kRecorded, typename T>
ONNXTRAIN_MULTIVERSIONED [[gnu::flatten]] void plain_lstm_cell(const T* __restrict pre, const T* __restrict xr,
                                                               const T* __restrict bias, T* __restrict c,
                                                               T* __restrict h, T* __restrict act, T* __restrict c_prev,
                                                               T* __restrict c_next, T* __restrict hc, int64_t n) {
  for (int64_t j = 0; j < n; ++j) {
    const T i = vector_math::sigmoid(pre[j] + (xr[j] + bias[j]));
    const T o = vector_math::sigmoid(pre[n + j] + (xr[n + j] + bias[n + j]));
    const T f = vector_math::sigmoid(pre[2 * n + j] + (xr[2 * n + j] + bias[2 * n + j]));
    const T g = vector_math::tanh(pre[3 * n + j] + (xr[3 * n + j] + bias[3 * n + j]));
    if constexpr (kRecorded) {
      act[j] = i;
      act[n + j] = o;
      act[2 * n + j] = f;
      act[3 * n + j] = g;
      c_prev[j] = c[j];
    }
    const T cj = f * c[j] + i * g;
    c[j] = cj;
    const T t = vector_math::tanh(cj);
    if constexpr (kRecorded) {
      c_next[j] = cj;
      hc[j] = t;
    }
    h[j] = o * t;
  }
}

// d[j] = act'(x[j]) where y[j] = act(clip(x[j])), and 0 where the clip cut x[j] off.
template <typename T>
ONNXTRAIN_MULTIVERSIONED [[gnu::flatten]] void activation_derivative(const Activation& act,
                                                                     const std::optional<double>& clip, const T* x,
                                                                     const T* y, T* d, int64_t n) {
  const T hi = clip ? static_cast<T>(*clip) : std::numeric_limits<T>::infinity();
  const T lo = -hi;
  switch (act.kind) {
    case Activation::Kind::kSigmoid:
      for (int64_t j = 0; j < n; ++j) d[j] = x[j] >= lo && x[j] <= hi ? y[j] * (T(1) - y[j]) : T(0);
      return;
    case Activation::Kind::kTanh:
      for (int64_t j = 0; j < n; ++j) d[j] = x[j] >= lo && x[j] <= hi ? T(1) - y[j] * y[j] : T(0);
      return;
    default:
      for (int64_t j = 0; j < n; ++j) {
        d[j] = x[j] >= lo && x[j] <= hi ? act.derivative(std::min(std::max(x[j], lo), hi), y[j]) : T(0);
      }
  }
}

// The threads a whole run gets. Its steps are sequential; when a step's product is small,
// threads woken for the few products that are larger (the input projection) cost more than
// they save: a woken OpenMP worker that then spins or sleeps through the steps was measured
// to slow a 32-step LSTM at batch 1 from 0.5 to 12 ms on two busy cores. So one thread, unless
// a step's work is worth several.
inline int run_threads(const Sizes& s) {
  const double step_flops = 2.0 * static_cast<double>(s.batch * s.hidden * s.gh());
  return step_flops < 10 * onednn::kFlopsPerThread ? 1 : omp_get_max_threads();
}

// Each range of batch rows that a forward runs on a thread of its own is worth some 20 MFLOP
// of steps (about 0.35 ms on one core).
inline constexpr double kPartFlops = 20 * onednn::kFlopsPerThread;

// The ranges of batch rows a direction's steps run in, side by side, one per thread: the
// rows never meet, so the ranges run without a barrier per step (a fork per run, whose cost
// a busy core cannot multiply by the number of steps). One range inside a parallel region
// (the directions of a bidirectional net already share the threads).
inline int batch_parts(const Sizes& s) {
  if (omp_in_parallel()) return 1;
  const double flops = 2.0 * static_cast<double>(s.seq * s.batch * s.hidden * s.gh());
  const auto by_work = static_cast<int64_t>(flops / kPartFlops);
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>({omp_get_max_threads(), s.batch, by_work})));
}

// The threads a forward gets: those run_threads gives, or all when its batch splits.
inline int forward_threads(const Sizes& s) {
  const int available = omp_get_max_threads();
  if (run_threads(s) > 1) return available;
  const double flops = 2.0 * static_cast<double>(s.seq * s.batch * s.hidden * s.gh());
  return s.batch >= 2 && flops >= 2 * kPartFlops ? available : 1;
}

// Runs the ranges [0, parts) of a run side by side: first(part) for every part, then
// then(part) for every part, each part an item of share_work (core/work_share.h) on one
// thread. The steps need no barrier of their own, and a helper thread that gets no core
// costs nothing: the caller runs the parts no helper started. On two busy cores (load 5-6)
// parts on an OpenMP team, whose barriers spin while the partner waits for a core, made a
// 2-thread LSTM training step 3-5 times slower than with OMP_WAIT_POLICY=passive; parts on
// std::threads of their own competed with the team's worker still spinning after the
// previous kernel. An exception in a part is rethrown once the claimed parts have run.
template <typename First, typename Then>
void run_parts(int parts, First&& first, Then&& then) {
  if (parts <= 1) {
    for (int part = 0; part < parts; ++part) first(part);
    for (int part = 0; part < parts; ++part) then(part);
    return;
  }
  share_work(parts, 1, parts, [&](int64_t part, int) { first(static_cast<int>(part)); });
  share_work(parts, 1, parts, [&](int64_t part, int) { then(static_cast<int>(part)); });
}

// Runs body(d) for each direction d. A bidirectional net's two directions run side by side
// on two threads (run_parts) when two are available and the work is worth waking
// one (each direction then runs on its thread alone); otherwise in turn. An exception in
// either is rethrown.
template <typename F>
void for_each_direction(const Sizes& s, int available, F&& body) {
  const double flops = 2.0 * static_cast<double>(s.seq * s.batch * s.gh() * (s.hidden + s.input));
  if (s.directions == 2 && available >= 2 && flops >= 4 * onednn::kFlopsPerThread) {
    run_parts(
        2, [](int) {}, [&](int d) { body(int64_t{d}); });
    return;
  }
  for (int64_t d = 0; d < s.directions; ++d) body(d);
}

// Rows per parallel task: a task is worth starting for some 32K gate values.
inline int64_t row_grain(int64_t gh) {
  return std::max<int64_t>(1, 32768 / std::max<int64_t>(1, gh));
}

// Where a direction's outputs go: row (t, b), H values, at base + t * time_stride +
// b * batch_stride; nowhere when base is null.
template <typename T>
struct OutputRows {
  T* base = nullptr;
  int64_t time_stride = 0, batch_stride = 0;
  T* row(int64_t t, int64_t b) const { return base + t * time_stride + b * batch_stride; }
};

// The forward of one direction. y gets the outputs (the rows of steps past a row's length
// are left as they are: the caller zero-fills them); h, c (in: the initial state) end with
// the final state; `record`, when given, gets what the gradient reads; `projection`, when
// given, holds X W^T ([seq, batch, GH], the caller's buffer). Defined in recurrent.cc, for
// float and double.
template <typename T>
void run_direction(const RecurrentAttributes& a, const Sizes& s, const std::vector<int64_t>& lens,
                   const Direction<T>& dir, OutputRows<T> y, std::vector<T>& h, std::vector<T>& c, Record<T>* record,
                   const StepProduct<T>* packed_recurrent = nullptr, const StepProduct<T>* packed_reset = nullptr,
                   T* projection = nullptr);

// The same, y time-major [seq, batch, H] (zero-filled by the caller).
template <typename T>
void run_direction(const RecurrentAttributes& a, const Sizes& s, const std::vector<int64_t>& lens,
                   const Direction<T>& dir, T* y, std::vector<T>& h, std::vector<T>& c, Record<T>* record) {
  run_direction<T>(a, s, lens, dir, OutputRows<T>{y, s.batch * s.hidden, s.hidden}, h, c, record);
}

// The inputs of direction d (x_time_major: X as time_major_x gives it).
template <typename T>
Direction<T> direction_inputs(KernelContext& ctx, const RecurrentAttributes& a, const Sizes& s,
                              const RecurrentLayout& lay, const T* x_time_major, int64_t d) {
  Direction<T> dir;
  const int64_t GH = s.gh(), H = s.hidden;
  dir.x = x_time_major;
  dir.w = ctx.input(kW).data<T>() + d * GH * s.input;
  dir.r = ctx.input(kR).data<T>() + d * GH * H;
  if (present(ctx, kB)) {
    dir.wb = ctx.input(kB).data<T>() + d * 2 * GH;
    dir.rb = dir.wb + GH;
  }
  if (a.cell == Cell::kLstm && present(ctx, kP)) dir.p = ctx.input(kP).data<T>() + d * 3 * H;
  auto state = [&](size_t input, std::vector<T>& out) {
    out.assign(static_cast<size_t>(s.batch * H), T(0));
    if (!present(ctx, input)) return;
    const T* src = ctx.input(input).data<T>();
    for (int64_t b = 0; b < s.batch; ++b) std::copy_n(src + lay.state(d, b), H, out.data() + b * H);
  };
  state(kInitialH, dir.h0);
  if (a.cell == Cell::kLstm) state(kInitialC, dir.c0);
  dir.reverse = a.reverse_direction(d);
  const size_t per = activations_per_direction(a.cell);
  dir.f = a.activation(d, 0);
  if (per > 1) dir.g = a.activation(d, 1);
  if (per > 2) dir.h = a.activation(d, 2);
  return dir;
}

// X as time-major [seq, batch, I].
template <typename T>
std::vector<T> time_major_x(const Tensor& x, const Sizes& s, const RecurrentLayout& lay) {
  std::vector<T> out(static_cast<size_t>(s.seq * s.batch * s.input));
  const T* src = x.data<T>();
  for (int64_t t = 0; t < s.seq; ++t)
    for (int64_t b = 0; b < s.batch; ++b)
      std::copy_n(src + lay.x(t, b, s.input), s.input, out.data() + (t * s.batch + b) * s.input);
  return out;
}

}  // namespace onnxtrain::recurrent
