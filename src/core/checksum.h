// CRC-32C (Castagnoli), the checksum checkpoints keep of each tensor's bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace onnxtrain {

// CRC-32C of `data` (crc32c("123456789") == 0xE3069283), continuing from `crc` (the value
// of the bytes before). SSE4.2's crc32 instruction where the CPU has it, else a table.
uint32_t crc32c(std::span<const std::byte> data, uint32_t crc = 0) noexcept;

}  // namespace onnxtrain
