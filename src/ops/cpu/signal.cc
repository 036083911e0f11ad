// Signal processing: DFT, STFT, the window functions (HannWindow, HammingWindow,
// BlackmanWindow) and MelWeightMatrix.
//
// A signal is [batch, ..., 1 or 2]: the last axis holds a real value or a (real, imaginary)
// pair. Transforms compute in complex<double> whatever the element type, through an FFT
// plan made once per length: radix-2 for powers of two, Bluestein's chirp-z (a radix-2
// convolution of a power-of-two size >= 2n - 1) for other lengths, and the plain O(n^2)
// sum only for lengths up to kDirectMax, where it is cheaper than either.
#include <cmath>
#include <complex>
#include <numbers>
#include <optional>

#include "core/dispatch.h"
#include "core/parallel.h"
#include "ops/kernel_registry.h"

namespace onnxtrain {
namespace {

using Complex = std::complex<double>;

constexpr int64_t kDirectMax = 16;

// exp(-2 pi i k / n) for k in [0, count).
std::vector<Complex> roots_of_unity(int64_t n, int64_t count) {
  std::vector<Complex> w(static_cast<size_t>(count));
  for (int64_t k = 0; k < count; ++k) {
    const double angle = -2.0 * std::numbers::pi * static_cast<double>(k) / static_cast<double>(n);
    w[static_cast<size_t>(k)] = {std::cos(angle), std::sin(angle)};
  }
  return w;
}

// The plain complex product: std::complex's operator* also recovers infinities from NaN
// results (C Annex G) through a library call, which costs several times the arithmetic.
inline Complex mul(Complex a, Complex b) {
  return {a.real() * b.real() - a.imag() * b.imag(), a.real() * b.imag() + a.imag() * b.real()};
}

bool is_power_of_two(int64_t n) {
  return n > 0 && (n & (n - 1)) == 0;
}

// The forward transform of a power-of-two length, in place: bit-reversal permutation, then
// log2(n) rounds of butterflies. Each round of span `len` reads its twiddles
// exp(-2 pi i k / len), k < len / 2, contiguously from twiddles_[len / 2 ...].
class Radix2 {
 public:
  explicit Radix2(int64_t n) : n_(n), twiddles_(static_cast<size_t>(std::max<int64_t>(n, 1))) {
    const std::vector<Complex> roots = roots_of_unity(n, n / 2);
    for (int64_t half = 1; half < n; half <<= 1) {
      for (int64_t k = 0; k < half; ++k) {
        twiddles_[static_cast<size_t>(half + k)] = roots[static_cast<size_t>(k * (n / (2 * half)))];
      }
    }
  }

  void run(Complex* a) const {
    for (int64_t i = 1, j = 0; i < n_; ++i) {
      int64_t bit = n_ >> 1;
      for (; j & bit; bit >>= 1) j ^= bit;
      j ^= bit;
      if (i < j) std::swap(a[i], a[j]);
    }
    for (int64_t start = 0; start + 1 < n_; start += 2) {  // span 2: the twiddle is 1
      const Complex t = a[start + 1];
      a[start + 1] = a[start] - t;
      a[start] += t;
    }
    for (int64_t half = 2; half < n_; half <<= 1) {
      const Complex* w = twiddles_.data() + half;
      for (int64_t start = 0; start < n_; start += 2 * half) {
        Complex* lo = a + start;
        Complex* hi = lo + half;
        for (int64_t k = 0; k < half; ++k) {
          const Complex t = mul(w[k], hi[k]);
          hi[k] = lo[k] - t;
          lo[k] += t;
        }
      }
    }
  }

 private:
  int64_t n_;
  std::vector<Complex> twiddles_;
};

// The forward DFT of one length: X[k] = sum_j x[j] exp(-2 pi i j k / n).
class FftPlan {
 public:
  explicit FftPlan(int64_t n) : n_(n) {
    if (is_power_of_two(n)) {
      radix2_.emplace(n);
    } else if (n <= kDirectMax) {
      roots_ = roots_of_unity(n, n);
    } else {
      plan_bluestein();
    }
  }

  // Complex values the caller provides to transform(): n, or the convolution's length.
  int64_t scratch_size() const { return radix2_ || !roots_.empty() ? n_ : m_; }

