"""ImageDecoder on images Pillow encodes (BMP, PNG of every color type, bit depth and
compression level, PNM binary and ASCII), against the pixels themselves and against
onnx.reference (which decodes with Pillow); formats onnxtrain does not decode must be
refused with an error that names them, and corrupt streams with an error, not a crash."""

import io

import numpy as np
import pytest

from op_harness import check_op, make_model, run_onnxtrain

PIL = pytest.importorskip("PIL.Image")
rng = np.random.default_rng(0)
RGB = rng.integers(0, 256, size=(13, 21, 3), dtype=np.uint8)


def encode(image, fmt, **options):
    buffer = io.BytesIO()
    image.save(buffer, format=fmt, **options)
    return np.frombuffer(buffer.getvalue(), np.uint8).copy()


def decode(data, pixel_format="RGB"):
    model = make_model("ImageDecoder", {"x": data}, {"pixel_format": pixel_format}, opset=20)
    return run_onnxtrain(model, {"x": data})[0]


@pytest.mark.parametrize("fmt", ["BMP", "PNG", "PPM"])
@pytest.mark.parametrize("pixel_format", ["RGB", "BGR", "Grayscale"])
def test_rgb_images_match_the_reference(fmt, pixel_format):
    data = encode(PIL.fromarray(RGB), fmt)
    check_op("ImageDecoder", {"x": data}, {"pixel_format": pixel_format}, opset=20, reference="onnx.reference")


@pytest.mark.parametrize("level", [0, 1, 6, 9])
def test_png_compression_levels_and_filters(level):
    # Smooth gradients make the encoder pick every row filter (sub, up, average, paeth).
    y, x = np.mgrid[0:64, 0:48]
    image = np.stack([x * 5, y * 3, (x * y) % 256], axis=-1).astype(np.uint8)
    np.testing.assert_array_equal(decode(encode(PIL.fromarray(image), "PNG", compress_level=level)), image)


@pytest.mark.parametrize("mode", ["L", "LA", "RGBA", "P", "1", "I;16"])
def test_png_color_types(mode):
    if mode == "I;16":  # 16-bit gray: onnxtrain keeps the high byte
        image = PIL.fromarray(RGB[..., 0].astype(np.uint16) * 257)
    else:
        image = PIL.fromarray(RGB).convert(mode)
    got = decode(encode(image, "PNG"))
    rgb = np.array(image.convert("RGB")) if mode != "I;16" else np.repeat(RGB[..., :1], 3, axis=2)
    np.testing.assert_array_equal(got, rgb)


@pytest.mark.parametrize("mode", ["1", "P", "RGB"])
def test_bmp_bit_depths(mode):
    image = PIL.fromarray(RGB).convert(mode)
    np.testing.assert_array_equal(decode(encode(image, "BMP")), np.array(image.convert("RGB")))


def test_pnm_ascii_and_graymap():
    gray = RGB[..., 1]
    header = f"P2\n# a comment\n{gray.shape[1]} {gray.shape[0]}\n255\n".encode()
    ascii_pgm = np.frombuffer(header + " ".join(map(str, gray.ravel())).encode(), np.uint8)
    np.testing.assert_array_equal(decode(ascii_pgm, "Grayscale")[..., 0], gray)
    pgm = encode(PIL.fromarray(gray), "PPM")
    np.testing.assert_array_equal(decode(pgm, "RGB"), np.repeat(gray[..., None], 3, axis=2))
    p3 = np.frombuffer(b"P3 2 1 15 15 0 0 0 15 0", np.uint8)
    np.testing.assert_array_equal(decode(p3), [[[255, 0, 0], [0, 255, 0]]])


