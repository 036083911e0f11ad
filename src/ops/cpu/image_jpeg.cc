// Baseline JPEG for ImageDecoder (ITU T.81, sequential DCT with Huffman coding, 8-bit
// samples): SOF0, and SOF1 (the same coding with up to four tables of each kind); one
// component (gray) or three (YCbCr, or RGB where an Adobe marker or the component ids say
// so); sampling factors 1 or 2; restart intervals; one scan or several.
//
// The pixels are those of libjpeg-turbo's defaults, which Pillow (the ONNX reference) uses,
// bit for bit: the accurate integer inverse DCT (the Loeffler-Ligtenberg-Moschytz
// factorization with 13-bit constants, two fraction bits kept between its passes),
// triangular ("fancy") upsampling of subsampled components, and JFIF's YCbCr -> RGB in
// 16-bit fixed point. Progressive, arithmetic-coded, lossless, hierarchical and 12-bit
// JPEGs and 4-component (CMYK, YCCK) ones are refused with an error naming the feature.
#include <algorithm>
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ops/cpu/image.h"

namespace onnxtrain::image {
namespace {

// Markers (T.81 Table B.1) that the decoder acts on.
constexpr uint8_t kSOF0 = 0xC0, kSOF1 = 0xC1, kSOF2 = 0xC2, kSOF3 = 0xC3, kDHT = 0xC4, kJPG = 0xC8, kDAC = 0xCC;
constexpr uint8_t kRST0 = 0xD0, kRST7 = 0xD7, kSOI = 0xD8, kEOI = 0xD9, kSOS = 0xDA, kDQT = 0xDB, kDNL = 0xDC;
constexpr uint8_t kDRI = 0xDD, kAPP0 = 0xE0, kAPP14 = 0xEE, kAPP15 = 0xEF, kCOM = 0xFE, kTEM = 0x01;

std::string hex(unsigned byte) {
  static constexpr char kDigits[] = "0123456789ABCDEF";
  return {kDigits[(byte >> 4) & 15], kDigits[byte & 15]};
}

// natural_index[k]: where the k-th coefficient of the zigzag sequence (T.81 Figure A.6)
// lies in the row-major 8 x 8 block. The sequence walks the anti-diagonals, even ones
// upwards (row falling), odd ones downwards.
constexpr std::array<uint8_t, 64> zigzag_to_natural() {
  std::array<uint8_t, 64> natural_index{};
  int k = 0;
  for (int diagonal = 0; diagonal < 15; ++diagonal) {
    for (int i = 0; i <= diagonal; ++i) {
      const int row = diagonal % 2 == 0 ? diagonal - i : i, column = diagonal - row;
      if (row < 8 && column < 8) natural_index[static_cast<size_t>(k++)] = static_cast<uint8_t>(row * 8 + column);
    }
  }
  return natural_index;
}
constexpr std::array<uint8_t, 64> kNaturalIndex = zigzag_to_natural();

// ---- Inverse DCT.

// A constant of the factorization in 13-bit fixed point, round(x * 2^13).
constexpr int kConstBits = 13;
constexpr int64_t fixed13(double x) {
  return static_cast<int64_t>(x * (1 << kConstBits) + 0.5);
}
// Bits of fraction kept between the column and the row pass.
constexpr int kPass1Bits = 2;

constexpr int64_t descale(int64_t x, int bits) {
  return (x + (int64_t{1} << (bits - 1))) >> bits;
}

// One 8-point inverse DCT in the factorization of Loeffler, Ligtenberg and Moschytz (1989):
// the even inputs through one rotation by 3pi/8, the odd ones through the shared
// multiplier 1.175875602 (sqrt 2 cos 3pi/16) and eight others. Products are exact, so the
// result depends only on the rounded constants, not on the order of the sums. y is x's
// transform scaled by 2^13 * sqrt 8.
void inverse_dct_8(const int64_t x[8], int64_t y[8]) {
  const int64_t rotation = (x[2] + x[6]) * fixed13(0.541196100);
  const int64_t even2 = rotation - x[6] * fixed13(1.847759065);
  const int64_t even3 = rotation + x[2] * fixed13(0.765366865);
  const int64_t sum04 = (x[0] + x[4]) << kConstBits, difference04 = (x[0] - x[4]) << kConstBits;
  const int64_t e0 = sum04 + even3, e3 = sum04 - even3, e1 = difference04 + even2, e2 = difference04 - even2;

  const int64_t x7 = x[7], x5 = x[5], x3 = x[3], x1 = x[1];
  const int64_t shared = (x7 + x5 + x3 + x1) * fixed13(1.175875602);
  const int64_t z1 = (x7 + x1) * -fixed13(0.899976223), z2 = (x5 + x3) * -fixed13(2.562915447);
  const int64_t z3 = (x7 + x3) * -fixed13(1.961570560) + shared, z4 = (x5 + x1) * -fixed13(0.390180644) + shared;
  const int64_t o7 = x7 * fixed13(0.298631336) + z1 + z3, o5 = x5 * fixed13(2.053119869) + z2 + z4;
  const int64_t o3 = x3 * fixed13(3.072711026) + z2 + z3, o1 = x1 * fixed13(1.501321110) + z1 + z4;

  y[0] = e0 + o1, y[7] = e0 - o1;
  y[1] = e1 + o3, y[6] = e1 - o3;
  y[2] = e2 + o5, y[5] = e2 - o5;
  y[3] = e3 + o7, y[4] = e3 - o7;
}

// Dequantized coefficients (row-major) -> 8 x 8 samples at `out`. Columns first, kept
// with kPass1Bits of fraction, then rows, scaled down by the 8 of the 2-D transform too;
// samples are level-shifted by 128 and saturated to 0..255 (libjpeg-turbo's SIMD code,
// which Pillow runs on x86, saturates; only corrupt data comes near the limits).
void inverse_dct(const std::array<int32_t, 64>& coefficients, uint8_t* out, size_t stride) {
  std::array<int64_t, 64> workspace;
  int64_t x[8], y[8];
  for (int column = 0; column < 8; ++column) {
    for (int i = 0; i < 8; ++i) x[i] = coefficients[static_cast<size_t>(8 * i + column)];
    inverse_dct_8(x, y);
    for (int i = 0; i < 8; ++i) workspace[static_cast<size_t>(8 * i + column)] = descale(y[i], kConstBits - kPass1Bits);
  }
  for (int row = 0; row < 8; ++row) {
    for (int i = 0; i < 8; ++i) x[i] = workspace[static_cast<size_t>(8 * row + i)];
    inverse_dct_8(x, y);
    for (int i = 0; i < 8; ++i) {
      const int64_t sample = descale(y[i], kConstBits + kPass1Bits + 3) + 128;
      out[static_cast<size_t>(row) * stride + static_cast<size_t>(i)] =
          static_cast<uint8_t>(std::clamp<int64_t>(sample, 0, 255));
    }
  }
}

// ---- Color conversion.

// JFIF's YCbCr -> RGB (R = Y + 1.402 Cr', G = Y - 0.34414 Cb' - 0.71414 Cr',
// B = Y + 1.772 Cb', with Cb' = Cb - 128) in 16-bit fixed point: the red and blue terms are
// rounded on their own, the two green ones are summed before rounding.
class YCbCrToRgb {
 public:
  YCbCrToRgb() {
    for (int i = 0; i < 256; ++i) {
      const int64_t centered = i - 128;
      red_from_cr_[static_cast<size_t>(i)] = static_cast<int>((fixed16(1.40200) * centered + kHalf) >> 16);
      blue_from_cb_[static_cast<size_t>(i)] = static_cast<int>((fixed16(1.77200) * centered + kHalf) >> 16);
      green_from_cr_[static_cast<size_t>(i)] = -fixed16(0.71414) * centered;
      green_from_cb_[static_cast<size_t>(i)] = -fixed16(0.34414) * centered + kHalf;
    }
  }
  void operator()(uint8_t y, uint8_t cb, uint8_t cr, uint8_t* rgb) const {
    const int green = static_cast<int>((green_from_cb_[cb] + green_from_cr_[cr]) >> 16);
    rgb[0] = clamp(y + red_from_cr_[cr]);
    rgb[1] = clamp(y + green);
    rgb[2] = clamp(y + blue_from_cb_[cb]);
  }

