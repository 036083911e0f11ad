// ImageDecoder (encoded_stream uint8 [bytes]) => uint8 [H, W, 3] (pixel_format RGB or BGR) or
// [H, W, 1] (Grayscale). Decodes BMP (uncompressed 1/4/8/24/32 bits, bitfields at 32),
// PNG (every color type and bit depth, Adam7 interlacing; zlib through core/inflate.h),
// PNM (P1-P6), baseline JPEG (image_jpeg.cc) and baseline TIFF (image_tiff.cc). JPEG 2000,
// WebP and GIF are recognized and refused with an error that says so. Grayscale from color
// uses ITU-R 601-2 luma in 16-bit fixed point, (19595 R + 38470 G + 7471 B + 2^15) >> 16,
// as Pillow (the ONNX reference) does.
#include "ops/cpu/image.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "core/inflate.h"
#include "ops/kernel_registry.h"

namespace onnxtrain {
namespace {

using image::Image;

class Decoder : public image::EncodedStream {
 public:
  using EncodedStream::EncodedStream;

  Image decode() const {
    if (starts_with("BM")) return bmp();
    if (starts_with("\x89PNG\r\n\x1a\n")) return png();
    if (data_.size() >= 2 && data_[0] == 'P' && data_[1] >= '1' && data_[1] <= '6') return pnm();
    if (starts_with("\xff\xd8\xff")) return image::decode_jpeg(*this);
    if (starts_with("II*\0", 4) || starts_with("MM\0*", 4)) return image::decode_tiff(*this);
    const char* format = starts_with("\xff\x4f\xff\x51") || starts_with("\0\0\0\x0cjP  ", 8) ? "JPEG 2000"
                         : starts_with("RIFF") && data_.size() >= 12 && std::memcmp(data_.data() + 8, "WEBP", 4) == 0
                             ? "WebP"
                         : starts_with("GIF8") ? "GIF"
                                               : nullptr;
    if (format) {
      // The executor names the node in front of the message.
      throw Error(std::string(format) + " images are not supported (onnxtrain decodes BMP, PNG, PNM, JPEG and TIFF)",
                  ErrorKind::kNotImplemented);
    }
    fail("not an image format onnxtrain knows (BMP, PNG, PNM, JPEG, TIFF)");
  }

 private:
  static uint32_t big_endian32(const uint8_t* p) {
    return (static_cast<uint32_t>(p[0]) << 24) | (p[1] << 16) | (p[2] << 8) | p[3];
  }

  // ---- BMP: BITMAPFILEHEADER, then a DIB header of 12 (core) or 40+ bytes.
  Image bmp() const {
    const uint32_t offset = le32(10), header = le32(14);
    int64_t width = 0, height = 0;
    unsigned bpp = 0, compression = 0, colors = 0;
    if (header == 12) {
      width = le16(18);
      height = static_cast<int16_t>(le16(20));
      bpp = le16(24);
    } else if (header >= 40) {
      width = static_cast<int32_t>(le32(18));
      height = static_cast<int32_t>(le32(22));
      bpp = le16(28);
      compression = le32(30);
      colors = le32(46);
    } else {
      fail("a BMP header of " + std::to_string(header) + " bytes");
    }
    const bool top_down = height < 0;
    height = top_down ? -height : height;
    const bool bitfields = compression == 3 && bpp == 32;
    if (!(compression == 0 || bitfields) || !(bpp == 1 || bpp == 4 || bpp == 8 || bpp == 24 || bpp == 32)) {
      fail("BMP of " + std::to_string(bpp) + " bits per pixel with compression " + std::to_string(compression) +
           " (supported: uncompressed 1, 4, 8, 24, 32 bits; bitfields at 32)");
    }
    check_size(width, height);
    const size_t stride = (static_cast<size_t>(width) * bpp + 31) / 32 * 4;
    need(offset + stride * static_cast<size_t>(height), "the BMP pixel array");
    Image image = blank(width, height, 3);
    std::vector<std::array<uint8_t, 3>> palette;
    if (bpp <= 8) {
      const size_t entry = header == 12 ? 3 : 4, at = 14 + header;
      const size_t count = colors ? colors : (size_t{1} << bpp);
      need(at + count * entry, "the BMP palette");
      for (size_t i = 0; i < count; ++i) {
        const uint8_t* p = data_.data() + at + i * entry;
        palette.push_back({p[2], p[1], p[0]});
      }
    }
    std::array<uint32_t, 3> masks = {0xff0000, 0xff00, 0xff};  // R, G, B
    if (bitfields) masks = {le32(54), le32(58), le32(62)};
    for (int64_t y = 0; y < height; ++y) {
      const uint8_t* row = data_.data() + offset + stride * static_cast<size_t>(top_down ? y : height - 1 - y);
      uint8_t* out = image.pixels.data() + y * width * 3;
      for (int64_t x = 0; x < width; ++x, out += 3) {
        if (bpp <= 8) {
          const size_t bit = static_cast<size_t>(x) * bpp;
          const unsigned index = (row[bit / 8] >> (8 - bpp - bit % 8)) & ((1u << bpp) - 1);
          if (index >= palette.size()) fail("a BMP pixel indexes past the palette");
          std::memcpy(out, palette[index].data(), 3);
        } else if (bpp == 24) {
          out[0] = row[3 * x + 2], out[1] = row[3 * x + 1], out[2] = row[3 * x];
        } else {
          const uint32_t v = row[4 * x] | (row[4 * x + 1] << 8) | (row[4 * x + 2] << 16) |
                             (static_cast<uint32_t>(row[4 * x + 3]) << 24);
          for (int c = 0; c < 3; ++c) out[c] = masked(v, masks[static_cast<size_t>(c)]);
        }
      }
    }
    return image;
  }

