// The safetensors file format (https://github.com/huggingface/safetensors), read and
// written by onnxtrain itself:
//
//   8 bytes   N, the header length, an unsigned little-endian 64-bit integer
//   N bytes   a UTF-8 JSON object: {"<tensor name>": {"dtype": "F32", "shape": [2, 3],
//             "data_offsets": [begin, end]}, ..., "__metadata__": {"<str>": "<str>"}}
//   the rest  the tensors' raw little-endian bytes, C order; offsets count from here
//
// The tensors' byte ranges cover the data section exactly: back to back, no holes, no
// overlaps, nothing after the last one. The reference implementation refuses headers
// over 100 MB and pads the header with spaces so that the data starts 8-byte aligned.
#pragma once

#include <onnxtrain/tensor.h>

#include <cstdint>
#include <filesystem>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace onnxtrain::safetensors {

// Where one tensor's bytes lie in the data section (offsets relative to its start).
struct TensorInfo {
  std::string name;
  DType dtype = DType::kUndefined;
  Shape shape;
  uint64_t begin = 0;
  uint64_t end = 0;
};

struct Header {
  std::vector<TensorInfo> tensors;  // sorted by offset
  std::map<std::string, std::string> metadata;
  uint64_t data_start = 0;  // file offset of the data section: 8 + N
};

struct Contents {
  std::vector<std::pair<std::string, Tensor>> tensors;  // in file (offset) order
  std::map<std::string, std::string> metadata;
};

// The largest header the reference implementation accepts.
inline constexpr uint64_t kMaxHeaderBytes = 100'000'000;

// The safetensors spelling of an element type ("F32", "BF16", "BOOL", ...); empty for the
// types safetensors has no name for (string).
std::string_view dtype_code(DType dtype) noexcept;
// The element type of a safetensors dtype name; kUndefined for names onnxtrain cannot hold
// (the 8-bit and 4-bit floats, complex) and for unknown names.
DType dtype_from_code(std::string_view code) noexcept;

// Reads and validates only the header. Throws an Error naming the file (and the tensor,
// where there is one) for a file shorter than its header, a header that is not a JSON
// object, an unknown dtype, a malformed shape or offset pair, byte ranges that do not
// match shape x dtype size, overlap, leave holes, or do not end exactly at the end of the
// file, and a "__metadata__" that is not a string-to-string object.
Header read_header(const std::filesystem::path& path);

// Reads and validates a whole file; each tensor gets its own aligned heap buffer.
Contents read(const std::filesystem::path& path);

// Writes `tensors` and `metadata` atomically (temporary file, fsync, rename): a process
// killed while writing leaves the previous file untouched. Tensors are laid out largest
// element size first, then by name, as the reference implementation does, so that every
// tensor's data is aligned to its element size. Names must be unique, non-empty, valid
// UTF-8 and not "__metadata__".
void write(const std::filesystem::path& path, std::span<const std::pair<std::string, Tensor>> tensors,
           const std::map<std::string, std::string>& metadata);

}  // namespace onnxtrain::safetensors