  // Transforms a[0, n) in place; `scratch` holds scratch_size() values.
  void transform(Complex* a, Complex* scratch) const {
    if (radix2_) return radix2_->run(a);
    if (!roots_.empty()) return direct(a, scratch);
    bluestein(a, scratch);
  }

 private:
  void direct(Complex* a, Complex* out) const {
    for (int64_t k = 0; k < n_; ++k) {
      Complex sum = 0;
      for (int64_t j = 0; j < n_; ++j) sum += mul(a[j], roots_[static_cast<size_t>(j * k % n_)]);
      out[k] = sum;
    }
    std::copy(out, out + n_, a);
  }

  // jk = (j^2 + k^2 - (k - j)^2) / 2 turns the DFT into a convolution with the chirp
  // w[t] = exp(-pi i t^2 / n): X[k] = w[k] sum_j (x[j] w[j]) conj(w[k - j]).
  void plan_bluestein() {
    m_ = 1;
    while (m_ < 2 * n_ - 1) m_ <<= 1;
    conv_.emplace(m_);
    chirp_.resize(static_cast<size_t>(n_));
    for (int64_t t = 0; t < n_; ++t) {
      // t^2 mod 2n keeps the angle small, hence exact, for long signals.
      const int64_t t2 = static_cast<int64_t>((static_cast<unsigned __int128>(t) * t) % (2 * n_));
      const double angle = -std::numbers::pi * static_cast<double>(t2) / static_cast<double>(n_);
      chirp_[static_cast<size_t>(t)] = {std::cos(angle), std::sin(angle)};
    }
    chirp_spectrum_.assign(static_cast<size_t>(m_), Complex(0));
    chirp_spectrum_[0] = std::conj(chirp_[0]);
    for (int64_t t = 1; t < n_; ++t) {
      chirp_spectrum_[static_cast<size_t>(t)] = chirp_spectrum_[static_cast<size_t>(m_ - t)] =
          std::conj(chirp_[static_cast<size_t>(t)]);
    }
    conv_->run(chirp_spectrum_.data());
  }

  void bluestein(Complex* a, Complex* scratch) const {
    Complex* u = scratch;
    for (int64_t j = 0; j < n_; ++j) u[j] = mul(a[j], chirp_[static_cast<size_t>(j)]);
    std::fill(u + n_, u + m_, Complex(0));
    conv_->run(u);
    // The inverse transform of the product, as conj(FFT(conj(.))) / m.
    for (int64_t i = 0; i < m_; ++i) u[i] = std::conj(mul(u[i], chirp_spectrum_[static_cast<size_t>(i)]));
    conv_->run(u);
    const double scale = 1.0 / static_cast<double>(m_);
    for (int64_t k = 0; k < n_; ++k) a[k] = mul(std::conj(u[k]) * scale, chirp_[static_cast<size_t>(k)]);
  }

