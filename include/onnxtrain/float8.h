// The narrow floating-point formats of quantized models: float8 (E4M3FN, E4M3FNUZ, E5M2,
// E5M2FNUZ, E8M0) and float4 (E2M1), as ONNX defines them (onnx/docs/Float8.md, the
// FLOAT4E2M1 and FLOAT8E8M0 types). Each format converts exactly to float and from float with
// one rounding to nearest even; `saturate` chooses what overflows become (Cast's attribute):
//
//   | x             | saturate   | not saturate: E4M3FN, *FNUZ | E5M2  |
//   | NaN           | NaN        | NaN                          | NaN   |
//   | +-Inf, [x] > max | +-max   | NaN                          | +-Inf |
//
// The FNUZ formats have no negative zero (-0 becomes +0) and one NaN (1000 0000). E2M1 has
// neither infinity nor NaN: it always saturates, and NaN becomes 1000 (the pattern of -0, as
// onnx.reference and ml_dtypes give). E8M0 is an unsigned power of two with its own rounding
// (E8M0::encode).
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

namespace onnxtrain {

namespace narrow_float {

// How a format spells what is not a finite number.
enum class Specials {
  kIeee,          // exponent all ones: Inf (mantissa 0) or NaN (E5M2)
  kAllOnesNan,    // S.1111.111 is NaN; no infinity (E4M3FN)
  kNegativeZero,  // 1000 0000 is the one NaN; no infinity, no -0 (FNUZ)
  kNone,          // neither (E2M1)
};

// 2^k as a float, for k in [-126, 127].
constexpr float pow2(int k) {
  return std::bit_cast<float>(static_cast<uint32_t>(k + 127) << 23);
}

// A signed format of 1 sign bit, E exponent bits and M mantissa bits (E + M <= 7).
template <int E, int M, int Bias, Specials S>
struct Format {
  static constexpr int kBits = 1 + E + M;
  static constexpr uint32_t kSign = 1u << (E + M);
  static constexpr uint32_t kFieldMask = kSign - 1;  // exponent and mantissa
  // The largest finite magnitude's exponent-and-mantissa field.
  static constexpr uint32_t kMaxField = S == Specials::kIeee         ? (((1u << E) - 1) << M) - 1
                                        : S == Specials::kAllOnesNan ? kFieldMask - 1
                                                                     : kFieldMask;
  static constexpr uint32_t kInfField = ((1u << E) - 1) << M;  // kIeee only

  static constexpr float decode(uint32_t bits) {
    const uint32_t field = bits & kFieldMask;
    const bool negative = (bits & kSign) != 0;
    if constexpr (S == Specials::kNegativeZero) {
      if (bits == kSign) return std::bit_cast<float>(0x7fc00000u);
    } else if constexpr (S == Specials::kAllOnesNan) {
      if (field == kFieldMask) return std::bit_cast<float>(0x7fc00000u | (negative ? 0x80000000u : 0u));
    } else if constexpr (S == Specials::kIeee) {
      if (field >= kInfField) {
        const uint32_t payload = field == kInfField ? 0x7f800000u : 0x7fc00000u;
        return std::bit_cast<float>(payload | (negative ? 0x80000000u : 0u));
      }
    }
    const uint32_t exponent = field >> M, mantissa = field & ((1u << M) - 1);
    const float magnitude = exponent == 0
                                ? static_cast<float>(mantissa) * pow2(1 - Bias - M)
                                : std::bit_cast<float>(((exponent - Bias + 127) << 23) | (mantissa << (23 - M)));
    return negative ? -magnitude : magnitude;
  }

  static uint32_t encode(float x, bool saturate = true) {
    const uint32_t sign = std::signbit(x) ? kSign : 0u;
    if (std::isnan(x)) {
      if constexpr (S == Specials::kNegativeZero || S == Specials::kNone) return kSign;
      if constexpr (S == Specials::kAllOnesNan) return sign | kFieldMask;
      return sign | kInfField | (1u << (M - 1));
    }
    uint32_t field = std::isinf(x) ? kMaxField + 1 : round_field(std::fabs(x));
    if (field > kMaxField) {
      if (saturate || S == Specials::kNone) {
        field = kMaxField;
      } else if constexpr (S == Specials::kIeee) {
        return sign | kInfField;
      } else {
        return encode(std::numeric_limits<float>::quiet_NaN());
      }
    }
    if (S == Specials::kNegativeZero && field == 0) return 0;
    return sign | field;
  }

