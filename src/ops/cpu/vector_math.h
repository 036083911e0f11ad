// float32 math functions written without branches or library calls, so that loops over
// them vectorize (libm's expf/tanhf/erff/logf are scalar calls without -ffast-math),
// and branch-free float16/bfloat16 conversions for the same reason. Every float operation
// is computed unconditionally and results are chosen by selects: under GCC's default
// -ftrapping-math a float operation on one side of a condition stops vectorization.
//
// Accuracy (measured against double-precision references over the whole float range):
// exp, log, expm1 within 2 ulp; tanh, sigmoid within 3 ulp; erf within 4 ulp. Special values
// (NaN, ±inf, ±0, subnormals) follow C's functions.
#pragma once

#include <onnxtrain/float16.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>

// Every function here must inline into the caller's loop for that loop to vectorize.
#define ONNXTRAIN_VECTOR_INLINE inline __attribute__((always_inline))

namespace onnxtrain::vector_math {

template <typename T, int N>
struct VectorOf {
  // (vector_size holds on a class member typedef; on an alias template whose type depends
  // on a template parameter GCC ignores it)
  typedef T type __attribute__((vector_size(N * sizeof(T))));
  static_assert(sizeof(type) == N * sizeof(T), "vector_size was ignored");
};

// N values of T in one vector, GCC's vector extension: arithmetic, comparisons and selects
// lane by lane, kept in registers.
template <typename T, int N>
using Vector = typename VectorOf<T, N>::type;

// x rounded to the nearest integer (ties to even), for |x| < 2^22: adding 1.5 * 2^23 pushes
// the fraction out of the mantissa.
ONNXTRAIN_VECTOR_INLINE float round_to_int(float x) {
  constexpr float kShifter = 12582912.0f;
  return (x + kShifter) - kShifter;
}

// 2^n for integer n in [-126, 127].
ONNXTRAIN_VECTOR_INLINE float pow2(int32_t n) {
  return std::bit_cast<float>(static_cast<uint32_t>(n + 127) << 23);
}

// The two factors of e^x (x finite, not far outside the float range): x = n ln2 + r with
// n = round(x / ln2) and |r| <= ln2 / 2; returns e^r, by a degree-7 polynomial (Cephes' expf
// coefficients), and sets n. e^x = exp_split(x, n) * 2^n.
ONNXTRAIN_VECTOR_INLINE float exp_split(float x, float& n) {
  n = round_to_int(x * 1.44269504088896341f);
  const float r = (x - n * 0.693359375f) - n * -2.12194440e-4f;  // ln 2 in two parts
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  return p * r * r + r + 1.0f;
}

// e^x: exp_split, then scaled by 2^n in two steps so that subnormal results come out right.
ONNXTRAIN_VECTOR_INLINE float exp(float x) {
  const float clamped = x != x ? 0.0f : std::min(std::max(x, -104.0f), 89.0f);
  float n;
  const float y = exp_split(clamped, n);
  const auto k = static_cast<int32_t>(n);  // in [-150, 129]
  const int32_t half = k >> 1;
  const float result = y * pow2(half) * pow2(k - half);
  return x != x ? x : result;
}

// e^x - 1, accurate near 0 where exp(x) - 1 would cancel.
ONNXTRAIN_VECTOR_INLINE float expm1(float x) {
  // Taylor series to x^8 / 8!: for |x| < 0.5 the rest is below 2^-26 relative.
  float p = 1.0f / 40320;
  p = p * x + 1.0f / 5040;
  p = p * x + 1.0f / 720;
  p = p * x + 1.0f / 120;
  p = p * x + 1.0f / 24;
  p = p * x + 1.0f / 6;
  p = p * x + 0.5f;
  const float series = x + x * x * p;
  const float direct = exp(x) - 1.0f;
  const float a = x < 0 ? -x : x;
  return a < 0.5f ? series : direct;
}

// log(x): x = m 2^e with m in [sqrt(1/2), sqrt(2)), log(m) by a degree-9 polynomial in
// m - 1 (Cephes' logf coefficients).
ONNXTRAIN_VECTOR_INLINE float log(float x) {
  const bool subnormal = x < 1.17549435e-38f;
  const float scaled = subnormal ? x * 8388608.0f : x;  // 2^23
  const uint32_t bits = std::bit_cast<uint32_t>(scaled);
  float e = static_cast<float>(static_cast<int32_t>(bits >> 23) - 126 - (subnormal ? 23 : 0));
  float m = std::bit_cast<float>((bits & 0x007fffffu) | 0x3f000000u);  // in [0.5, 1)
  const bool low = m < 0.707106781186547524f;
  e = low ? e - 1.0f : e;
  m = low ? m + m - 1.0f : m - 1.0f;
  const float z = m * m;
  float p = 7.0376836292e-2f;
  p = p * m - 1.1514610310e-1f;
  p = p * m + 1.1676998740e-1f;
  p = p * m - 1.2420140846e-1f;
  p = p * m + 1.4249322787e-1f;
  p = p * m - 1.6668057665e-1f;
  p = p * m + 2.0000714765e-1f;
  p = p * m - 2.4999993993e-1f;
  p = p * m + 3.3333331174e-1f;
  float y = p * m * z;
  y += e * -2.12194440e-4f;
  y += -0.5f * z;
  constexpr float kInf = __builtin_huge_valf();
  float result = (m + y) + e * 0.693359375f;
  result = x == kInf ? kInf : result;
  result = x == 0 ? -kInf : result;
  return x >= 0 ? result : __builtin_nanf("");  // negative or NaN
}

// log(1 + x) for x >= 0 without losing x when it is tiny: corrects log(1 + x) by the
// rounding error of 1 + x.
ONNXTRAIN_VECTOR_INLINE float log1p_nonnegative(float x) {
  const float w = 1.0f + x;
  const float corrected = log(w) - ((w - 1.0f) - x) / w;
  return w == 1.0f ? x : corrected;
}

// tanh: an odd polynomial below 0.625 (Cephes' tanhf), 1 - 2 / (e^2|x| + 1) above.
ONNXTRAIN_VECTOR_INLINE float tanh(float x) {
  const float a = x < 0 ? -x : x;
  const float z = x * x;
  float p = -5.70498872745e-3f;
  p = p * z + 2.06390887954e-2f;
  p = p * z - 5.37397155531e-2f;
  p = p * z + 1.33314422036e-1f;
  p = p * z - 3.33332819422e-1f;
  const float small = x + x * z * p;
  const float big = 1.0f - 2.0f / (exp(a + a) + 1.0f);
  const float signed_big = x < 0 ? -big : big;
  return a < 0.625f ? small : signed_big;
}

namespace detail {

// For a = |x|: erf(a) below 0.92 as a P(a^2), and erfc(a) = e^(-a^2 + Q(a)) from 0.92 to 4,
// where erfc reaches 1.5e-8; P and Q fitted to erf/erfc in double precision by weighted
// least squares.
struct ErfParts {
  float small_erf;
  float tail_erfc;
};

ONNXTRAIN_VECTOR_INLINE ErfParts erf_parts(float a) {
  const float z = a * a;
  float p = -5.994794773869216e-4f;
  p = p * z + 4.99384431168437e-3f;
  p = p * z - 2.6766980066895485e-2f;
  p = p * z + 1.1281823366880417e-1f;
  p = p * z - 3.7612494826316833e-1f;
  p = p * z + 1.1283791065216064f;
  float q = 1.6128932429637644e-6f;
  q = q * a - 4.556692874757573e-5f;
  q = q * a + 5.925646983087063e-4f;
  q = q * a - 4.739238414913416e-3f;
  q = q * a + 2.6361852884292603e-2f;
  q = q * a - 1.0997308045625687e-1f;
  q = q * a + 3.680573105812073e-1f;
  q = q * a - 1.130163311958313f;
  q = q * a + 3.0237535247579217e-4f;
  return {a * p, exp(q - z)};
}

}  // namespace detail

ONNXTRAIN_VECTOR_INLINE float erf(float x) {
  const float a = x < 0 ? -x : x;
  const detail::ErfParts parts = detail::erf_parts(a);
  const float big = 1.0f - parts.tail_erfc;
  const float magnitude = a < 0.92f ? parts.small_erf : a < 4.0f ? big : 1.0f;
  const float result = x < 0 ? -magnitude : magnitude;
  return x != x ? x : result;
}

// 1 - erf(x), without the cancellation of computing it so for large x (0 beyond 4).
ONNXTRAIN_VECTOR_INLINE float erfc(float x) {
  const float a = x < 0 ? -x : x;
  const detail::ErfParts parts = detail::erf_parts(a);
  const float near = x < 0 ? 1.0f + parts.small_erf : 1.0f - parts.small_erf;
  const float far = x < 0 ? 2.0f - parts.tail_erfc : parts.tail_erfc;
  const float beyond = x < 0 ? 2.0f : 0.0f;
  const float result = a < 0.92f ? near : a < 4.0f ? far : beyond;
  return x != x ? x : result;
}

// 1 / (1 + e^-x), from e^-|x| so that neither tail overflows: e^x / (1 + e^x) below 0.
ONNXTRAIN_VECTOR_INLINE float sigmoid(float x) {
  const float e = exp(x < 0 ? x : -x);
  const float s = 1.0f / (1.0f + e);
  return x < 0 ? e * s : s;
}

// The same functions in double precision, from libm, so that kernels can call
// vector_math::f(x) for either compute type.
ONNXTRAIN_VECTOR_INLINE double exp(double x) {
  return std::exp(x);
}
ONNXTRAIN_VECTOR_INLINE double expm1(double x) {
  return std::expm1(x);
}
ONNXTRAIN_VECTOR_INLINE double log(double x) {
  return std::log(x);
}
ONNXTRAIN_VECTOR_INLINE double log1p_nonnegative(double x) {
  return std::log1p(x);
}
ONNXTRAIN_VECTOR_INLINE double tanh(double x) {
  return std::tanh(x);
}
ONNXTRAIN_VECTOR_INLINE double erf(double x) {
  return std::erf(x);
}
ONNXTRAIN_VECTOR_INLINE double erfc(double x) {
  return std::erfc(x);
}
ONNXTRAIN_VECTOR_INLINE double sigmoid(double x) {
  const double e = std::exp(x < 0 ? x : -x);
  return x < 0 ? e / (1.0 + e) : 1.0 / (1.0 + e);
}

// ---- 16-bit floats ----

// IEEE half to float, exactly.
ONNXTRAIN_VECTOR_INLINE float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t magnitude = h & 0x7fffu;
  const uint32_t normal = (magnitude << 13) + 0x38000000u;  // rebias 15 -> 127
  const uint32_t special = normal + 0x38000000u;            // inf/NaN: exponent 255
  // A subnormal half is m * 2^-24; m as a float by integer means (2^23 + m as bits, minus
  // 2^23), so that no float op sees a subnormal operand (denormals-are-zero stays harmless).
  const float m = std::bit_cast<float>(0x4b000000u | magnitude) - 8388608.0f;
  const uint32_t subnormal = std::bit_cast<uint32_t>(m * 5.9604644775390625e-8f);
  const uint32_t bits = magnitude >= 0x7c00u ? special : magnitude < 0x0400u ? subnormal : normal;
  return std::bit_cast<float>(bits | sign);
}