 private:
  static constexpr int64_t kHalf = int64_t{1} << 15;
  static constexpr int64_t fixed16(double x) { return static_cast<int64_t>(x * 65536 + 0.5); }
  static uint8_t clamp(int v) { return static_cast<uint8_t>(std::clamp(v, 0, 255)); }

  std::array<int, 256> red_from_cr_, blue_from_cb_;
  std::array<int64_t, 256> green_from_cr_, green_from_cb_;
};

// ---- Huffman decoding.

// A table of canonical Huffman codes (T.81 Annex C): the codes of each length are
// consecutive numbers, following the last code of the length before, doubled.
struct HuffmanTable {
  static constexpr int kFastBits = 9;
  bool defined = false;
  std::array<uint8_t, 256> values{};
  std::array<int32_t, 17> last_code{};     // by length; -1 where no code has the length
  std::array<int32_t, 17> value_offset{};  // values[code + value_offset[length]]
  // By the next kFastBits bits: length << 8 | value of the code they start with; 0 when
  // that code is longer.
  std::array<uint16_t, 1 << kFastBits> fast{};
};

// The entropy-coded data of a scan, bit by bit (T.81 F.1.2.3): bytes up to the next marker,
// with the 0x00 stuffed after each 0xFF data byte dropped. At the marker it goes on with
// zero bits, so that a code can be looked up 16 bits ahead at the end of the data; using
// one of those bits is an error.
class EntropyReader {
 public:
  EntropyReader(const EncodedStream& in, size_t at) : in_(in), data_(in.bytes()), at_(at) {}

