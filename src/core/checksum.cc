#include "core/checksum.h"

#include <array>
#include <cstring>

namespace onnxtrain {
namespace {

constexpr uint32_t kPolynomial = 0x82F63B78;  // Castagnoli's, bit-reversed

constexpr std::array<uint32_t, 256> make_table() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int bit = 0; bit < 8; ++bit) c = (c >> 1) ^ (c & 1 ? kPolynomial : 0);
    table[i] = c;
  }
  return table;
}

constexpr std::array<uint32_t, 256> kTable = make_table();

uint32_t crc32c_table(const std::byte* p, size_t n, uint32_t crc) noexcept {
  for (size_t i = 0; i < n; ++i) crc = (crc >> 8) ^ kTable[(crc ^ static_cast<uint8_t>(p[i])) & 0xFF];
  return crc;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) uint32_t crc32c_sse42(const std::byte* p, size_t n, uint32_t crc) noexcept {
  uint64_t c = crc;
  for (; n >= 8; p += 8, n -= 8) {
    uint64_t word;
    std::memcpy(&word, p, sizeof word);
    c = __builtin_ia32_crc32di(c, word);
  }
  auto c32 = static_cast<uint32_t>(c);
  for (; n > 0; ++p, --n) c32 = __builtin_ia32_crc32qi(c32, static_cast<uint8_t>(*p));
  return c32;
}
#endif

}  // namespace

uint32_t crc32c(std::span<const std::byte> data, uint32_t crc) noexcept {
  crc = ~crc;
#if defined(__x86_64__)
  static const bool has_sse42 = __builtin_cpu_supports("sse4.2");
  if (has_sse42) return ~crc32c_sse42(data.data(), data.size(), crc);
#endif
  return ~crc32c_table(data.data(), data.size(), crc);
}

}  // namespace onnxtrain
