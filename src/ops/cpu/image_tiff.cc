// Baseline TIFF for ImageDecoder (TIFF 6.0; the first image of the file): little- or
// big-endian; 8-bit samples, chunky; RGB, gray (BlackIsZero or WhiteIsZero) or palette,
// extra samples (alpha) dropped; strips, uncompressed, PackBits, LZW or Deflate, with or
// without the horizontal predictor. Tiles, planar configuration 2, other bit depths,
// JPEG, CCITT and other compressions, YCbCr, CMYK and floating-point samples are refused
// with an error that names them.
#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/inflate.h"
#include "ops/cpu/image.h"

namespace onnxtrain::image {
namespace {

// The tags read (TIFF 6.0 section 8 and the sections of each extension).
enum Tag : uint16_t {
  kImageWidth = 256,
  kImageLength = 257,
  kBitsPerSample = 258,
  kCompression = 259,
  kPhotometric = 262,
  kFillOrder = 266,
  kStripOffsets = 273,
  kSamplesPerPixel = 277,
  kRowsPerStrip = 278,
  kStripByteCounts = 279,
  kPlanarConfiguration = 284,
  kPredictor = 317,
  kColorMap = 320,
  kTileWidth = 322,
  kTileOffsets = 324,
  kSampleFormat = 339,
};

enum Compression : uint32_t {
  kUncompressed = 1,
  kLzw = 5,
  kOldJpeg = 6,
  kJpeg = 7,
  kDeflate = 8,
  kPackBits = 32773,
  kAdobeDeflate = 32946,
};

enum Photometric : uint32_t { kWhiteIsZero = 0, kBlackIsZero = 1, kRgb = 2, kPalette = 3 };

// No codec here expands a byte into more than this many (LZW's longest string is 4096
// bytes, for 12 bits): a strip that declares more pixels than its bytes could hold is
// refused before anything is allocated.
constexpr size_t kMaxExpansion = 4096;

class TiffDecoder {
 public:
  explicit TiffDecoder(const EncodedStream& in) : in_(in), big_endian_(in.starts_with("MM")) {}

  Image decode() {
    read_directory(u32(4));
    const int64_t width = value(kImageWidth), height = value(kImageLength);
    in_.check_size(width, height);
    refuse_unsupported();
    const uint32_t photometric = value(kPhotometric);
    const int base = photometric == kRgb ? 3 : 1;
    const int64_t samples = value(kSamplesPerPixel, 1);
    if (samples < base || samples > 16) {
      in_.fail("a TIFF of photometric interpretation " + std::to_string(photometric) + " with " +
               std::to_string(samples) + " samples per pixel");
    }
    if (photometric == kPalette) read_palette();
    Layout layout{width, height, samples, 0, value(kRowsPerStrip, 0xFFFFFFFF)};
    layout.row_bytes = static_cast<size_t>(width * samples);
    if (layout.rows_per_strip == 0) in_.fail("a TIFF of 0 rows per strip");
    layout.rows_per_strip = std::min(layout.rows_per_strip, height);
    const std::vector<std::span<const uint8_t>> strips = read_strips(layout);

    Image image = in_.blank(width, height, photometric == kRgb || photometric == kPalette ? 3 : 1);
    for (size_t i = 0; i < strips.size(); ++i) {
      const int64_t first_row = static_cast<int64_t>(i) * layout.rows_per_strip;
      const int64_t rows = std::min(layout.rows_per_strip, height - first_row);
      std::vector<uint8_t> raw = decompress(strips[i], static_cast<size_t>(rows) * layout.row_bytes, i);
      if (predicted()) undo_horizontal_predictor(raw, layout);
      const size_t pixels = static_cast<size_t>(rows * width);
      uint8_t* out = image.pixels.data() + static_cast<size_t>(first_row * width * image.channels);
      store_pixels(raw, pixels, static_cast<size_t>(samples), photometric, out);
    }
    return image;
  }

 private:
  // Where a field's values lie: inline in the entry when they fit in 4 bytes.
  struct Field {
    uint16_t type = 0;
    uint32_t count = 0;
    size_t at = 0;
  };
  struct Layout {
    int64_t width, height, samples;
    size_t row_bytes;
    int64_t rows_per_strip;
  };

  uint16_t u16(size_t at) const { return big_endian_ ? in_.be16(at, "a TIFF field") : in_.le16(at, "a TIFF field"); }
  uint32_t u32(size_t at) const { return big_endian_ ? in_.be32(at, "a TIFF field") : in_.le32(at, "a TIFF field"); }