  // The next n (1..16) bits, left in place.
  uint32_t peek(int n) {
    if (count_ < n) fill();
    return static_cast<uint32_t>(buffer_ >> (count_ - n)) & ((1u << n) - 1);
  }
  void skip(int n) {
    if (n > count_ - padding_) ran_out();
    count_ -= n;
  }
  uint32_t bits(int n) {
    const uint32_t value = peek(n);
    skip(n);
    return value;
  }

  // Ends a restart interval: the bits left are padding, and the marker that follows must
  // be RST`index` (T.81 F.1.2.3).
  void restart(int index) {
    buffer_ = 0, count_ = 0, padding_ = 0;
    const uint8_t marker = next_marker();
    if (marker != kRST0 + index) {
      in_.fail("expected the restart marker FF" + hex(kRST0 + static_cast<unsigned>(index)) + ", found FF" +
               hex(marker));
    }
    at_ += 2;
    at_marker_ = false;
  }
  // Where the scan's data ends: at the marker that follows it.
  size_t end() {
    next_marker();
    return at_;
  }

 private:
  void fill() {
    while (count_ <= 56) {
      const uint8_t byte = at_marker_ ? 0 : next_byte();
      if (at_marker_) padding_ += 8;
      buffer_ = (buffer_ << 8) | byte;
      count_ += 8;
    }
  }
  // The next data byte; at a marker (or the end of the stream) sets at_marker_ and stays.
  uint8_t next_byte() {
    if (at_ >= data_.size()) return stop(true);
    if (data_[at_] != 0xFF) return data_[at_++];
    size_t next = at_ + 1;
    while (next < data_.size() && data_[next] == 0xFF) ++next;  // fill bytes
    if (next >= data_.size()) return stop(true);
    if (data_[next] != 0) {
      at_ = next - 1;
      return stop(false);
    }
    at_ = next + 1;
    return 0xFF;
  }
  uint8_t stop(bool truncated) {
    at_marker_ = true;
    truncated_ = truncated;
    return 0;
  }
  // Skips what is left of the data (libjpeg does too, with a warning) up to the marker.
  uint8_t next_marker() {
    while (!at_marker_) next_byte();
    if (truncated_) ran_out();
    return data_[at_ + 1];
  }
  [[noreturn]] void ran_out() const {
    if (truncated_) in_.fail("the JPEG's entropy-coded data is cut off (" + std::to_string(data_.size()) + " bytes)");
    in_.fail("the entropy-coded data ends (marker FF" + hex(data_[at_ + 1]) + " at byte " + std::to_string(at_) +
             ") before the scan's last block");
  }

  const EncodedStream& in_;
  std::span<const uint8_t> data_;
  size_t at_;
  uint64_t buffer_ = 0;  // count_ bits, the next one highest
  int count_ = 0;
  int padding_ = 0;  // the zero bits at the bottom of buffer_ supplied past the data
  bool at_marker_ = false, truncated_ = false;
};

// ---- The decoder.

struct Component {
  int id = 0, h = 1, v = 1, quant_index = 0;
  std::optional<std::array<uint16_t, 64>> quant;  // latched at the component's first scan
  int64_t width = 0, height = 0;                  // samples, after subsampling
  int64_t blocks_wide = 0, blocks_high = 0;       // of the plane: whole MCUs
  std::vector<uint8_t> plane;                     // blocks_wide * 8 samples a row
  int16_t dc_prediction = 0;
  int dc_table = 0, ac_table = 0;
  bool scanned = false;
  size_t stride() const { return static_cast<size_t>(blocks_wide) * 8; }
};

class JpegDecoder {
 public:
  explicit JpegDecoder(const EncodedStream& in) : in_(in) {}

