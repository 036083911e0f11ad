// What the ImageDecoder's format decoders share: the decoded image, and the encoded stream
// with bounds-checked reads and the two ways of refusing it (image.cc: BMP, PNG, PNM and
// the kernel; image_jpeg.cc; image_tiff.cc).
#pragma once

#include <onnxtrain/error.h>

#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "ops/kernel.h"

namespace onnxtrain::image {

// Dimensions beyond this many pixels are refused: a corrupt header must not allocate
// gigabytes.
constexpr int64_t kMaxPixels = int64_t{1} << 28;

struct Image {
  int64_t width = 0, height = 0;
  int channels = 3;  // 1: gray, 3: RGB
  std::vector<uint8_t> pixels;
};

// The bytes of encoded_stream. Every read is bounds-checked and fails with a message that
// names what was being read.
class EncodedStream {
 public:
  EncodedStream(std::span<const uint8_t> data, const KernelContext& ctx) : data_(data), ctx_(ctx) {}

  // A malformed stream: an Error (kInvalidArgument) naming the node and encoded_stream.
  [[noreturn]] void fail(const std::string& problem) const { ctx_.fail("encoded_stream: " + problem); }
  // A well-formed stream that uses something onnxtrain does not decode (kNotImplemented;
  // the executor names the node in front of the message). `instead`: what is decoded.
  [[noreturn]] void refuse(const std::string& what, const std::string& instead = "") const {
    const std::string alternative = instead.empty() ? "" : "; onnxtrain decodes " + instead;
    throw Error("encoded_stream: " + what + " is not supported" + alternative, ErrorKind::kNotImplemented);
  }

  std::span<const uint8_t> bytes() const { return data_; }
  size_t size() const { return data_.size(); }
  bool starts_with(const char* magic, size_t n = 0) const {
    if (n == 0) n = std::strlen(magic);
    return data_.size() >= n && std::memcmp(data_.data(), magic, n) == 0;
  }
  // Fails unless bytes [0, end) exist.
  void need(size_t end, const std::string& what) const {
    if (end > data_.size()) fail(what + " is cut off (" + std::to_string(data_.size()) + " bytes)");
  }
  // `count` bytes from `at`, after checking they exist.
  std::span<const uint8_t> slice(size_t at, size_t count, const std::string& what) const {
    if (at > data_.size() || count > data_.size() - at) need(data_.size() + 1, what);
    return data_.subspan(at, count);
  }
  uint16_t le16(size_t at, const std::string& what = "the header") const {
    const auto p = slice(at, 2, what);
    return static_cast<uint16_t>(p[0] | (p[1] << 8));
  }
  uint32_t le32(size_t at, const std::string& what = "the header") const {
    const auto p = slice(at, 4, what);
    return p[0] | (p[1] << 8) | (p[2] << 16) | (static_cast<uint32_t>(p[3]) << 24);
  }
  uint16_t be16(size_t at, const std::string& what = "the header") const {
    const auto p = slice(at, 2, what);
    return static_cast<uint16_t>((p[0] << 8) | p[1]);
  }
  uint32_t be32(size_t at, const std::string& what = "the header") const {
    const auto p = slice(at, 4, what);
    return (static_cast<uint32_t>(p[0]) << 24) | (p[1] << 16) | (p[2] << 8) | p[3];
  }

  void check_size(int64_t width, int64_t height) const {
    if (width < 1 || height < 1 || width > kMaxPixels || height > kMaxPixels || width * height > kMaxPixels) {
      fail("image of " + std::to_string(width) + " x " + std::to_string(height) + " pixels: expected 1 to 2^28");
    }
  }
  // Called once the stream is known to hold the pixels, so that a corrupt header cannot
  // make it allocate more than the data could fill.
  Image blank(int64_t width, int64_t height, int channels) const {
    check_size(width, height);
    Image image{width, height, channels, {}};
    image.pixels.resize(static_cast<size_t>(width * height * channels));
    return image;
  }

 protected:
  std::span<const uint8_t> data_;
  const KernelContext& ctx_;
};

// Baseline (and extended sequential 8-bit) Huffman-coded JPEG, decoded as libjpeg-turbo
// does by default (image_jpeg.cc). The stream starts with SOI.
Image decode_jpeg(const EncodedStream& stream);

// Baseline TIFF, first image (image_tiff.cc). The stream starts with "II*\0" or "MM\0*".
Image decode_tiff(const EncodedStream& stream);

}  // namespace onnxtrain::image