 private:
  // The exponent-and-mantissa field of a (finite, >= 0) rounded to nearest even; above
  // kMaxField when it overflows the format.
  static uint32_t round_field(float a) {
    const uint32_t bits = std::bit_cast<uint32_t>(a);
    constexpr int kMinExponent = 1 - Bias;  // of the smallest normal number
    if (static_cast<int>(bits >> 23) - 127 < kMinExponent) {
      // Subnormal here: a multiple of 2^(kMinExponent - M). Scaling by a power of two is
      // exact, and the integer nearest the scaled value is the mantissa; 2^M carries into
      // the exponent field, which the same bits then spell.
      return static_cast<uint32_t>(std::nearbyint(a * pow2(M - kMinExponent)));
    }
    constexpr int kShift = 23 - M;
    const uint32_t rounded = bits + ((1u << (kShift - 1)) - 1) + ((bits >> kShift) & 1u);
    return (rounded >> kShift) - (static_cast<uint32_t>(127 - Bias) << M);
  }
};

// E8M0: an unsigned power of two 2^(e - 127), e in [0, 254]; 255 is NaN. No zero, no sign.
struct E8M0 {
  static constexpr int kBits = 8;
  enum class Round { kUp, kDown, kNearest };  // Cast's round_mode: "up" (default), "down", "nearest"

  static constexpr float decode(uint32_t bits) {
    if (bits == 0xff) return std::bit_cast<float>(0x7fc00000u);
    return bits == 0 ? std::bit_cast<float>(0x00400000u) : std::bit_cast<float>(bits << 23);  // 2^-127 is subnormal
  }

  // |x| rounded to a power of two by its float exponent and mantissa bits, as ONNX's
  // reference does (the sign is ignored: negative inputs are unspecified). With `saturate`,
  // what rounds past 2^127 (Inf included) gives 2^127 and zero gives 2^-127; without, NaN.
  static uint32_t encode(float x, bool saturate = true, Round round = Round::kUp) {
    const uint32_t bits = std::bit_cast<uint32_t>(x) & 0x7fffffffu;
    if (bits > 0x7f800000u) return 0xff;
    if (bits == 0x7f800000u) return saturate ? 0xfe : 0xff;
    if (bits == 0 && !saturate) return 0xff;
    uint32_t exponent = bits >> 23;
    const uint32_t mantissa = bits & 0x7fffffu;
    // Nearest: ties away from zero for normal floats; a subnormal float's mantissa has no
    // implicit leading one, and its exact half does not round up (onnx.reference's rule).
    const bool half_up = mantissa > 0x400000u || (mantissa == 0x400000u && exponent != 0);
    const bool up = round == Round::kUp ? mantissa != 0 : round == Round::kNearest && half_up;
    if (up) ++exponent;
    if (exponent == 0xff) return saturate ? 0xfe : 0xff;
    return exponent;
  }
};

}  // namespace narrow_float

using Float8E4M3FNFormat = narrow_float::Format<4, 3, 7, narrow_float::Specials::kAllOnesNan>;
using Float8E4M3FNUZFormat = narrow_float::Format<4, 3, 8, narrow_float::Specials::kNegativeZero>;
using Float8E5M2Format = narrow_float::Format<5, 2, 15, narrow_float::Specials::kIeee>;
using Float8E5M2FNUZFormat = narrow_float::Format<5, 2, 16, narrow_float::Specials::kNegativeZero>;
using Float8E8M0Format = narrow_float::E8M0;
// Packed two per byte in tensors (DType::kFloat4E2M1): it has no storage type of its own.
using Float4E2M1Format = narrow_float::Format<2, 1, 1, narrow_float::Specials::kNone>;

// One byte of a float8 format; converting from float rounds to nearest even and saturates.
template <typename Format>
struct Float8 {
  using NarrowFormat = Format;
  uint8_t bits = 0;

  Float8() = default;
  explicit Float8(float value) : bits(static_cast<uint8_t>(Format::encode(value))) {}
  explicit operator float() const { return Format::decode(bits); }
  static Float8 from_bits(uint8_t bits) {
    Float8 f;
    f.bits = bits;
    return f;
  }
};

using Float8E4M3FN = Float8<Float8E4M3FNFormat>;
using Float8E4M3FNUZ = Float8<Float8E4M3FNUZFormat>;
using Float8E5M2 = Float8<Float8E5M2Format>;
using Float8E5M2FNUZ = Float8<Float8E5M2FNUZFormat>;
using Float8E8M0 = Float8<Float8E8M0Format>;

}  // namespace onnxtrain