  Image decode() {
    size_t at = 2;  // after SOI
    for (;;) {
      const uint8_t marker = next_marker(at);
      if (marker == kEOI) break;
      if (marker == kSOI) in_.fail("a second SOI marker at byte " + std::to_string(at - 2));
      // Markers without a segment that mean nothing outside a scan (libjpeg skips them too).
      if (marker == kTEM || (marker >= kRST0 && marker <= kRST7)) continue;
      const size_t length = in_.be16(at, "a JPEG marker segment");
      if (length < 2) in_.fail("a JPEG marker segment of length " + std::to_string(length));
      const std::span<const uint8_t> segment =
          in_.slice(at + 2, length - 2, "the JPEG marker segment FF" + hex(marker));
      at += length;
      if (marker == kSOS) {
        at = decode_scan(segment, at);
      } else {
        read_segment(marker, segment);
      }
    }
    if (components_.empty()) in_.fail("a JPEG without a frame header (SOF)");
    for (const Component& c : components_) {
      if (!c.scanned) in_.fail("JPEG component " + std::to_string(c.id) + " is in no scan");
    }
    return to_image();
  }

 private:
  // The marker at `at` (after any fill bytes), and `at` moved past it. Bytes before it
  // that are no marker are skipped, as libjpeg does.
  uint8_t next_marker(size_t& at) const {
    for (;;) {
      while (at < in_.size() && in_.bytes()[at] != 0xFF) ++at;
      while (at < in_.size() && in_.bytes()[at] == 0xFF) ++at;
      if (at >= in_.size()) in_.fail("the JPEG ends before its EOI marker (" + std::to_string(in_.size()) + " bytes)");
      const uint8_t marker = in_.bytes()[at++];
      if (marker != 0) return marker;
    }
  }

  void read_segment(uint8_t marker, std::span<const uint8_t> segment) {
    if (marker == kSOF0 || marker == kSOF1) return read_frame(segment);
    if (marker == kDHT) return read_huffman_tables(segment);
    if (marker == kDQT) return read_quant_tables(segment);
    if (marker == kDRI) return read_restart_interval(segment);
    if (marker == kAPP0) return read_jfif(segment);
    if (marker == kAPP14) return read_adobe(segment);
    if ((marker > kAPP0 && marker <= kAPP15) || marker == kCOM) return;
    const std::string sof = "SOF" + std::to_string(marker - kSOF0);
    if (marker == kSOF2 || marker == kSOF2 + 4) in_.refuse("progressive JPEG (" + sof + ")");
    if (marker == kSOF3 || marker == kSOF3 + 4) in_.refuse("lossless JPEG (" + sof + ")");
    if (marker == kSOF1 + 4) in_.refuse("hierarchical JPEG (" + sof + ")");
    if (marker > kJPG && marker <= 0xCF && marker != kDAC) in_.refuse("arithmetic-coded JPEG (" + sof + ")");
    if (marker == kDAC) in_.refuse("arithmetic-coded JPEG (DAC)");
    if (marker == kDNL) in_.refuse("a JPEG whose height is given by a DNL marker");
    in_.fail("an unknown JPEG marker FF" + hex(marker));
  }

