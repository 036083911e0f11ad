// The recurrent nets of ONNX: RNN, GRU and LSTM (every direction, activation, clip,
// sequence_lens, initial state, peepholes, input_forget, linear_before_reset, layout 0 and
// 1), and their gradients org.onnxtrain::{RNN,GRU,LSTM}Grad (backpropagation through time,
// emitted by src/autodiff/rules/recurrent.cc).
//
// One direction runs as: the input projection X W^T + biases for every time step in one
// GEMM; then per step one GEMM of the hidden state by R^T for the whole batch, and the
// gate arithmetic row by row, rows in parallel. With sequence_lens, row b of step s reads
// time s (forward) or len_b - 1 - s (reverse) and is idle from s = len_b on: its state is
// carried, its Y rows are zero.
//
// The gradient kernels run the forward again recording each step (pre-activations and
// states), then walk the steps backwards; the weight gradients are a few GEMMs over all
// time steps at the end.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <dnnl.hpp>
#include <exception>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/dispatch.h"
#include "core/parallel.h"
#include "ops/cpu/multiversion.h"
#include "ops/cpu/onednn.h"
#include "ops/cpu/vector_math.h"
#include "ops/cpu/weight_stream.h"
#include "ops/kernel_registry.h"

namespace onnxtrain {
namespace {

enum class Cell { kRnn, kGru, kLstm };

const char* cell_name(Cell cell) {
  return cell == Cell::kRnn ? "RNN" : cell == Cell::kGru ? "GRU" : "LSTM";
}
int64_t gate_count(Cell cell) {
  return cell == Cell::kRnn ? 1 : cell == Cell::kGru ? 3 : 4;
}
size_t activations_per_direction(Cell cell) {
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

// The batches a WeightStream serves better than sgemm: stream / sgemm, one thread, 32 steps
// of H = 256: LSTM 0.65 / 0.44 ms at 1 row, 0.87 / 0.94 at 4, 2.8 / 3.2 at 16; GRU alike.
inline constexpr int64_t kMinStreamedRows = 4;
inline constexpr int64_t kStreamedRows = 2 * WeightStream::kMaxColumns;
inline bool streamed(int64_t rows) {
  return rows >= kMinStreamedRows && rows <= kStreamedRows;
}

// A product each step repeats with the same weights: out [rows, n] (row stride ldo) =
// in [rows, k] (row stride ldi) W^T, with W(o, j) at w[o * os + j * ks]. In float32, for
// batches that stream, the weights are packed once per run into a WeightStream, which
// streams them once per step; sgemm would pack them again every step.
template <typename T>
class StepProduct {
 public:
  StepProduct(const T* w, int64_t n, int64_t k, int64_t os, int64_t ks, int64_t rows)
      : w_(w), n_(n), k_(k), os_(os), ks_(ks) {
    if constexpr (std::is_same_v<T, float>) {
      if (streamed(rows) && n > 0 && k > 0) stream_ = std::make_unique<WeightStream>(w, n, k, os, ks);
    }
  }

  void run(const T* in, int64_t ldi, T* out, int64_t ldo, int64_t rows) const {
    if constexpr (std::is_same_v<T, float>) {
      if (stream_) {
        stream_->multiply(
            in, rows, 1, ldi, static_cast<int64_t>(onednn::kBytesPerThread),
            [&](int64_t first, int64_t count, int64_t first_row, int64_t count_rows, const WeightStream::Lanes* sums) {
              for (int64_t i = 0; i < count_rows; ++i) {
                T* o = out + (first_row + i) * ldo + first;
                for (int64_t j = 0; j < count; ++j) o[j] = sums[i][j];
              }
            });
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
  const T* w_;
  int64_t n_, k_, os_, ks_;
  std::unique_ptr<WeightStream> stream_;  // float32 only
};

// ---- the problem: sizes and the inputs of one direction ----

// Input indices shared by the three ops (LSTM adds initial_c 6 and P 7).
enum Input : size_t { kX = 0, kW = 1, kR = 2, kB = 3, kSequenceLens = 4, kInitialH = 5, kInitialC = 6, kP = 7 };

struct Sizes {
  int64_t seq = 0, batch = 0, input = 0, hidden = 0, directions = 1, gates = 1;
  int64_t gh() const { return gates * hidden; }
};

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

// What the forward records for the gradient, indexed by time (not step): row (t, b).
template <typename T>
struct Record {
  std::vector<T> pre;    // [seq, batch, GH] the gate pre-activations (before clip)
  std::vector<T> hprev;  // [seq, batch, H] the hidden state the step read
  std::vector<T> cprev;  // LSTM: [seq, batch, H] the cell state the step read
  std::vector<T> c;      // LSTM: [seq, batch, H] the cell state the step wrote
  std::vector<T> hr;     // GRU with linear_before_reset: [seq, batch, H] H Rh^T + Rbh
  std::vector<T> act;    // [seq, batch, GH] the activated gates (RNN: H itself)
  std::vector<T> hc;     // LSTM: [seq, batch, H] h(C)
};

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
int run_threads(const Sizes& s) {
  const double step_flops = 2.0 * static_cast<double>(s.batch * s.hidden * s.gh());
  return step_flops < 10 * onednn::kFlopsPerThread ? 1 : omp_get_max_threads();
}

// Runs body(d) for each direction d. A bidirectional net's two directions run side by side
// on two threads when two are available and the work is worth waking one (each direction
// then runs on its thread alone); otherwise in turn. An exception in either is rethrown.
template <typename F>
void for_each_direction(const Sizes& s, int available, F&& body) {
  const double flops = 2.0 * static_cast<double>(s.seq * s.batch * s.gh() * (s.hidden + s.input));
  if (s.directions == 2 && available >= 2 && flops >= 4 * onednn::kFlopsPerThread) {
    std::exception_ptr errors[2];
#pragma omp parallel for num_threads(2) schedule(static, 1)
    for (int64_t d = 0; d < 2; ++d) {
      try {
        body(d);
      } catch (...) {
        errors[d] = std::current_exception();
      }
    }
    for (const std::exception_ptr& e : errors) {
      if (e) std::rethrow_exception(e);
    }
    return;
  }
  for (int64_t d = 0; d < s.directions; ++d) body(d);
}

// Rows per parallel task: a task is worth starting for some 32K gate values.
int64_t row_grain(int64_t gh) {
  return std::max<int64_t>(1, 32768 / std::max<int64_t>(1, gh));
}

// The forward of one direction. y (time-major [seq, batch, H], zero-filled by the caller)
// gets the outputs; h, c (in: the initial state) end with the final state; `record`, when
// given, gets what the gradient reads.
template <typename T>
void run_direction(const RecurrentAttributes& a, const Sizes& s, const std::vector<int64_t>& lens,
                   const Direction<T>& dir, T* y, std::vector<T>& h, std::vector<T>& c, Record<T>* record,
                   const StepProduct<T>* packed_recurrent = nullptr, const StepProduct<T>* packed_reset = nullptr) {
  const int64_t H = s.hidden, GH = s.gh(), B = s.batch;
  const bool gru = a.cell == Cell::kGru;
  // X W^T + Wb (+ Rb, except GRU's h gate, whose Rb sits inside the reset), all steps at once.
  std::vector<T> xw(static_cast<size_t>(s.seq * B * GH));
  gemm<T>(false, true, s.seq * B, GH, s.input, T(1), dir.x, s.input, dir.w, s.input, T(0), xw.data(), GH);
  if (dir.wb != nullptr) {
    std::vector<T> bias(dir.wb, dir.wb + GH);
    const int64_t rb_end = gru ? 2 * H : GH;
    for (int64_t j = 0; j < rb_end; ++j) bias[static_cast<size_t>(j)] += dir.rb[j];
    for (int64_t row = 0; row < s.seq * B; ++row)
      for (int64_t j = 0; j < GH; ++j) xw[static_cast<size_t>(row * GH + j)] += bias[static_cast<size_t>(j)];
  }
  // GRU without linear_before_reset multiplies only z and r by R in each step's product,
  // h after the reset.
  const int64_t rec_cols = gru && !a.linear_before_reset ? 2 * H : GH;
  // H R^T, and GRU's (r (.) H) Rh^T: the kernel's packed ones when it has them and they serve
  // this batch, else packed for this run.
  const bool use_packed = packed_recurrent != nullptr && streamed(B);
  std::unique_ptr<StepProduct<T>> own_recurrent, own_reset;
  if (!use_packed) {
    own_recurrent = std::make_unique<StepProduct<T>>(dir.r, rec_cols, H, H, 1, B);
    if (gru && !a.linear_before_reset) own_reset = std::make_unique<StepProduct<T>>(dir.r + 2 * H * H, H, H, H, 1, B);
  }
  const StepProduct<T>& recurrent_product = use_packed ? *packed_recurrent : *own_recurrent;
  const StepProduct<T>* reset_product = use_packed ? packed_reset : own_reset.get();
  std::vector<T> rec(static_cast<size_t>(B * GH));
  std::vector<T> acts(static_cast<size_t>(B * GH));            // activated gates
  std::vector<T> reset(gru ? static_cast<size_t>(B * H) : 0);  // r (.) H_prev, or r
  std::vector<T> hlin(gru ? static_cast<size_t>(B * H) : 0);   // (r (.) H_prev) Rh^T
  std::vector<T> hprev(static_cast<size_t>(B * H));
  const int64_t grain = row_grain(GH);
  const T* rbh = gru && dir.rb != nullptr ? dir.rb + 2 * H : nullptr;
  const T *pi = dir.p, *po = dir.p != nullptr ? dir.p + H : nullptr, *pf = dir.p != nullptr ? dir.p + 2 * H : nullptr;
  for (int64_t step = 0; step < s.seq; ++step) {
    std::copy(h.begin(), h.end(), hprev.begin());
    recurrent_product.run(hprev.data(), H, rec.data(), GH, B);
    auto active = [&](int64_t b) { return step < lens[static_cast<size_t>(b)]; };
    // Phase 1: pre-activations; GRU's r.
    parallel_for(B, grain, [&](int64_t begin, int64_t end) {
      for (int64_t b = begin; b < end; ++b) {
        if (!active(b)) continue;
        const int64_t t = time_of(dir.reverse, step, lens[static_cast<size_t>(b)]);
        T* pre = rec.data() + b * GH;
        const T* xr = xw.data() + (t * B + b) * GH;
        // GRU's h gate keeps its recurrent part apart (linear_before_reset) or gets it later.
        const int64_t add_cols = gru ? 2 * H : GH;
        for (int64_t j = 0; j < add_cols; ++j) pre[j] += xr[j];
        if (!gru) continue;
        if (!a.linear_before_reset) std::copy(xr + 2 * H, xr + GH, pre + 2 * H);
        T* r = acts.data() + b * GH + H;
        activate(dir.f, a.clip, pre + H, r, H);
        T* rs = reset.data() + b * H;
        const T* hp = hprev.data() + b * H;
        for (int64_t j = 0; j < H; ++j) rs[j] = a.linear_before_reset ? r[j] : r[j] * hp[j];
      }
    });
    if (gru && !a.linear_before_reset) {
      reset_product->run(reset.data(), H, hlin.data(), H, B);
    }
    // Phase 2: the cell.
    parallel_for(B, grain, [&](int64_t begin, int64_t end) {
      for (int64_t b = begin; b < end; ++b) {
        if (!active(b)) continue;
        const int64_t t = time_of(dir.reverse, step, lens[static_cast<size_t>(b)]);
        const int64_t row = t * B + b;
        T* pre = rec.data() + b * GH;
        T* act = acts.data() + b * GH;
        const T* hp = hprev.data() + b * H;
        T* hb = h.data() + b * H;
        if (record != nullptr) std::copy(hp, hp + H, record->hprev.data() + row * H);
        if (a.cell == Cell::kRnn) {
          if (record != nullptr) std::copy(pre, pre + GH, record->pre.data() + row * GH);
          activate(dir.f, a.clip, pre, hb, H);
          if (record != nullptr) std::copy(hb, hb + H, record->act.data() + row * GH);
        } else if (gru) {
          T* xh = pre + 2 * H;
          if (a.linear_before_reset) {
            const T* r = act + H;
            const T* xr = xw.data() + row * GH + 2 * H;
            T* lin_out = record != nullptr ? record->hr.data() + row * H : nullptr;
            for (int64_t j = 0; j < H; ++j) {
              const T lin = xh[j] + (rbh != nullptr ? rbh[j] : T(0));  // H Rh^T + Rbh
              if (lin_out != nullptr) lin_out[j] = lin;
              xh[j] = xr[j] + r[j] * lin;
            }
          } else {
            const T* hl = hlin.data() + b * H;
            for (int64_t j = 0; j < H; ++j) xh[j] += hl[j] + (rbh != nullptr ? rbh[j] : T(0));
          }
          if (record != nullptr) std::copy(pre, pre + GH, record->pre.data() + row * GH);
          T* z = act;
          T* ht = act + 2 * H;
          activate(dir.f, a.clip, pre, z, H);
          activate(dir.g, a.clip, xh, ht, H);
          for (int64_t j = 0; j < H; ++j) hb[j] = (T(1) - z[j]) * ht[j] + z[j] * hp[j];
          if (record != nullptr) std::copy(act, act + GH, record->act.data() + row * GH);
        } else {
          // gates i o f c at 0, H, 2H, 3H
          T* cb = c.data() + b * H;
          if (record != nullptr) std::copy(cb, cb + H, record->cprev.data() + row * H);
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
            std::copy(hb, hb + H, record->hc.data() + row * H);
            std::copy(act, act + GH, record->act.data() + row * GH);
          }
          for (int64_t j = 0; j < H; ++j) hb[j] *= o[j];
          if (record != nullptr) {
            std::copy(pre, pre + GH, record->pre.data() + row * GH);
            std::copy(cb, cb + H, record->c.data() + row * H);
          }
        }
        std::copy(hb, hb + H, y + row * H);
      }
    });
  }
}

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

// ---- the kernels ----

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

template <typename T>
void forward(KernelContext& ctx, const RecurrentAttributes& a, const Sizes& s, const PackedRecurrence* packed) {
  const int available = omp_get_max_threads();
  const ThreadScope threads(run_threads(s));
  const RecurrentLayout lay{a.layout, s.seq, s.batch, s.directions, s.hidden};
  const std::vector<int64_t> lens = sequence_lengths(ctx, s);
  const std::vector<T> x = time_major_x<T>(ctx.input(kX), s, lay);
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
  for_each_direction(s, available, [&](int64_t d) {
    const Direction<T> dir = direction_inputs<T>(ctx, a, s, lay, x.data(), d);
    std::vector<T> h = dir.h0, c = dir.c0;
    std::vector<T> ydir(static_cast<size_t>(s.seq * s.batch * H), T(0));
    const StepProduct<T>*packed_recurrent = nullptr, *packed_reset = nullptr;
    if constexpr (std::is_same_v<T, float>) {
      if (packed != nullptr) {
        packed_recurrent = &packed->recurrent[static_cast<size_t>(d)];
        if (!packed->reset.empty()) packed_reset = &packed->reset[static_cast<size_t>(d)];
      }
    }
    run_direction<T>(a, s, lens, dir, ydir.data(), h, c, nullptr, packed_recurrent, packed_reset);
    for (int64_t t = 0; t < s.seq && y != nullptr; ++t)
      for (int64_t b = 0; b < s.batch; ++b) std::copy_n(ydir.data() + (t * s.batch + b) * H, H, y + lay.y(t, d, b));
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

// ---- gradients ----
//
// org.onnxtrain::{RNN,GRU,LSTM}Grad: the forward op's inputs (same positions, omitted ones
// empty) followed by the gradients of its outputs (dY, dY_h and, for LSTM, dY_c; each may
// be empty); the forward op's attributes. Outputs: dX, dW, dR, dB, d initial_h and, for
// LSTM, d initial_c and dP, each optional.

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
}  // namespace onnxtrain