  int64_t n_;
  std::optional<Radix2> radix2_;
  std::vector<Complex> roots_;  // the direct sum's exp(-2 pi i k / n)
  int64_t m_ = 0;
  std::optional<Radix2> conv_;
  std::vector<Complex> chirp_, chirp_spectrum_;
};

// The one integer of a scalar or one-element int32/int64 input.
int64_t single_integer(const KernelContext& ctx, size_t index, const char* name) {
  const Tensor& t = ctx.input(index);
  if (t.numel() != 1 || t.rank() > 1) {
    ctx.fail(std::string("input '") + name + "' must hold one value (a scalar or a 1-element 1-D tensor), got shape " +
             shape_string(t.shape()));
  }
  if (t.dtype() == DType::kInt64) return t.data<int64_t>()[0];
  if (t.dtype() == DType::kInt32) return t.data<int32_t>()[0];
  ctx.fail(std::string("input '") + name + "' must be int32 or int64, got " + std::string(dtype_name(t.dtype())));
}

// ---------------------------------------------------------------------------------------
// DFT

struct DftLayout {
  int64_t outer = 1, length = 0, inner = 1, components = 1;  // input [outer, length, inner, components]
  int64_t n = 0, out_length = 0;                             // output [outer, out_length, inner, 2]
};

// One transform per (outer, inner) line: read `length` values (zero-padded or truncated to
// n), transform, write the first out_length.
template <typename T>
void dft_lines(const T* x, T* y, const DftLayout& l, bool inverse) {
  using C = compute_type_t<T>;
  const FftPlan plan(l.n);
  const int64_t lines = l.outer * l.inner, copied = std::min(l.length, l.n);
  // About 16k complex operations per task: n log n for one line.
  const int64_t grain = std::max<int64_t>(1, 16384 / (l.n * 8));
  parallel_for(lines, grain, [&](int64_t begin, int64_t end) {
    std::vector<Complex> line(static_cast<size_t>(l.n)), scratch(static_cast<size_t>(plan.scratch_size()));
    for (int64_t at = begin; at < end; ++at) {
      const int64_t o = at / l.inner, i = at % l.inner;
      const T* in = x + (o * l.length * l.inner + i) * l.components;
      for (int64_t j = 0; j < copied; ++j) {
        const T* v = in + j * l.inner * l.components;
        const double re = static_cast<double>(static_cast<C>(v[0]));
        const double im = l.components == 2 ? static_cast<double>(static_cast<C>(v[1])) : 0.0;
        line[static_cast<size_t>(j)] = {re, inverse ? -im : im};
      }
      std::fill(line.begin() + copied, line.end(), Complex(0));
      plan.transform(line.data(), scratch.data());
      // The inverse is conj(DFT(conj(x))) / n.
      const double scale = inverse ? 1.0 / static_cast<double>(l.n) : 1.0, sign = inverse ? -1.0 : 1.0;
      T* out = y + (o * l.out_length * l.inner + i) * 2;
      for (int64_t k = 0; k < l.out_length; ++k) {
        const Complex v = line[static_cast<size_t>(k)];
        out[k * l.inner * 2] = static_cast<T>(static_cast<C>(v.real() * scale));
        out[k * l.inner * 2 + 1] = static_cast<T>(static_cast<C>(sign * v.imag() * scale));
      }
    }
  });
}

struct DftAttributes {
  bool inverse = false, onesided = false;
  int64_t axis = 1;  // the attribute of opset 17; from opset 20 input 2, default -2
  bool axis_from_input = false;
};

void run_dft(KernelContext& ctx, const DftAttributes& a) {
  const Tensor& x = ctx.input(0);
  const int64_t r = static_cast<int64_t>(x.rank());
  if (r < 2) ctx.fail("input must be [batch, ..., 1 or 2] (rank 2 or more), got " + shape_string(x.shape()));
  const int64_t components = x.shape().back();
  if (components != 1 && components != 2) {
    ctx.fail("the last axis of input holds a real value (1) or a complex pair (2), got shape " +
             shape_string(x.shape()));
  }
  int64_t axis = a.axis;
  if (a.axis_from_input && ctx.has_input(2)) axis = single_integer(ctx, 2, "axis");
  if (axis < -r || axis >= r - 1 || axis == -1) {
    ctx.fail("axis " + std::to_string(axis) + " is out of range for an input of rank " + std::to_string(r) +
             " (expected [" + std::to_string(-r) + ", -2] or [0, " + std::to_string(r - 2) + "]: the last axis holds " +
             "the complex components)");
  }
  if (axis < 0) axis += r;
  DftLayout l;
  l.components = components;
  l.length = x.dim(axis);
  for (int64_t d = 0; d < axis; ++d) l.outer *= x.dim(d);
  for (int64_t d = axis + 1; d < r - 1; ++d) l.inner *= x.dim(d);
  l.n = l.length;
  if (ctx.has_input(1)) {
    l.n = single_integer(ctx, 1, "dft_length");
    if (l.n < 1) ctx.fail("dft_length is " + std::to_string(l.n) + ", expected 1 or more");
  }
  if (l.n < 1) ctx.fail("the signal axis " + std::to_string(axis) + " is empty: nothing to transform");
  l.out_length = a.onesided ? l.n / 2 + 1 : l.n;
  Shape shape = x.shape();
  shape[static_cast<size_t>(axis)] = l.out_length;
  shape.back() = 2;
  Tensor& y = ctx.allocate_output(0, x.dtype(), shape);
  if (y.numel() == 0) return;
  dispatch<ONNXTRAIN_FLOAT_TYPES>(x.dtype(), "DFT",
                                  [&]<typename T>() { dft_lines<T>(x.data<T>(), y.data<T>(), l, a.inverse); });
}

KernelFactory dft_factory(bool axis_from_input) {
  return [axis_from_input](const KernelInfo& info) {
    DftAttributes a;
    a.inverse = info.bool_attribute("inverse", false);
    a.onesided = info.bool_attribute("onesided", false);
    a.axis_from_input = axis_from_input;
    a.axis = axis_from_input ? -2 : info.int_attribute("axis", 1);
    return make_kernel([a](KernelContext& ctx) { run_dft(ctx, a); });
  };
}

const KernelRegistration kDft17{"", "DFT", 17, 19, dft_factory(false)};
const KernelRegistration kDft20{"", "DFT", 20, kLatestOpset, {.host_inputs = {1, 2}}, dft_factory(true)};

// ---------------------------------------------------------------------------------------
// STFT (signal [batch, length, 1 or 2], frame_step, window?, frame_length?) =>
// [batch, frames, bins, 2]: the DFT of each windowed frame of frame_length samples,
// frames = 1 + (length - frame_length) / frame_step.

template <typename T>
void stft_frames(const T* x, const T* window, T* y, int64_t batch, int64_t length, int64_t components,
                 int64_t frame_length, int64_t step, int64_t frames, int64_t bins) {
  using C = compute_type_t<T>;
  const FftPlan plan(frame_length);
  parallel_for(batch * frames, 1, [&](int64_t begin, int64_t end) {
    std::vector<Complex> line(static_cast<size_t>(frame_length)), scratch(static_cast<size_t>(plan.scratch_size()));
    for (int64_t at = begin; at < end; ++at) {
      const int64_t b = at / frames, f = at % frames;
      const T* in = x + (b * length + f * step) * components;
      for (int64_t j = 0; j < frame_length; ++j) {
        const double w = window ? static_cast<double>(static_cast<C>(window[j])) : 1.0;
        const double re = static_cast<double>(static_cast<C>(in[j * components]));
        const double im = components == 2 ? static_cast<double>(static_cast<C>(in[j * components + 1])) : 0.0;
        line[static_cast<size_t>(j)] = {re * w, im * w};
      }
      plan.transform(line.data(), scratch.data());
      T* out = y + at * bins * 2;
      for (int64_t k = 0; k < bins; ++k) {
        out[2 * k] = static_cast<T>(static_cast<C>(line[static_cast<size_t>(k)].real()));
        out[2 * k + 1] = static_cast<T>(static_cast<C>(line[static_cast<size_t>(k)].imag()));
      }
    }
  });
}

const KernelRegistration kStft{
    "", "STFT", 17, kLatestOpset, {.host_inputs = {1, 3}}, [](const KernelInfo& info) {
      const bool onesided = info.bool_attribute("onesided", true);
      return make_kernel([onesided](KernelContext& ctx) {
        const Tensor& x = ctx.input(0);
        if (x.rank() != 3 || (x.dim(2) != 1 && x.dim(2) != 2)) {
          ctx.fail("signal must be [batch, signal_length, 1 or 2], got " + shape_string(x.shape()));
        }
        const int64_t step = single_integer(ctx, 1, "frame_step");
        if (step < 1) ctx.fail("frame_step is " + std::to_string(step) + ", expected 1 or more");
        const Tensor* window = ctx.has_input(2) ? &ctx.input(2) : nullptr;
        if (window && (window->rank() != 1 || window->dtype() != x.dtype())) {
          ctx.fail("window must be 1-D of the signal's element type " + std::string(dtype_name(x.dtype())) + ", got " +
                   std::string(dtype_name(window->dtype())) + " " + shape_string(window->shape()));
        }
        int64_t frame_length = window ? window->dim(0) : 0;
        if (ctx.has_input(3)) {
          frame_length = single_integer(ctx, 3, "frame_length");
          if (window && window->dim(0) != frame_length) {
            ctx.fail("window has " + std::to_string(window->dim(0)) + " values, frame_length is " +
                     std::to_string(frame_length) + ": they must be equal");
          }
        }
        const int64_t length = x.dim(1);
        // Neither window nor frame_length: one frame of the whole signal, as onnx.reference.
        if (!window && !ctx.has_input(3)) frame_length = length;
        if (frame_length < 1 || frame_length > length) {
          ctx.fail("frame length " + std::to_string(frame_length) +
                   " must be in [1, signal_length = " + std::to_string(length) + "]");
        }
        const int64_t frames = 1 + (length - frame_length) / step;
        const int64_t bins = onesided ? frame_length / 2 + 1 : frame_length;
        Tensor& y = ctx.allocate_output(0, x.dtype(), {x.dim(0), frames, bins, 2});
        if (y.numel() == 0) return;
        dispatch<ONNXTRAIN_FLOAT_TYPES>(x.dtype(), "STFT", [&]<typename T>() {
          stft_frames<T>(x.data<T>(), window ? window->data<T>() : nullptr, y.data<T>(), x.dim(0), length, x.dim(2),
                         frame_length, step, frames, bins);
        });
      });
    }};

// ---------------------------------------------------------------------------------------
// HannWindow, HammingWindow, BlackmanWindow (size) => [size] of output_datatype:
// w[n] = a0 - a1 cos(2 pi n / N) + a2 cos(4 pi n / N), N = size (periodic) or size - 1.

struct WindowCoefficients {
  double a0, a1, a2;
};

template <typename T>
void fill_window(T* w, int64_t size, bool periodic, const WindowCoefficients& c) {
  const int64_t big_n = periodic ? size : size - 1;
  for (int64_t i = 0; i < size; ++i) {
    // A symmetric window of one sample has N = 0; it is [1], like torch's.
    const double x = big_n == 0 ? 0.0 : 2.0 * std::numbers::pi * static_cast<double>(i) / static_cast<double>(big_n);
    // The cosine terms first, a0 last (onnx.reference's and onnxruntime's order): Blackman's
    // middle sample is then exactly 1 (0.58 + 0.42), not 0.9999999999999999 ((0.42 + 0.5) +
    // 0.08), which an integer output_datatype would truncate to 0.
    const double v = big_n == 0 ? 1.0 : (c.a2 * std::cos(2.0 * x) - c.a1 * std::cos(x)) + c.a0;
    if constexpr (std::is_integral_v<T>) {
      w[i] = static_cast<T>(v);
    } else {
      w[i] = static_cast<T>(static_cast<compute_type_t<T>>(v));
    }
  }
}

KernelFactory window_factory(std::string op, WindowCoefficients c) {
  return [op, c](const KernelInfo& info) {
    const DType dtype = dtype_from_onnx(static_cast<int32_t>(info.int_attribute("output_datatype", 1)));
    const bool periodic = info.bool_attribute("periodic", true);
    return make_kernel([op, c, dtype, periodic](KernelContext& ctx) {
      const int64_t size = single_integer(ctx, 0, "size");
      if (size < 0) ctx.fail("size is " + std::to_string(size) + ", expected 0 or more");
      Tensor& w = ctx.allocate_output(0, dtype, {size});
      dispatch<ONNXTRAIN_NUMERIC_TYPES>(dtype, op,
                                        [&]<typename T>() { fill_window<T>(w.data<T>(), size, periodic, c); });
    });
  };
}

// Hann: sin^2(pi n / N) = 0.5 - 0.5 cos(2 pi n / N). Hamming: alpha = 25/46 (the spec's).
const KernelRegistration kHann{"",           "HannWindow",         17,
                               kLatestOpset, {.host_inputs = {0}}, window_factory("HannWindow", {0.5, 0.5, 0.0})};
const KernelRegistration kHamming{
    "",           "HammingWindow",      17,
    kLatestOpset, {.host_inputs = {0}}, window_factory("HammingWindow", {25.0 / 46.0, 21.0 / 46.0, 0.0})};
const KernelRegistration kBlackman{
    "", "BlackmanWindow", 17, kLatestOpset, {.host_inputs = {0}}, window_factory("BlackmanWindow", {0.42, 0.5, 0.08})};

// ---------------------------------------------------------------------------------------
// MelWeightMatrix (num_mel_bins, dft_length, sample_rate, lower_edge_hertz,
// upper_edge_hertz) => [dft_length / 2 + 1, num_mel_bins]: triangular filters whose edges
// are num_mel_bins + 2 points evenly spaced on the mel scale (mel = 2595 log10(1 + hz / 700)),
// each mapped to the spectrogram bin floor((dft_length + 1) hz / sample_rate).

double single_number(const KernelContext& ctx, size_t index, const char* name) {
  const Tensor& t = ctx.input(index);
  if (t.numel() != 1)
    ctx.fail(std::string("input '") + name + "' must hold one value, got shape " + shape_string(t.shape()));
  return t.item_as_double();
}

std::vector<double> mel_weights(const KernelContext& ctx, int64_t mel_bins, int64_t dft_length, int64_t sample_rate,
                                double lower_hz, double upper_hz) {
  const int64_t spectrum_bins = dft_length / 2 + 1;
  const double low_mel = 2595.0 * std::log10(1.0 + lower_hz / 700.0);
  const double high_mel = 2595.0 * std::log10(1.0 + upper_hz / 700.0);
  const double step = (high_mel - low_mel) / static_cast<double>(mel_bins + 2);
  std::vector<int64_t> edges(static_cast<size_t>(mel_bins + 2));
  for (int64_t i = 0; i < mel_bins + 2; ++i) {
    const double hz = 700.0 * (std::pow(10.0, (static_cast<double>(i) * step + low_mel) / 2595.0) - 1.0);
    const int64_t bin = static_cast<int64_t>(std::floor(static_cast<double>(dft_length + 1) * hz / sample_rate));
    if (bin < 0 || bin >= spectrum_bins) {
      ctx.fail("the mel band edge at " + std::to_string(hz) + " Hz falls in bin " + std::to_string(bin) +
               ", outside the spectrogram's " + std::to_string(spectrum_bins) +
               " bins: expected 0 <= lower_edge_hertz <= upper_edge_hertz <= sample_rate / 2");
    }
    edges[static_cast<size_t>(i)] = bin;
  }
  std::vector<double> w(static_cast<size_t>(spectrum_bins * mel_bins), 0.0);
  auto at = [&](int64_t j, int64_t i) -> double& { return w[static_cast<size_t>(j * mel_bins + i)]; };
  for (int64_t i = 0; i < mel_bins; ++i) {
    const int64_t lo = edges[static_cast<size_t>(i)], mid = edges[static_cast<size_t>(i + 1)],
                  hi = edges[static_cast<size_t>(i + 2)];
    if (mid == lo) {
      at(mid, i) = 1.0;
    } else {
      for (int64_t j = lo; j <= mid; ++j) at(j, i) = static_cast<double>(j - lo) / static_cast<double>(mid - lo);
    }
    for (int64_t j = mid; j < hi; ++j) at(j, i) = static_cast<double>(hi - j) / static_cast<double>(hi - mid);
  }
  return w;
}

const KernelRegistration kMelWeightMatrix{
    "", "MelWeightMatrix", 17, kLatestOpset, {.host_inputs = {0, 1, 2, 3, 4}}, [](const KernelInfo& info) {
      const DType dtype = dtype_from_onnx(static_cast<int32_t>(info.int_attribute("output_datatype", 1)));
      return make_kernel([dtype](KernelContext& ctx) {
        const int64_t mel_bins = single_integer(ctx, 0, "num_mel_bins");
        const int64_t dft_length = single_integer(ctx, 1, "dft_length");
        const int64_t sample_rate = single_integer(ctx, 2, "sample_rate");
        if (mel_bins < 1 || dft_length < 1 || sample_rate < 1) {
          ctx.fail("num_mel_bins, dft_length and sample_rate must be 1 or more, got " + std::to_string(mel_bins) +
                   ", " + std::to_string(dft_length) + ", " + std::to_string(sample_rate));
        }
        const double lower = single_number(ctx, 3, "lower_edge_hertz");
        const double upper = single_number(ctx, 4, "upper_edge_hertz");
        const std::vector<double> w = mel_weights(ctx, mel_bins, dft_length, sample_rate, lower, upper);
        Tensor& y = ctx.allocate_output(0, dtype, {dft_length / 2 + 1, mel_bins});
        dispatch<ONNXTRAIN_NUMERIC_TYPES>(dtype, "MelWeightMatrix", [&]<typename T>() {
          T* out = y.data<T>();
          for (size_t i = 0; i < w.size(); ++i) {
            if constexpr (std::is_integral_v<T>) {
              out[i] = static_cast<T>(w[i]);
            } else {
              out[i] = static_cast<T>(static_cast<compute_type_t<T>>(w[i]));
            }
          }
        });
      });
    }};

}  // namespace
}  // namespace onnxtrain