  // The first image file directory: a count, then entries of 12 bytes (tag, type, count,
  // value or offset of the values).
  void read_directory(size_t at) {
    const size_t count = u16(at);
    in_.need(at + 2 + 12 * count, "the TIFF image file directory");
    for (size_t i = 0; i < count; ++i) {
      const size_t entry = at + 2 + 12 * i;
      Field field{u16(entry + 2), u32(entry + 4), entry + 8};
      if (field.count * type_size(field.type) > 4) field.at = u32(entry + 8);
      fields_[u16(entry)] = field;
    }
  }

  static uint64_t type_size(uint16_t type) {
    switch (type) {
      case 3:  // SHORT
      case 8:  // SSHORT
        return 2;
      case 4:   // LONG
      case 9:   // SLONG
      case 11:  // FLOAT
        return 4;
      case 5:   // RATIONAL
      case 10:  // SRATIONAL
      case 12:  // DOUBLE
        return 8;
      default:  // BYTE, ASCII, SBYTE, UNDEFINED and types unknown
        return 1;
    }
  }

  bool has(Tag tag) const { return fields_.count(tag) != 0; }

  // The values of an integer field (BYTE, SHORT or LONG).
  std::vector<uint32_t> values(Tag tag) const {
    const auto it = fields_.find(tag);
    if (it == fields_.end()) in_.fail("a TIFF without field " + std::to_string(tag));
    const Field& f = it->second;
    if (f.type != 1 && f.type != 3 && f.type != 4) {
      in_.fail("TIFF field " + std::to_string(tag) + " of type " + std::to_string(f.type) + ", expected an integer");
    }
    const size_t size = static_cast<size_t>(type_size(f.type));
    const std::span<const uint8_t> bytes = in_.slice(f.at, size * f.count, "TIFF field " + std::to_string(tag));
    std::vector<uint32_t> result(f.count);
    for (size_t i = 0; i < f.count; ++i) {
      const size_t at = f.at + i * size;
      result[i] = size == 1 ? bytes[i * size] : size == 2 ? u16(at) : u32(at);
    }
    return result;
  }
  uint32_t value(Tag tag) const {
    const std::vector<uint32_t> v = values(tag);
    if (v.empty()) in_.fail("TIFF field " + std::to_string(tag) + " has no value");
    return v[0];
  }
  uint32_t value(Tag tag, uint32_t fallback) const { return has(tag) ? value(tag) : fallback; }

  void refuse_unsupported() const {
    if (has(kTileWidth) || has(kTileOffsets)) in_.refuse("tiled TIFF");
    for (const uint32_t bits : has(kBitsPerSample) ? values(kBitsPerSample) : std::vector<uint32_t>{1}) {
      if (bits != 8) in_.refuse(std::to_string(bits) + "-bit TIFF samples", "8-bit samples");
    }
    if (has(kSampleFormat)) {
      for (const uint32_t format : values(kSampleFormat)) {
        if (format != 1) in_.refuse("TIFF sample format " + std::to_string(format), "unsigned integers");
      }
    }
    if (value(kPlanarConfiguration, 1) != 1 && value(kSamplesPerPixel, 1) > 1) {
      in_.refuse("TIFF planar configuration " + std::to_string(value(kPlanarConfiguration)), "chunky (1)");
    }
    if (value(kFillOrder, 1) != 1) in_.refuse("TIFF fill order 2 (least significant bit first)");
    const uint32_t predictor = value(kPredictor, 1);
    if (uses_predictor() && predictor != 1 && predictor != 2) {
      in_.refuse("TIFF predictor " + std::to_string(predictor), "none (1) and horizontal (2)");
    }
    const uint32_t photometric = value(kPhotometric);
    if (photometric > kPalette) {
      const std::string name = photometric == 5 ? " (CMYK)" : photometric == 6 ? " (YCbCr)" : "";
      in_.refuse("TIFF photometric interpretation " + std::to_string(photometric) + name, "gray, RGB and palette");
    }
    const uint32_t compression = value(kCompression, kUncompressed);
    if (compression == kOldJpeg || compression == kJpeg) in_.refuse("JPEG-compressed TIFF");
    if (compression != kUncompressed && compression != kLzw && compression != kDeflate &&
        compression != kAdobeDeflate && compression != kPackBits) {
      in_.refuse("TIFF compression " + std::to_string(compression), "uncompressed, PackBits, LZW and Deflate");
    }
  }

  // libtiff applies the Predictor field to LZW and Deflate data only (Pillow, too, ignores
  // it elsewhere).
  bool uses_predictor() const {
    const uint32_t compression = value(kCompression, kUncompressed);
    return compression == kLzw || compression == kDeflate || compression == kAdobeDeflate;
  }
  bool predicted() const { return uses_predictor() && value(kPredictor, 1) == 2; }

