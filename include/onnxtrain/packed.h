// The 4-bit element types (int4, uint4, float4e2m1), packed two per byte as ONNX stores
// them: element 2i in the low half of byte i, element 2i+1 in the high half. A tensor of an
// odd element count leaves the high half of its last byte zero.
#pragma once

#include <cstdint>

namespace onnxtrain::packed {

// The 4 bits of element i.
inline uint8_t get(const void* data, int64_t i) {
  const uint8_t byte = static_cast<const uint8_t*>(data)[i >> 1];
  return (i & 1) ? static_cast<uint8_t>(byte >> 4) : static_cast<uint8_t>(byte & 0x0f);
}

// The value of int4 bits (two's complement) and of uint4 bits.
inline int32_t int4_value(uint8_t bits) {
  return static_cast<int32_t>(bits ^ 8u) - 8;
}
inline int32_t uint4_value(uint8_t bits) {
  return bits;
}

// Element i's value as an integer, for int4 (`is_signed`) or uint4.
inline int32_t get_int(const void* data, int64_t i, bool is_signed) {
  const uint8_t bits = get(data, i);
  return is_signed ? int4_value(bits) : uint4_value(bits);
}

// Writes elements [begin, end) from `bits(i)` (its low 4 bits). Whole bytes are written, so
// threads writing ranges that start at even indices never share a byte; an odd `end` that
// is the tensor's end leaves the high half of the last byte zero.
template <typename Bits>
void write(void* data, int64_t begin, int64_t end, Bits bits) {
  auto* out = static_cast<uint8_t*>(data);
  int64_t i = begin;
  for (; i + 1 < end; i += 2) {
    out[i >> 1] = static_cast<uint8_t>((bits(i) & 0x0f) | ((bits(i + 1) & 0x0f) << 4));
  }
  if (i < end) out[i >> 1] = static_cast<uint8_t>(bits(i) & 0x0f);
}

}  // namespace onnxtrain::packed