  // SOF0/SOF1 (T.81 B.2.2): precision, height, width, then each component's id, sampling
  // factors and quantization table.
  void read_frame(std::span<const uint8_t> s) {
    if (!components_.empty()) in_.fail("a JPEG with two frame headers (SOF)");
    if (s.size() < 6) in_.fail("a short JPEG frame header");
    const int precision = s[0], count = s[5];
    const int64_t height = (s[1] << 8) | s[2], width = (s[3] << 8) | s[4];
    if (precision != 8) in_.refuse(std::to_string(precision) + "-bit JPEG", "8-bit samples");
    if (height == 0) in_.refuse("a JPEG whose height is given by a DNL marker");
    in_.check_size(width, height);
    if (count == 4) in_.refuse("4-component JPEG (CMYK or YCCK)");
    if (count != 1 && count != 3) in_.refuse("JPEG with " + std::to_string(count) + " components", "1 or 3");
    if (s.size() < 6 + 3 * static_cast<size_t>(count)) in_.fail("a short JPEG frame header");
    for (int i = 0; i < count; ++i) {
      const uint8_t* p = s.data() + 6 + 3 * i;
      Component c;
      c.id = p[0], c.h = p[1] >> 4, c.v = p[1] & 15, c.quant_index = p[2];
      if (c.h < 1 || c.h > 4 || c.v < 1 || c.v > 4 || c.quant_index > 3) {
        in_.fail("JPEG component " + std::to_string(c.id) + " with sampling factors " + std::to_string(c.h) + "x" +
                 std::to_string(c.v) + " and quantization table " + std::to_string(c.quant_index));
      }
      if (c.h > 2 || c.v > 2) {
        in_.refuse("JPEG sampling factor " + std::to_string(c.h) + "x" + std::to_string(c.v), "factors of 1 and 2");
      }
      for (const Component& other : components_) {
        if (other.id == c.id) in_.fail("two JPEG components with id " + std::to_string(c.id));
      }
      components_.push_back(c);
    }
    width_ = width, height_ = height;
    for (const Component& c : components_) max_h_ = std::max(max_h_, c.h), max_v_ = std::max(max_v_, c.v);
    mcus_wide_ = ceil_div(width_, 8 * max_h_), mcus_high_ = ceil_div(height_, 8 * max_v_);
    int64_t coded_blocks = 0;
    for (Component& c : components_) {
      c.width = ceil_div(width_ * c.h, max_h_), c.height = ceil_div(height_ * c.v, max_v_);
      c.blocks_wide = mcus_wide_ * c.h, c.blocks_high = mcus_high_ * c.v;
      coded_blocks += ceil_div(c.width, 8) * ceil_div(c.height, 8);
    }
    // Every block takes two bits at least (a DC code and an end-of-block code): a frame
    // that needs more blocks than the stream has bits for is corrupt, and is not allocated.
    if (coded_blocks > 4 * static_cast<int64_t>(in_.size())) {
      in_.fail("a JPEG frame of " + std::to_string(width) + " x " + std::to_string(height) + " pixels in a stream of " +
               std::to_string(in_.size()) + " bytes");
    }
    for (Component& c : components_) c.plane.resize(c.stride() * static_cast<size_t>(c.blocks_high) * 8);
  }

  static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

  // DHT (T.81 B.2.4.2): tables of 16 code counts, by length, and the values.
  void read_huffman_tables(std::span<const uint8_t> s) {
    size_t at = 0;
    while (at < s.size()) {
      if (s.size() - at < 17) in_.fail("a short JPEG Huffman table");
      const int kind = s[at] >> 4, index = s[at] & 15;
      if (kind > 1 || index > 3) in_.fail("JPEG Huffman table class " + std::to_string(kind) + " index " + hex(index));
      size_t total = 0;
      for (size_t i = 1; i <= 16; ++i) total += s[at + i];
      if (total > 256 || s.size() - at - 17 < total) in_.fail("a JPEG Huffman table with too few values");
      (kind == 0 ? dc_tables_ : ac_tables_)[static_cast<size_t>(index)] =
          huffman_table(s.subspan(at + 1, 16), s.subspan(at + 17, total));
      at += 17 + total;
    }
  }

  HuffmanTable huffman_table(std::span<const uint8_t> counts, std::span<const uint8_t> values) const {
    constexpr int kFast = HuffmanTable::kFastBits;
    HuffmanTable table;
    table.defined = true;
    std::copy(values.begin(), values.end(), table.values.begin());
    int32_t code = 0, index = 0;
    for (int length = 1; length <= 16; ++length) {
      const int n = counts[static_cast<size_t>(length - 1)];
      // No code may be all ones (T.81 C.2), so the codes of a length must stay below it.
      if (code + n >= (1 << length)) in_.fail("a JPEG Huffman table with more codes than their lengths allow");
      table.value_offset[static_cast<size_t>(length)] = index - code;
      table.last_code[static_cast<size_t>(length)] = n ? code + n - 1 : -1;
      for (int i = 0; i < n; ++i, ++code, ++index) {
        if (length > kFast) continue;
        const uint16_t entry = static_cast<uint16_t>(length << 8 | values[static_cast<size_t>(index)]);
        const size_t first = static_cast<size_t>(code) << (kFast - length);
        std::fill_n(table.fast.begin() + static_cast<std::ptrdiff_t>(first), size_t{1} << (kFast - length), entry);
      }
      code <<= 1;
    }
    return table;
  }