  // A bitfield channel scaled to 8 bits.
  static uint8_t masked(uint32_t value, uint32_t mask) {
    if (mask == 0) return 0;
    const int shift = __builtin_ctz(mask);
    const uint32_t max = mask >> shift, v = (value & mask) >> shift;
    return static_cast<uint8_t>((v * 255 + max / 2) / max);
  }

  // ---- PNG: chunks; IHDR, PLTE, IDAT (a zlib stream of filtered rows), IEND.
  Image png() const {
    size_t at = 8;
    uint32_t width = 0, height = 0;
    int depth = 0, color = -1, interlace = 0;
    std::vector<uint8_t> palette, idat;
    for (;;) {
      need(at + 8, "a PNG chunk header");
      const uint32_t len = big_endian32(data_.data() + at);
      const std::string type(reinterpret_cast<const char*>(data_.data() + at + 4), 4);
      need(at + 12 + static_cast<size_t>(len), "the PNG chunk " + type);
      const uint8_t* body = data_.data() + at + 8;
      if (type == "IHDR") {
        if (len < 13) fail("a short IHDR chunk");
        width = big_endian32(body), height = big_endian32(body + 4), depth = body[8], color = body[9],
        interlace = body[12];
        if (body[10] != 0 || body[11] != 0) fail("a PNG compression or filter method other than 0");
      } else if (type == "PLTE") {
        palette.assign(body, body + len);
      } else if (type == "IDAT") {
        idat.insert(idat.end(), body, body + len);
      } else if (type == "IEND") {
        break;
      }
      at += 12 + static_cast<size_t>(len);
    }
    static constexpr int kSamples[] = {1, 0, 3, 1, 2, 0, 4};
    const bool depth_ok = color == 0   ? (depth == 1 || depth == 2 || depth == 4 || depth == 8 || depth == 16)
                          : color == 3 ? (depth == 1 || depth == 2 || depth == 4 || depth == 8)
                                       : (color == 2 || color == 4 || color == 6) && (depth == 8 || depth == 16);
    if (!depth_ok) fail("PNG color type " + std::to_string(color) + " at bit depth " + std::to_string(depth));
    if (interlace > 1) fail("PNG interlace method " + std::to_string(interlace) + " (expected 0 or 1, Adam7)");
    const int samples = kSamples[color];
    const bool gray = color == 0 || color == 4;
    check_size(width, height);
    const size_t bits_per_pixel = static_cast<size_t>(samples * depth);
    const size_t step = std::max<size_t>(1, bits_per_pixel / 8);
    // The passes of the image (Adam7's seven, or one): (x0, y0, dx, dy) and their sizes.
    struct Pass {
      size_t x0, y0, dx, dy, width, height;
    };
    static constexpr size_t kAdam7[7][4] = {{0, 0, 8, 8}, {4, 0, 8, 8}, {0, 4, 4, 8}, {2, 0, 4, 4},
                                            {0, 2, 2, 4}, {1, 0, 2, 2}, {0, 1, 1, 2}};
    std::vector<Pass> passes;
    for (int i = 0; i < (interlace ? 7 : 1); ++i) {
      const size_t* a = kAdam7[i];
      Pass pass = interlace ? Pass{a[0], a[1], a[2], a[3], 0, 0} : Pass{0, 0, 1, 1, 0, 0};
      pass.width = width > pass.x0 ? (width - pass.x0 + pass.dx - 1) / pass.dx : 0;
      pass.height = height > pass.y0 ? (height - pass.y0 + pass.dy - 1) / pass.dy : 0;
      if (pass.width && pass.height) passes.push_back(pass);
    }
    const auto row_bytes = [&](size_t pixels) { return (pixels * bits_per_pixel + 7) / 8; };
    size_t expected = 0;
    for (const Pass& pass : passes) expected += pass.height * (row_bytes(pass.width) + 1);
    const std::vector<uint8_t> raw = zlib_inflate(idat, expected, "encoded_stream: the PNG's IDAT data");
    if (raw.size() != expected) {
      fail("PNG data of " + std::to_string(raw.size()) + " bytes, expected " + std::to_string(expected));
    }
    Image image = blank(width, height, gray ? 1 : 3);
    const int max_value = (1 << std::min(depth, 8)) - 1;
    const uint8_t* in = raw.data();
    for (const Pass& pass : passes) {
      const size_t n = row_bytes(pass.width);
      std::vector<uint8_t> previous(n, 0), row(n);
      for (size_t y = 0; y < pass.height; ++y, in += n + 1) {
        unfilter(in[0], in + 1, previous.data(), row.data(), n, step);
        uint8_t* out = image.pixels.data() + (pass.y0 + y * pass.dy) * width * image.channels;
        for (size_t x = 0; x < pass.width; ++x) {
          // The high byte of 16-bit samples; sub-byte gray scaled to 0..255.
          const auto sample = [&](int s) -> unsigned {
            if (depth >= 8) return row[(x * samples + s) * (depth / 8)];
            const size_t bit = x * depth;
            return (row[bit / 8] >> (8 - depth - bit % 8)) & max_value;
          };
          const size_t at = pass.x0 + x * pass.dx;
          if (color == 3) {
            const unsigned index = sample(0);
            if (3 * index + 2 >= palette.size()) fail("a PNG pixel indexes past the palette");
            std::memcpy(out + 3 * at, palette.data() + 3 * index, 3);
          } else if (gray) {
            out[at] = static_cast<uint8_t>(sample(0) * 255 / max_value);
          } else {
            for (int c = 0; c < 3; ++c) out[3 * at + c] = static_cast<uint8_t>(sample(c));
          }
        }
        std::swap(previous, row);
      }
    }
    return image;
  }