def test_refused_formats_and_corrupt_streams():
    jpeg = encode(PIL.fromarray(RGB), "JPEG")
    with pytest.raises((ValueError, RuntimeError, NotImplementedError), match="JPEG images are not supported"):
        decode(jpeg)
    png = encode(PIL.fromarray(RGB), "PNG")
    corrupt = png.copy()
    corrupt[60:80] ^= 0x5A
    with pytest.raises((ValueError, RuntimeError), match="encoded_stream"):
        decode(corrupt)
    with pytest.raises((ValueError, RuntimeError), match="cut off|ends early"):
        decode(png[: len(png) // 2])
    with pytest.raises((ValueError, RuntimeError), match="not an image format"):
        decode(np.frombuffer(b"hello world", np.uint8))


ADAM7 = [(0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2)]


def filtered_rows(pixels, filters):
    """The rows of an 8-bit RGB image, each filtered with the next filter type in turn."""
    height, width, _ = pixels.shape
    raw = bytearray()
    previous = np.zeros(width * 3, np.int32)
    for y in range(height):
        row = pixels[y].reshape(-1).astype(np.int32)
        kind = filters[y % len(filters)]
        left = np.concatenate([np.zeros(3, np.int32), row[:-3]])
        up_left = np.concatenate([np.zeros(3, np.int32), previous[:-3]])
        if kind == 0:
            predictor = np.zeros_like(row)
        elif kind == 1:
            predictor = left
        elif kind == 2:
            predictor = previous
        elif kind == 3:
            predictor = (left + previous) // 2
        else:
            p = left + previous - up_left
            pa, pb, pc = np.abs(p - left), np.abs(p - previous), np.abs(p - up_left)
            predictor = np.where((pa <= pb) & (pa <= pc), left, np.where(pb <= pc, previous, up_left))
        raw += bytes([kind]) + ((row - predictor) % 256).astype(np.uint8).tobytes()
        previous = row
    return bytes(raw)


def png_bytes(pixels, compressor, chunk=None, filters=(0, 1, 2, 3, 4), interlace=False):
    """An 8-bit RGB PNG of `pixels` written here (Pillow writes no interlaced PNGs): rows
    filtered in turn with each filter type, Adam7 passes when `interlace`, the zlib stream
    from `compressor` split into IDAT chunks of `chunk` bytes."""
    import struct
    import zlib

    height, width, _ = pixels.shape
    passes = [pixels[y0::dy, x0::dx] for x0, y0, dx, dy in ADAM7] if interlace else [pixels]
    raw = b"".join(filtered_rows(p, filters) for p in passes if p.size)
    stream = compressor.compress(raw) + compressor.flush()

    def chunk_of(kind, body):
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    idat = [stream[i:i + chunk] for i in range(0, len(stream), chunk)] if chunk else [stream]
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, int(interlace))
    data = b"\x89PNG\r\n\x1a\n" + chunk_of(b"IHDR", header)
    data += b"".join(chunk_of(b"IDAT", part) for part in idat) + chunk_of(b"IEND", b"")
    return np.frombuffer(data, np.uint8)


@pytest.mark.parametrize("strategy", ["Z_DEFAULT_STRATEGY", "Z_FIXED", "Z_HUFFMAN_ONLY", "Z_RLE", "Z_FILTERED"])
@pytest.mark.parametrize("level", [0, 1, 9])
def test_inflate_every_block_kind(strategy, level):
    # Stored blocks (level 0), fixed and dynamic Huffman codes, long matches (RLE on a
    # repetitive image), IDAT split into chunks of 7 bytes.
    import zlib

    image = np.concatenate([RGB, np.repeat(RGB[:1], 40, axis=0)], axis=0)
    compressor = zlib.compressobj(level, zlib.DEFLATED, 15, 9, getattr(zlib, strategy))
    np.testing.assert_array_equal(decode(png_bytes(image, compressor, chunk=7)), image)


@pytest.mark.parametrize("size", [(1, 1), (5, 3), (3, 5), (13, 21), (16, 16)])
def test_png_interlaced(size):
    import zlib

    image = RGB[: size[0], : size[1]]
    np.testing.assert_array_equal(decode(png_bytes(image, zlib.compressobj(6), interlace=True)), image)