  // ColorMap: 3 x 256 16-bit values, all reds, then greens, then blues; Pillow keeps their
  // high bytes.
  void read_palette() {
    const std::vector<uint32_t> map = values(kColorMap);
    if (map.size() != 3 * 256) in_.fail("a TIFF color map of " + std::to_string(map.size()) + " values, expected 768");
    palette_.resize(3 * 256);
    for (size_t i = 0; i < 256; ++i) {
      for (size_t c = 0; c < 3; ++c) palette_[3 * i + c] = static_cast<uint8_t>(map[c * 256 + i] >> 8);
    }
  }

  // Each strip's bytes, checked to lie in the stream and to be able to hold its rows.
  std::vector<std::span<const uint8_t>> read_strips(const Layout& layout) const {
    const size_t count = static_cast<size_t>((layout.height + layout.rows_per_strip - 1) / layout.rows_per_strip);
    const std::vector<uint32_t> offsets = values(kStripOffsets), sizes = values(kStripByteCounts);
    if (offsets.size() < count || sizes.size() < count) {
      in_.fail("a TIFF of " + std::to_string(count) + " strips with " + std::to_string(offsets.size()) +
               " offsets and " + std::to_string(sizes.size()) + " byte counts");
    }
    const bool compressed = value(kCompression, kUncompressed) != kUncompressed;
    std::vector<std::span<const uint8_t>> strips;
    for (size_t i = 0; i < count; ++i) {
      const std::string what = "TIFF strip " + std::to_string(i);
      if (offsets[i] > in_.size() || sizes[i] > in_.size() - offsets[i]) {
        in_.fail(what + " (bytes " + std::to_string(offsets[i]) + " to " +
                 std::to_string(uint64_t{offsets[i]} + sizes[i]) + ") lies past the end of the stream (" +
                 std::to_string(in_.size()) + " bytes)");
      }
      const int64_t rows =
          std::min(layout.rows_per_strip, layout.height - static_cast<int64_t>(i) * layout.rows_per_strip);
      const size_t needed = static_cast<size_t>(rows) * layout.row_bytes;
      if (needed > size_t{sizes[i]} * (compressed ? kMaxExpansion : 1)) {
        in_.fail(what + " of " + std::to_string(sizes[i]) + " bytes cannot hold its " + std::to_string(needed));
      }
      strips.push_back(in_.bytes().subspan(offsets[i], sizes[i]));
    }
    return strips;
  }

  std::vector<uint8_t> decompress(std::span<const uint8_t> strip, size_t expected, size_t index) const {
    const std::string what = "TIFF strip " + std::to_string(index);
    std::vector<uint8_t> raw;
    switch (value(kCompression, kUncompressed)) {
      case kUncompressed:
        raw.assign(strip.begin(), strip.begin() + static_cast<std::ptrdiff_t>(expected));
        break;
      case kPackBits:
        raw = unpack_bits(strip, expected, what);
        break;
      case kLzw:
        raw = lzw_decode(strip, expected, what);
        break;
      default:  // Deflate: a zlib stream
        raw = zlib_inflate(strip, expected, "encoded_stream: " + what);
        break;
    }
    if (raw.size() != expected) {
      in_.fail(what + " decodes to " + std::to_string(raw.size()) + " bytes, expected " + std::to_string(expected));
    }
    return raw;
  }

  // PackBits (TIFF 6.0 section 9): a count byte n, then n + 1 literal bytes (n >= 0) or
  // one byte repeated 1 - n times (n < 0; -128 is a no-op). A run past the strip's end is
  // cut there.
  std::vector<uint8_t> unpack_bits(std::span<const uint8_t> in, size_t expected, const std::string& what) const {
    std::vector<uint8_t> out;
    out.reserve(expected);
    size_t at = 0;
    while (out.size() < expected && at < in.size()) {
      const auto n = static_cast<int8_t>(in[at++]);
      if (n == -128) continue;
      const size_t length = n >= 0 ? static_cast<size_t>(n) + 1 : static_cast<size_t>(1 - n);
      const size_t source = n >= 0 ? length : 1;
      if (in.size() - at < source) in_.fail(what + ": PackBits data is cut off");
      const size_t kept = std::min(length, expected - out.size());
      if (n >= 0) {
        out.insert(out.end(), in.begin() + static_cast<std::ptrdiff_t>(at),
                   in.begin() + static_cast<std::ptrdiff_t>(at + kept));
      } else {
        out.insert(out.end(), kept, in[at]);
      }
      at += source;
    }
    return out;
  }