  int decode_symbol(EntropyReader& reader, const HuffmanTable& table) const {
    constexpr int kFast = HuffmanTable::kFastBits;
    const uint32_t next16 = reader.peek(16);
    if (const uint16_t entry = table.fast[next16 >> (16 - kFast)]) {
      reader.skip(entry >> 8);
      return entry & 0xFF;
    }
    for (int length = kFast + 1; length <= 16; ++length) {
      const auto code = static_cast<int32_t>(next16 >> (16 - length));
      if (code <= table.last_code[static_cast<size_t>(length)]) {
        reader.skip(length);
        return table.values[static_cast<size_t>(code + table.value_offset[static_cast<size_t>(length)])];
      }
    }
    in_.fail("a Huffman code that its JPEG table does not define");
  }

  // DQT (T.81 B.2.4.1): tables of 64 values of 8 or 16 bits, in zigzag order.
  void read_quant_tables(std::span<const uint8_t> s) {
    size_t at = 0;
    while (at < s.size()) {
      const int precision = s[at] >> 4, index = s[at] & 15;
      if (precision > 1 || index > 3) in_.fail("JPEG quantization table " + hex(s[at]));
      const size_t bytes = precision ? 2 : 1;
      if (s.size() - at - 1 < 64 * bytes) in_.fail("a short JPEG quantization table");
      std::array<uint16_t, 64>& table = quant_tables_[static_cast<size_t>(index)].emplace();
      for (size_t k = 0; k < 64; ++k) {
        const uint8_t* p = s.data() + at + 1 + k * bytes;
        table[kNaturalIndex[k]] = static_cast<uint16_t>(precision ? (p[0] << 8) | p[1] : p[0]);
      }
      at += 1 + 64 * bytes;
    }
  }

  void read_restart_interval(std::span<const uint8_t> s) {
    if (s.size() < 2) in_.fail("a short JPEG DRI segment");
    restart_interval_ = (s[0] << 8) | s[1];
  }
  // A JFIF APP0 segment says the components are YCbCr.
  void read_jfif(std::span<const uint8_t> s) {
    if (s.size() >= 14 && std::equal(s.begin(), s.begin() + 5, "JFIF")) saw_jfif_ = true;
  }
  // An Adobe APP14 segment's transform flag: 0 for RGB (or CMYK), 1 for YCbCr.
  void read_adobe(std::span<const uint8_t> s) {
    if (s.size() >= 12 && std::equal(s.begin(), s.begin() + 5, "Adobe")) adobe_transform_ = s[11];
  }

  // SOS (T.81 B.2.3) and the entropy-coded data after it: the MCUs of the scan's
  // components, each the components' blocks in turn. Returns where the data ends.
  size_t decode_scan(std::span<const uint8_t> s, size_t at) {
    if (components_.empty()) in_.fail("a JPEG scan before the frame header");
    const size_t count = s.empty() ? 0 : s[0];
    if (count < 1 || count > 4 || s.size() < 1 + 2 * count + 3) in_.fail("a malformed JPEG scan header");
    std::vector<Component*> scan;
    int blocks_per_mcu = 0;
    for (size_t i = 0; i < count; ++i) {
      const uint8_t id = s[1 + 2 * i], tables = s[2 + 2 * i];
      Component& c = component(id);
      if (std::find(scan.begin(), scan.end(), &c) != scan.end()) in_.fail("a JPEG scan lists a component twice");
      c.dc_table = tables >> 4, c.ac_table = tables & 15;
      if (c.dc_table > 3 || c.ac_table > 3 || !dc_tables_[static_cast<size_t>(c.dc_table)].defined ||
          !ac_tables_[static_cast<size_t>(c.ac_table)].defined) {
        in_.fail("a JPEG scan uses an undefined Huffman table (" + hex(tables) + ")");
      }
      if (!c.quant) {
        if (!quant_tables_[static_cast<size_t>(c.quant_index)]) {
          in_.fail("JPEG component " + std::to_string(c.id) + " uses an undefined quantization table");
        }
        c.quant = quant_tables_[static_cast<size_t>(c.quant_index)];
      }
      c.dc_prediction = 0;
      c.scanned = true;
      blocks_per_mcu += c.h * c.v;
      scan.push_back(&c);
    }
    if (count > 1 && blocks_per_mcu > 10) in_.fail("a JPEG scan of more than 10 blocks an MCU");
    // Spectral selection and successive approximation (s[1 + 2 count ...]) mean nothing to
    // a sequential scan; libjpeg ignores them too.

    // An interleaved scan's MCU holds h x v blocks of each component; a single
    // component's is one block, and then only the blocks holding samples are coded.
    const bool interleaved = count > 1;
    const int64_t mcus_wide = interleaved ? mcus_wide_ : ceil_div(scan[0]->width, 8);
    const int64_t mcus_high = interleaved ? mcus_high_ : ceil_div(scan[0]->height, 8);
    EntropyReader reader(in_, at);
    std::array<int32_t, 64> coefficients;
    int restarts = 0;
    for (int64_t mcu = 0; mcu < mcus_wide * mcus_high; ++mcu) {
      if (restart_interval_ && mcu > 0 && mcu % restart_interval_ == 0) {
        reader.restart(restarts++ % 8);
        for (Component* c : scan) c->dc_prediction = 0;
      }
      const int64_t mcu_x = mcu % mcus_wide, mcu_y = mcu / mcus_wide;
      for (Component* c : scan) {
        const int wide = interleaved ? c->h : 1, high = interleaved ? c->v : 1;
        for (int by = 0; by < high; ++by) {
          for (int bx = 0; bx < wide; ++bx) {
            decode_block(reader, *c, coefficients);
            const size_t row = static_cast<size_t>(mcu_y * high + by) * 8,
                         column = static_cast<size_t>(mcu_x * wide + bx) * 8;
            inverse_dct(coefficients, c->plane.data() + row * c->stride() + column, c->stride());
          }
        }
      }
    }
    return reader.end();
  }

