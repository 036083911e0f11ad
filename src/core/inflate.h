// DEFLATE decompression (RFC 1951) inside the zlib format (RFC 1950), as PNG stores its
// pixels. Small and plain: canonical Huffman decoding one bit at a time, no tables to tune.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace onnxtrain {

// The bytes a zlib stream holds. Throws Error (kInvalidArgument) naming `what` (the file or
// the input it came from) when the stream is malformed, truncated, needs a preset
// dictionary, fails its Adler-32 check, or would exceed `max_size` bytes.
std::vector<uint8_t> zlib_inflate(std::span<const uint8_t> stream, size_t max_size, const std::string& what);

}  // namespace onnxtrain