  void unfilter(int filter, const uint8_t* in, const uint8_t* up, uint8_t* out, size_t n, size_t step) const {
    for (size_t i = 0; i < n; ++i) {
      const int a = i >= step ? out[i - step] : 0, b = up[i], c = i >= step ? up[i - step] : 0;
      int predictor = 0;
      switch (filter) {
        case 0:
          predictor = 0;
          break;
        case 1:
          predictor = a;
          break;
        case 2:
          predictor = b;
          break;
        case 3:
          predictor = (a + b) / 2;
          break;
        case 4: {
          const int p = a + b - c, pa = std::abs(p - a), pb = std::abs(p - b), pc = std::abs(p - c);
          predictor = pa <= pb && pa <= pc ? a : pb <= pc ? b : c;
          break;
        }
        default:
          fail("PNG row filter " + std::to_string(filter) + " (expected 0..4)");
      }
      out[i] = static_cast<uint8_t>(in[i] + predictor);
    }
  }

  // ---- PNM: P1/P4 bitmaps, P2/P5 graymaps, P3/P6 pixmaps (ASCII / binary).
  Image pnm() const {
    const int kind = data_[1] - '0';
    size_t at = 2;
    const auto number = [&]() -> int64_t {
      for (;;) {
        while (at < data_.size() && std::isspace(data_[at])) ++at;
        if (at < data_.size() && data_[at] == '#') {
          while (at < data_.size() && data_[at] != '\n') ++at;
          continue;
        }
        break;
      }
      if (at >= data_.size() || !std::isdigit(data_[at])) fail("a PNM header without the expected number");
      int64_t v = 0;
      while (at < data_.size() && std::isdigit(data_[at]) && v < (int64_t{1} << 40)) v = v * 10 + (data_[at++] - '0');
      return v;
    };
    const int64_t width = number(), height = number();
    const bool bitmap = kind == 1 || kind == 4;
    const int64_t max_value = bitmap ? 1 : number();
    if (max_value < 1 || max_value > 65535) fail("a PNM maximum value of " + std::to_string(max_value));
    const int channels = kind == 3 || kind == 6 ? 3 : 1;
    check_size(width, height);
    const size_t count = static_cast<size_t>(width * height * channels);
    // Every sample takes a byte at least (ASCII, binary), or a bit (P4).
    if ((kind == 4 ? count / 8 : count) > data_.size()) fail("the PNM raster is cut off");
    Image image = blank(width, height, channels);
    const auto scale = [&](int64_t v) -> uint8_t {
      if (v > max_value) fail("a PNM sample above the maximum value");
      return static_cast<uint8_t>((v * 255 + max_value / 2) / max_value);
    };
    if (kind <= 3) {  // ASCII; a P1 bitmap's digits need no separators
      for (size_t i = 0; i < count; ++i) {
        if (kind == 1) {
          while (at < data_.size() && (std::isspace(data_[at]) || data_[at] == '#')) {
            if (data_[at] == '#') {
              while (at < data_.size() && data_[at] != '\n') ++at;
            } else {
              ++at;
            }
          }
          need(at + 1, "the PNM raster");
          image.pixels[i] = data_[at++] == '1' ? 0 : 255;  // 1 is black
        } else {
          image.pixels[i] = scale(number());
        }
      }
      return image;
    }
    ++at;  // the single whitespace after the header
    if (kind == 4) {
      const size_t stride = (static_cast<size_t>(width) + 7) / 8;
      need(at + stride * static_cast<size_t>(height), "the PNM raster");
      for (int64_t y = 0; y < height; ++y) {
        for (int64_t x = 0; x < width; ++x) {
          const bool black = (data_[at + y * stride + x / 8] >> (7 - x % 8)) & 1;
          image.pixels[static_cast<size_t>(y * width + x)] = black ? 0 : 255;
        }
      }
      return image;
    }
    const size_t bytes = max_value > 255 ? 2 : 1;
    need(at + count * bytes, "the PNM raster");
    for (size_t i = 0; i < count; ++i) {
      const uint8_t* p = data_.data() + at + i * bytes;
      image.pixels[i] = scale(bytes == 2 ? (p[0] << 8) | p[1] : p[0]);
    }
    return image;
  }
};

enum class PixelFormat { kRgb, kBgr, kGray };

const KernelRegistration kImageDecoder{
    "", "ImageDecoder", 20, kLatestOpset, [](const KernelInfo& info) {
      const std::string name = info.string_attribute("pixel_format", "RGB");
      if (name != "RGB" && name != "BGR" && name != "Grayscale") {
        info.fail("pixel_format is '" + name + "', expected RGB, BGR or Grayscale");
      }
      const PixelFormat format = name == "RGB"   ? PixelFormat::kRgb
                                 : name == "BGR" ? PixelFormat::kBgr
                                                 : PixelFormat::kGray;
      return make_kernel([format](KernelContext& ctx) {
        const Tensor& encoded = ctx.input(0);
        if (encoded.dtype() != DType::kUInt8 || encoded.rank() != 1) {
          ctx.fail("encoded_stream must be 1-D uint8, got " + std::string(dtype_name(encoded.dtype())) +
                   shape_string(encoded.shape()));
        }
        const Image image = Decoder(encoded.values<uint8_t>(), ctx).decode();
        const int channels = format == PixelFormat::kGray ? 1 : 3;
        Tensor& y = ctx.allocate_output(0, DType::kUInt8, {image.height, image.width, channels});
        uint8_t* out = y.data<uint8_t>();
        const uint8_t* in = image.pixels.data();
        const int64_t n = image.width * image.height;
        for (int64_t i = 0; i < n; ++i) {
          if (image.channels == 1) {
            std::memset(out + i * channels, in[i], static_cast<size_t>(channels));
          } else if (format == PixelFormat::kGray) {
            const uint8_t* p = in + 3 * i;
            out[i] = static_cast<uint8_t>((19595u * p[0] + 38470u * p[1] + 7471u * p[2] + 0x8000u) >> 16);
          } else {
            const uint8_t* p = in + 3 * i;
            const bool bgr = format == PixelFormat::kBgr;
            out[3 * i] = p[bgr ? 2 : 0], out[3 * i + 1] = p[1], out[3 * i + 2] = p[bgr ? 0 : 2];
          }
        }
      });
    }};

}  // namespace
}  // namespace onnxtrain