  Component& component(int id) {
    for (Component& c : components_) {
      if (c.id == id) return c;
    }
    in_.fail("a JPEG scan names component " + std::to_string(id) + ", which the frame does not have");
  }

  // One block (T.81 F.2.2): the DC difference from the block before, then run/size pairs
  // of AC coefficients in zigzag order up to end-of-block; dequantized, row-major.
  void decode_block(EntropyReader& reader, Component& c, std::array<int32_t, 64>& coefficients) const {
    const HuffmanTable& dc = dc_tables_[static_cast<size_t>(c.dc_table)];
    const HuffmanTable& ac = ac_tables_[static_cast<size_t>(c.ac_table)];
    const std::array<uint16_t, 64>& quant = *c.quant;
    coefficients.fill(0);
    const int category = decode_symbol(reader, dc);
    if (category > 11) in_.fail("a JPEG DC difference of " + std::to_string(category) + " bits (at most 11)");
    // Wraps as libjpeg's 16-bit coefficients do; only corrupt data reaches the limits.
    const int32_t difference = category ? extend(reader.bits(category), category) : 0;
    c.dc_prediction = static_cast<int16_t>(c.dc_prediction + difference);
    coefficients[0] = c.dc_prediction * quant[0];
    for (int k = 1; k < 64;) {
      const int symbol = decode_symbol(reader, ac), run = symbol >> 4, size = symbol & 15;
      if (size == 0) {
        if (run != 15) break;  // end of block; 15 is a run of 16 zeros
        k += 16;
        continue;
      }
      if (size > 10) in_.fail("a JPEG AC coefficient of " + std::to_string(size) + " bits (at most 10)");
      k += run;
      if (k > 63) in_.fail("JPEG AC coefficients run past the end of their block");
      const size_t natural = kNaturalIndex[static_cast<size_t>(k++)];
      coefficients[natural] = extend(reader.bits(size), size) * quant[natural];
    }
  }

  // The signed value of a `size`-bit magnitude category (T.81 F.2.2.1): codes below half
  // the range are the negative values.
  static int32_t extend(uint32_t bits, int size) {
    const auto value = static_cast<int32_t>(bits);
    return value < (1 << (size - 1)) ? value - (1 << size) + 1 : value;
  }

  // The components at the image's size, converted to gray or RGB.
  Image to_image() const {
    Image image = in_.blank(width_, height_, components_.size() == 1 ? 1 : 3);
    const size_t n = static_cast<size_t>(width_ * height_);
    if (components_.size() == 1) {
      image.pixels = full_resolution(components_[0]);
      return image;
    }
    const std::vector<uint8_t> a = full_resolution(components_[0]), b = full_resolution(components_[1]),
                               c = full_resolution(components_[2]);
    if (is_rgb()) {
      for (size_t i = 0; i < n; ++i)
        image.pixels[3 * i] = a[i], image.pixels[3 * i + 1] = b[i], image.pixels[3 * i + 2] = c[i];
      return image;
    }
    static const YCbCrToRgb to_rgb;
    for (size_t i = 0; i < n; ++i) to_rgb(a[i], b[i], c[i], image.pixels.data() + 3 * i);
    return image;
  }

