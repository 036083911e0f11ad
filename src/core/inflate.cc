#include "core/inflate.h"

#include <onnxtrain/error.h>

#include <array>

namespace onnxtrain {
namespace {

constexpr int kMaxBits = 15;

class Inflater {
 public:
  Inflater(std::span<const uint8_t> in, size_t max_size, const std::string& what)
      : in_(in), max_size_(max_size), what_(what) {}

  // Decodes DEFLATE blocks from byte `at` up to the final one; returns the byte after them.
  size_t run(size_t at, std::vector<uint8_t>& out) {
    pos_ = at;
    bool last = false;
    while (!last) {
      last = bits(1) != 0;
      switch (bits(2)) {
        case 0:
          stored(out);
          break;
        case 1:
          fixed(out);
          break;
        case 2:
          dynamic(out);
          break;
        default:
          fail("a block of the reserved type 3");
      }
    }
    return pos_;
  }

  [[noreturn]] void fail(const std::string& problem) const {
    throw Error(what_ + ": corrupt zlib/DEFLATE data: " + problem, ErrorKind::kInvalidArgument);
  }

 private:
  // A canonical Huffman code: how many codes have each length, and the symbols in code order.
  struct Huffman {
    std::array<uint16_t, kMaxBits + 1> count{};
    std::vector<uint16_t> symbol;
  };

  uint32_t bits(int need) {
    uint32_t value = bit_buffer_;
    while (bit_count_ < need) {
      if (pos_ >= in_.size()) fail("the stream ends early");
      value |= static_cast<uint32_t>(in_[pos_++]) << bit_count_;
      bit_count_ += 8;
    }
    bit_buffer_ = value >> need;
    bit_count_ -= need;
    return value & ((1u << need) - 1);
  }

  // Builds `h` from code lengths; returns 0 for a complete code, > 0 for an incomplete one
  // (codes left unused), < 0 for an over-subscribed one.
  static int build(Huffman& h, const uint16_t* lengths, int n) {
    h.count.fill(0);
    for (int s = 0; s < n; ++s) h.count[lengths[s]]++;
    if (h.count[0] == n) return 0;
    int left = 1;
    for (int len = 1; len <= kMaxBits; ++len) {
      left = (left << 1) - h.count[len];
      if (left < 0) return left;
    }
    std::array<uint16_t, kMaxBits + 1> offsets{};
    for (int len = 1; len < kMaxBits; ++len) offsets[len + 1] = offsets[len] + h.count[len];
    h.symbol.assign(static_cast<size_t>(n), 0);
    for (int s = 0; s < n; ++s) {
      if (lengths[s] != 0) h.symbol[offsets[lengths[s]]++] = static_cast<uint16_t>(s);
    }
    return left;
  }

  int decode(const Huffman& h) {
    int code = 0, first = 0, index = 0;
    for (int len = 1; len <= kMaxBits; ++len) {
      code |= static_cast<int>(bits(1));
      const int count = h.count[len];
      if (code - count < first) return h.symbol[static_cast<size_t>(index + (code - first))];
      index += count;
      first = (first + count) << 1;
      code <<= 1;
    }
    fail("a code that is not in the Huffman table");
  }

  void emit(std::vector<uint8_t>& out, uint8_t byte) {
    if (out.size() >= max_size_) fail("more than the expected " + std::to_string(max_size_) + " bytes");
    out.push_back(byte);
  }

  void stored(std::vector<uint8_t>& out) {
    bit_buffer_ = 0;
    bit_count_ = 0;
    if (pos_ + 4 > in_.size()) fail("a stored block's header is cut off");
    const unsigned len = in_[pos_] | (in_[pos_ + 1] << 8), nlen = in_[pos_ + 2] | (in_[pos_ + 3] << 8);
    pos_ += 4;
    if (len != (~nlen & 0xffffu)) fail("a stored block's length does not match its complement");
    if (pos_ + len > in_.size()) fail("a stored block is cut off");
    for (unsigned i = 0; i < len; ++i) emit(out, in_[pos_ + i]);
    pos_ += len;
  }

  void codes(std::vector<uint8_t>& out, const Huffman& lengths, const Huffman& distances) {
    static constexpr uint16_t kLengthBase[] = {3,  4,  5,  6,  7,  8,  9,  10, 11,  13,  15,  17,  19,  23, 27,
                                               31, 35, 43, 51, 59, 67, 83, 99, 115, 131, 163, 195, 227, 258};
    static constexpr uint8_t kLengthExtra[] = {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2,
                                               2, 3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 0};
    static constexpr uint16_t kDistanceBase[] = {1,    2,    3,    4,    5,    7,    9,    13,    17,    25,
                                                 33,   49,   65,   97,   129,  193,  257,  385,   513,   769,
                                                 1025, 1537, 2049, 3073, 4097, 6145, 8193, 12289, 16385, 24577};
    static constexpr uint8_t kDistanceExtra[] = {0, 0, 0, 0, 1, 1, 2, 2,  3,  3,  4,  4,  5,  5,  6,
                                                 6, 7, 7, 8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13};
    for (;;) {
      int symbol = decode(lengths);
      if (symbol < 256) {
        emit(out, static_cast<uint8_t>(symbol));
        continue;
      }
      if (symbol == 256) return;
      symbol -= 257;
      if (symbol >= 29) fail("a length symbol out of range");
      const size_t len = kLengthBase[symbol] + bits(kLengthExtra[symbol]);
      const int d = decode(distances);
      if (d >= 30) fail("a distance symbol out of range");
      const size_t distance = kDistanceBase[d] + bits(kDistanceExtra[d]);
      if (distance > out.size()) fail("a distance reaching before the start of the data");
      for (size_t i = 0; i < len; ++i) emit(out, out[out.size() - distance]);
    }
  }