// float to IEEE half, rounding to nearest even (NaN stays NaN, overflow gives inf).
ONNXTRAIN_VECTOR_INLINE uint16_t float_to_half(float value) {
  const uint32_t f = std::bit_cast<uint32_t>(value);
  const uint32_t sign = (f >> 16) & 0x8000u;
  const uint32_t abs = f & 0x7fffffffu;
  // Subnormal halves: adding 0.5 lines the half's mantissa up with float's low bits, and the
  // addition rounds to nearest even.
  const uint32_t subnormal = std::bit_cast<uint32_t>(std::bit_cast<float>(abs) + 0.5f) - 0x3f000000u;
  const uint32_t normal = (abs + 0xc8000fffu + ((abs >> 13) & 1u)) >> 13;  // rebias, round
  const uint32_t special = abs > 0x7f800000u ? 0x7e00u : 0x7c00u;
  const uint32_t bits = abs >= 0x47800000u ? special : abs < 0x38800000u ? subnormal : normal;
  return static_cast<uint16_t>(bits | sign);
}

ONNXTRAIN_VECTOR_INLINE float bfloat16_to_float(uint16_t b) {
  return std::bit_cast<float>(static_cast<uint32_t>(b) << 16);
}

// float to bfloat16, rounding to nearest even (NaN stays NaN).
ONNXTRAIN_VECTOR_INLINE uint16_t float_to_bfloat16(float value) {
  const uint32_t f = std::bit_cast<uint32_t>(value);
  const uint32_t rounded = (f + 0x7fffu + ((f >> 16) & 1u)) >> 16;
  const uint32_t nan = (f >> 16) | 0x40u;
  return static_cast<uint16_t>((f & 0x7fffffffu) > 0x7f800000u ? nan : rounded);
}

}  // namespace onnxtrain::vector_math
