// IEEE half and bfloat16 storage types; arithmetic happens in float.
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>

namespace onnxtrain {

struct Float16 {
  uint16_t bits = 0;

  Float16() = default;
  explicit Float16(float value) : bits(from_float(value)) {}
  operator float() const { return to_float(bits); }

  static uint16_t from_float(float value) {
    const uint32_t f = std::bit_cast<uint32_t>(value);
    const uint32_t sign = (f >> 16) & 0x8000u;
    const uint32_t abs = f & 0x7fffffffu;
    if (abs >= 0x7f800000u) {  // inf or nan
      return static_cast<uint16_t>(sign | 0x7c00u | (abs > 0x7f800000u ? 0x200u : 0u));
    }
    if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow
    if (abs < 0x38800000u) {  // subnormal half (or zero): round to nearest even
      const float magic = std::bit_cast<float>(abs) + 0.5f;
      return static_cast<uint16_t>(sign | (std::bit_cast<uint32_t>(magic) - 0x3f000000u));
    }
    const uint32_t mantissa_odd = (abs >> 13) & 1u;
    const uint32_t rounded = abs + 0xc8000fffu + mantissa_odd;  // rebias and round
    return static_cast<uint16_t>(sign | (rounded >> 13));
  }

  static float to_float(uint16_t h) {
    const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
    const uint32_t exponent = (h >> 10) & 0x1fu;
    uint32_t mantissa = h & 0x3ffu;
    if (exponent == 0x1f) return std::bit_cast<float>(sign | 0x7f800000u | (mantissa << 13));
    if (exponent != 0) {
      return std::bit_cast<float>(sign | ((exponent + 112u) << 23) | (mantissa << 13));
    }
    if (mantissa == 0) return std::bit_cast<float>(sign);
    // Subnormal half: value is mantissa * 2^-24.
    const float value = static_cast<float>(mantissa) * 5.9604644775390625e-8f;
    return sign ? -value : value;
  }
};

struct BFloat16 {
  uint16_t bits = 0;

  BFloat16() = default;
  explicit BFloat16(float value) : bits(from_float(value)) {}
  operator float() const { return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16); }

  static uint16_t from_float(float value) {
    const uint32_t f = std::bit_cast<uint32_t>(value);
    if ((f & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((f >> 16) | 0x40u);  // nan
    const uint32_t rounding = 0x7fffu + ((f >> 16) & 1u);                                  // round to nearest even
    return static_cast<uint16_t>((f + rounding) >> 16);
  }
};

}  // namespace onnxtrain