  void fixed(std::vector<uint8_t>& out) {
    if (!fixed_built_) {
      std::array<uint16_t, 288> lengths{};
      for (int s = 0; s < 288; ++s) lengths[s] = s < 144 ? 8 : s < 256 ? 9 : s < 280 ? 7 : 8;
      build(fixed_lengths_, lengths.data(), 288);
      std::array<uint16_t, 30> distances;
      distances.fill(5);
      build(fixed_distances_, distances.data(), 30);
      fixed_built_ = true;
    }
    codes(out, fixed_lengths_, fixed_distances_);
  }

  void dynamic(std::vector<uint8_t>& out) {
    static constexpr uint8_t kOrder[19] = {16, 17, 18, 0, 8, 7, 9, 6, 10, 5, 11, 4, 12, 3, 13, 2, 14, 1, 15};
    const int nlen = static_cast<int>(bits(5)) + 257, ndist = static_cast<int>(bits(5)) + 1;
    const int ncode = static_cast<int>(bits(4)) + 4;
    if (nlen > 286 || ndist > 30) fail("too many length or distance codes");
    std::array<uint16_t, 320> lengths{};
    for (int i = 0; i < ncode; ++i) lengths[kOrder[i]] = static_cast<uint16_t>(bits(3));
    Huffman code_lengths;
    if (build(code_lengths, lengths.data(), 19) != 0) fail("an incomplete code-length code");
    lengths.fill(0);
    for (int i = 0; i < nlen + ndist;) {
      int symbol = decode(code_lengths);
      if (symbol < 16) {
        lengths[i++] = static_cast<uint16_t>(symbol);
        continue;
      }
      uint16_t value = 0;
      int repeat = 0;
      if (symbol == 16) {
        if (i == 0) fail("a repeat with no length before it");
        value = lengths[i - 1];
        repeat = 3 + static_cast<int>(bits(2));
      } else if (symbol == 17) {
        repeat = 3 + static_cast<int>(bits(3));
      } else {
        repeat = 11 + static_cast<int>(bits(7));
      }
      if (i + repeat > nlen + ndist) fail("code lengths repeated past their end");
      while (repeat-- > 0) lengths[i++] = value;
    }
    if (lengths[256] == 0) fail("no end-of-block code");
    Huffman literal, distance;
    // An incomplete code is allowed only when it has a single code.
    int left = build(literal, lengths.data(), nlen);
    if (left < 0 || (left > 0 && nlen - literal.count[0] != 1)) fail("a malformed literal/length code");
    left = build(distance, lengths.data() + nlen, ndist);
    if (left < 0 || (left > 0 && ndist - distance.count[0] != 1)) fail("a malformed distance code");
    codes(out, literal, distance);
  }

  std::span<const uint8_t> in_;
  size_t max_size_;
  const std::string& what_;
  size_t pos_ = 0;
  uint32_t bit_buffer_ = 0;
  int bit_count_ = 0;
  bool fixed_built_ = false;
  Huffman fixed_lengths_, fixed_distances_;
};

uint32_t adler32(std::span<const uint8_t> data) {
  uint32_t a = 1, b = 0;
  for (uint8_t byte : data) {
    a = (a + byte) % 65521;
    b = (b + a) % 65521;
  }
  return (b << 16) | a;
}

}  // namespace

std::vector<uint8_t> zlib_inflate(std::span<const uint8_t> stream, size_t max_size, const std::string& what) {
  Inflater inflater(stream, max_size, what);
  if (stream.size() < 6) inflater.fail("shorter than a zlib header and checksum");
  const unsigned cmf = stream[0], flg = stream[1];
  if ((cmf & 15) != 8 || (cmf * 256 + flg) % 31 != 0) inflater.fail("not a zlib header with the DEFLATE method");
  if (flg & 0x20) inflater.fail("needs a preset dictionary");
  std::vector<uint8_t> out;
  const size_t end = inflater.run(2, out);
  if (end + 4 > stream.size()) inflater.fail("the Adler-32 checksum is missing");
  const uint32_t stored =
      (static_cast<uint32_t>(stream[end]) << 24) | (stream[end + 1] << 16) | (stream[end + 2] << 8) | stream[end + 3];
  if (stored != adler32(out)) inflater.fail("the Adler-32 checksum does not match");
  return out;
}

}  // namespace onnxtrain