  // LZW (TIFF 6.0 section 13): codes of 9 to 12 bits, most significant bit first; 256
  // clears the table, 257 ends the data; the code width grows one code before the table
  // needs it. Each table entry is a string: an earlier entry's string plus one byte.
  std::vector<uint8_t> lzw_decode(std::span<const uint8_t> in, size_t expected, const std::string& what) const {
    constexpr int kClear = 256, kEnd = 257, kFirstFree = 258, kTableSize = 4096;
    struct Entry {
      uint16_t prefix = 0, length = 1;
      uint8_t first = 0, last = 0;
    };
    std::vector<Entry> table(kTableSize);
    for (int i = 0; i < 256; ++i)
      table[static_cast<size_t>(i)] = {0, 1, static_cast<uint8_t>(i), static_cast<uint8_t>(i)};
    std::vector<uint8_t> out;
    out.reserve(expected + kTableSize);
    size_t bit = 0;
    int width = 9, next = kFirstFree, previous = -1;
    while (out.size() < expected && bit + static_cast<size_t>(width) <= 8 * in.size()) {
      const int code = read_code(in, bit, width);
      bit += static_cast<size_t>(width);
      if (code == kEnd) break;
      if (code == kClear) {
        width = 9, next = kFirstFree, previous = -1;
        continue;
      }
      if (previous < 0) {
        if (code > 255) in_.fail(what + ": LZW data starts with code " + std::to_string(code) + " after a clear");
      } else {
        if (code > next)
          in_.fail(what + ": LZW code " + std::to_string(code) + " is beyond the table (" + std::to_string(next) + ")");
        if (next >= kTableSize) in_.fail(what + ": LZW table overflow (4096 codes without a clear code)");
        const Entry& before = table[static_cast<size_t>(previous)];
        // The new string: the previous one plus the first byte of this code's, which is
        // the previous string's own first byte when this code is the one being defined.
        const uint8_t appended = code < next ? table[static_cast<size_t>(code)].first : before.first;
        table[static_cast<size_t>(next)] = {static_cast<uint16_t>(previous), static_cast<uint16_t>(before.length + 1),
                                            before.first, appended};
        ++next;
        if (next + 1 >= (1 << width) && width < 12) ++width;
      }
      append_string(table, code, out);
      previous = code;
    }
    if (out.size() > expected) out.resize(expected);
    return out;
  }

  static int read_code(std::span<const uint8_t> in, size_t bit, int width) {
    const size_t byte = bit / 8;
    uint32_t window = 0;
    for (size_t i = 0; i < 3; ++i) window = (window << 8) | (byte + i < in.size() ? in[byte + i] : 0);
    return static_cast<int>((window >> (24 - width - static_cast<int>(bit % 8))) & ((1u << width) - 1));
  }

  template <typename Table>
  static void append_string(const Table& table, int code, std::vector<uint8_t>& out) {
    const size_t length = table[static_cast<size_t>(code)].length, end = out.size() + length;
    out.resize(end);
    for (size_t i = 1; i <= length; ++i) {
      out[end - i] = table[static_cast<size_t>(code)].last;
      code = table[static_cast<size_t>(code)].prefix;
    }
  }

  // Predictor 2 (TIFF 6.0 section 14): each sample was stored as its difference from the
  // same sample of the pixel to its left, row by row.
  static void undo_horizontal_predictor(std::vector<uint8_t>& raw, const Layout& layout) {
    const size_t step = static_cast<size_t>(layout.samples);
    for (size_t row = 0; row < raw.size(); row += layout.row_bytes) {
      for (size_t i = row + step; i < row + layout.row_bytes; ++i)
        raw[i] = static_cast<uint8_t>(raw[i] + raw[i - step]);
    }
  }

  void store_pixels(const std::vector<uint8_t>& raw, size_t pixels, size_t samples, uint32_t photometric,
                    uint8_t* out) const {
    for (size_t i = 0; i < pixels; ++i) {
      const uint8_t* p = raw.data() + i * samples;
      if (photometric == kRgb) {
        std::copy_n(p, 3, out + 3 * i);
      } else if (photometric == kPalette) {
        std::copy_n(palette_.data() + 3 * p[0], 3, out + 3 * i);
      } else {
        out[i] = photometric == kWhiteIsZero ? static_cast<uint8_t>(255 - p[0]) : p[0];
      }
    }
  }

  const EncodedStream& in_;
  const bool big_endian_;
  std::map<uint16_t, Field> fields_;
  std::vector<uint8_t> palette_;
};

}  // namespace

Image decode_tiff(const EncodedStream& stream) {
  return TiffDecoder(stream).decode();
}

}  // namespace onnxtrain::image