  // How libjpeg tells RGB from YCbCr: a JFIF marker means YCbCr; else an Adobe marker's
  // transform flag; else the component ids 'R', 'G', 'B' mean RGB.
  bool is_rgb() const {
    if (saw_jfif_) return false;
    if (adobe_transform_) return *adobe_transform_ == 0;
    return components_[0].id == 'R' && components_[1].id == 'G' && components_[2].id == 'B';
  }

  // A component's samples at the image's size. Subsampled components are upsampled as
  // libjpeg-turbo does by default ("fancy" upsampling): each output sample is 3/4 the
  // nearest input sample and 1/4 the next nearest, in each direction that is subsampled
  // (9/16, 3/16, 3/16, 1/16 in both), with edge samples repeated and rounding biases
  // alternating between neighbours so that they do not drift one way. A component 1 or 2
  // samples wide and subsampled across just repeats its samples.
  std::vector<uint8_t> full_resolution(const Component& c) const {
    const int across = max_h_ / c.h, down = max_v_ / c.v;  // 1 or 2: factors are 1 or 2
    std::vector<uint8_t> out(static_cast<size_t>(width_ * height_));
    const auto row_of = [&](int64_t y) {
      return c.plane.data() + static_cast<size_t>(std::clamp<int64_t>(y, 0, c.height - 1)) * c.stride();
    };
    const auto column = [&](int64_t x) { return static_cast<size_t>(std::clamp<int64_t>(x, 0, c.width - 1)); };
    const bool repeat = across == 2 && c.width <= 2;
    std::vector<int> sums(static_cast<size_t>(c.width));
    for (int64_t y = 0; y < height_; ++y) {
      uint8_t* o = out.data() + static_cast<size_t>(y * width_);
      const int64_t near_y = y / down, far_y = y % 2 ? near_y + 1 : near_y - 1;
      const uint8_t* near = row_of(near_y);
      const uint8_t* far = row_of(down == 2 && !repeat ? far_y : near_y);
      if (across == 1 || repeat) {
        // down == 2: (3 near + far + 1 or 2) / 4; otherwise far == near and this is near.
        const int bias = y % 2 ? 2 : 1;
        for (int64_t x = 0; x < width_; ++x) {
          const size_t i = static_cast<size_t>(x / across);
          o[x] = static_cast<uint8_t>(down == 2 && !repeat ? (3 * near[i] + far[i] + bias) >> 2 : near[i]);
        }
        continue;
      }
      if (down == 1) {  // across == 2
        for (int64_t x = 0; x < width_; ++x) {
          const int64_t i = x / 2;
          const int neighbour = near[column(x % 2 ? i + 1 : i - 1)];
          o[x] = static_cast<uint8_t>((3 * near[i] + neighbour + (x % 2 ? 2 : 1)) >> 2);
        }
        continue;
      }
      // Both: column sums 3 near + far (x 4), then across (x 16 in all).
      for (size_t i = 0; i < sums.size(); ++i) sums[i] = 3 * near[i] + far[i];
      for (int64_t x = 0; x < width_; ++x) {
        const int64_t i = x / 2;
        const int neighbour = sums[column(x % 2 ? i + 1 : i - 1)];
        o[x] = static_cast<uint8_t>((3 * sums[static_cast<size_t>(i)] + neighbour + (x % 2 ? 7 : 8)) >> 4);
      }
    }
    return out;
  }

  const EncodedStream& in_;
  std::vector<Component> components_;
  int64_t width_ = 0, height_ = 0, mcus_wide_ = 0, mcus_high_ = 0;
  int max_h_ = 1, max_v_ = 1;
  std::array<HuffmanTable, 4> dc_tables_{}, ac_tables_{};
  std::array<std::optional<std::array<uint16_t, 64>>, 4> quant_tables_{};
  int64_t restart_interval_ = 0;
  bool saw_jfif_ = false;
  std::optional<int> adobe_transform_;
};

}  // namespace

Image decode_jpeg(const EncodedStream& stream) {
  return JpegDecoder(stream).decode();
}

}  // namespace onnxtrain::image
