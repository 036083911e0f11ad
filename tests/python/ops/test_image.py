"""ImageDecoder on images Pillow encodes (BMP, PNG of every color type, bit depth and
compression level, PNM binary and ASCII), against the pixels themselves and against
onnx.reference (which decodes with Pillow); formats onnxtrain does not decode must be
refused with an error that names them, and corrupt streams with an error, not a crash.

JPEG and TIFF are checked against Pillow (libjpeg-turbo, libtiff) pixel for pixel, on
images Pillow writes and on ones written here with what Pillow cannot write (other
sampling factors, several scans, big-endian TIFF, the predictor); and a few thousand
truncated and corrupted streams must decode or raise onnxtrain's error."""

import functools
import io
import struct
import zlib

import numpy as np
import pytest

import onnxtrain
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


@pytest.mark.parametrize("fmt, name", [("WEBP", "WebP"), ("JPEG2000", "JPEG 2000"), ("GIF", "GIF")])
def test_refused_formats(fmt, name):
    with pytest.raises(RuntimeError, match=f"{name} images are not supported"):
        decode(encode(PIL.fromarray(RGB), fmt))


def test_corrupt_streams():
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


# ---- JPEG and TIFF, against Pillow.


@functools.cache
def decoder(pixel_format="RGB"):
    """One session for streams of any length (a session a stream would make the many
    cases below slow)."""
    model = make_model("ImageDecoder", {"x": np.zeros(1, np.uint8)}, {"pixel_format": pixel_format}, opset=20)
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "bytes"
    return onnxtrain.InferenceSession(model.SerializeToString())


def decode_any(data, pixel_format="RGB"):
    return decoder(pixel_format).run(None, {"x": np.frombuffer(bytes(data), np.uint8)})[0]


def pillow_rgb(data):
    return np.array(PIL.open(io.BytesIO(bytes(data))).convert("RGB"))


def assert_matches_pillow(data):
    np.testing.assert_array_equal(decode_any(data), pillow_rgb(data))


def content(height, width, kind, seed=0):
    """Noise (every coefficient busy, clipping after the IDCT) or smooth gradients."""
    if kind == "random":
        return np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)
    y, x = np.mgrid[0:height, 0:width]
    planes = [x * 255 // max(width - 1, 1), y * 255 // max(height - 1, 1), (x * 3 + y * 5 + seed) % 256]
    return np.stack(planes, axis=-1).astype(np.uint8)


JPEG_SIZES = [(1, 1), (1, 2), (2, 3), (3, 2), (4, 5), (7, 13), (13, 7), (17, 33), (32, 32), (100, 75)]


@pytest.mark.parametrize("mode, subsampling", [("RGB", 0), ("RGB", 1), ("RGB", 2), ("L", 0)])
def test_jpeg_matches_pillow(mode, subsampling):
    # 4:4:4, 4:2:2, 4:2:0 and gray; sizes that are no multiple of the MCU (widths of 1 and 2
    # chroma samples upsample by repetition in libjpeg-turbo, wider ones by its triangle).
    for height, width in JPEG_SIZES:
        for kind in ["random", "smooth"]:
            image = PIL.fromarray(content(height, width, kind)).convert(mode)
            for quality in [10, 30, 50, 75, 90, 95, 100]:
                assert_matches_pillow(encode(image, "JPEG", quality=quality, subsampling=subsampling))


@pytest.mark.parametrize(
    "options",
    [
        {"restart_marker_blocks": 1},
        {"restart_marker_blocks": 3, "subsampling": 2},
        {"restart_marker_rows": 1, "subsampling": 1},
        {"restart_marker_rows": 2, "subsampling": 2, "quality": 30},
        {"optimize": True, "subsampling": 2},
        {"optimize": True, "restart_marker_blocks": 5},
        {"keep_rgb": True},  # RGB components, an Adobe marker with transform 0
        {"qtables": [[300] * 64, [400] * 64]},  # 16-bit tables: SOF1
        {"qtables": [[1] * 64] * 2, "subsampling": 0},
    ],
    ids=lambda options: ",".join(options),
)
def test_jpeg_options(options):
    for mode in ["RGB", "L"]:
        for kind in ["random", "smooth"]:
            assert_matches_pillow(encode(PIL.fromarray(content(37, 53, kind)).convert(mode), "JPEG", **options))


@pytest.mark.parametrize("pixel_format", ["RGB", "BGR", "Grayscale"])
@pytest.mark.parametrize("mode", ["RGB", "L"])
def test_jpeg_pixel_formats_match_the_reference(pixel_format, mode):
    data = encode(PIL.fromarray(RGB).convert(mode), "JPEG", quality=80)
    if mode == "L" and pixel_format != "Grayscale":  # onnx.reference gives [H, W] for these
        gray = np.array(PIL.open(io.BytesIO(data)))
        np.testing.assert_array_equal(decode(data, pixel_format), np.repeat(gray[..., None], 3, axis=2))
        return
    check_op("ImageDecoder", {"x": data}, {"pixel_format": pixel_format}, opset=20, reference="onnx.reference")


# A baseline JPEG writer for what Pillow does not write: other sampling factors, several
# scans, restart intervals in them, component ids and markers that choose RGB or YCbCr.

ZIGZAG = sorted(range(64), key=lambda i: (i // 8 + i % 8, i // 8 if (i // 8 + i % 8) % 2 else i % 8))
# The orthonormal 8-point DCT-II: row u is frequency u.
DCT = np.array([[np.sqrt((1 if u else 0.5) / 4) * np.cos((2 * x + 1) * u * np.pi / 16) for x in range(8)]
                for u in range(8)])


class BitWriter:
    def __init__(self):
        self.data, self.bits, self.count = bytearray(), 0, 0

    def put(self, value, length):
        self.bits, self.count = (self.bits << length) | (value & ((1 << length) - 1)), self.count + length
        while self.count >= 8:
            self.count -= 8
            byte = (self.bits >> self.count) & 0xFF
            self.data += bytes([byte, 0]) if byte == 0xFF else bytes([byte])
        self.bits &= (1 << self.count) - 1

    def pad(self):  # with one bits, to a byte
        if self.count:
            self.put(0xFF, 8 - self.count)


def segment(marker, body):
    return bytes([0xFF, marker]) + struct.pack(">H", len(body) + 2) + body


def jpeg_bytes(planes, factors, *, ids=(1, 2, 3), scans=None, restart=0, markers=("JFIF",), step=4):
    """`planes` (full-size uint8) subsampled by box averages to sampling `factors` [(h, v)];
    the orthonormal DCT quantized by 1 + step * (row + column); Huffman codes all of one
    length (DC 4 bits, AC 8); restart markers every `restart` MCUs; `scans` lists
    component indexes (default: one interleaved scan)."""
    height, width = planes[0].shape
    max_h, max_v = max(h for h, _ in factors), max(v for _, v in factors)
    mcus_x, mcus_y = -(-width // (8 * max_h)), -(-height // (8 * max_v))
    quant = np.array([1 + step * (i // 8 + i % 8) for i in range(64)])
    blocks = []  # per component: [rows of blocks][columns] of quantized coefficients (natural order)
    for plane, (h, v) in zip(planes, factors):
        rx, ry = max_h // h, max_v // v
        padded = np.pad(plane.astype(float), ((0, -height % ry), (0, -width % rx)), mode="edge")
        small = padded.reshape(padded.shape[0] // ry, ry, padded.shape[1] // rx, rx).mean(axis=(1, 3))
        rows, columns = mcus_y * v, mcus_x * h  # of blocks
        small = np.pad(small, ((0, rows * 8 - small.shape[0]), (0, columns * 8 - small.shape[1])), mode="edge")
        tiles = small.reshape(rows, 8, columns, 8).transpose(0, 2, 1, 3) - 128
        blocks.append(np.rint(DCT @ tiles @ DCT.T / quant.reshape(8, 8)).astype(int).reshape(rows, columns, 64))
    header = b"\xff\xd8"
    if "JFIF" in markers:
        header += segment(0xE0, b"JFIF\0\x01\x01\0\0\x01\0\x01\0\0")
    for transform in [m for m in markers if m.startswith("Adobe")]:
        header += segment(0xEE, b"Adobe\0\x64\0\0\0\0" + bytes([int(transform[-1])]))
    header += segment(0xDB, b"\0" + bytes(quant[ZIGZAG].tolist()))
    frame = struct.pack(">BHHB", 8, height, width, len(planes))
    header += segment(0xC0, frame + b"".join(bytes([i, h << 4 | v, 0]) for i, (h, v) in zip(ids, factors)))
    header += segment(0xC4, b"\x00" + bytes([0, 0, 0, 12] + [0] * 12) + bytes(range(12)))
    ac_symbols = [0x00, 0xF0] + [run << 4 | size for run in range(16) for size in range(1, 11)]
    header += segment(0xC4, b"\x10" + bytes([0] * 7 + [len(ac_symbols)] + [0] * 8) + bytes(ac_symbols))
    if restart:
        header += segment(0xDD, struct.pack(">H", restart))
    data = header
    for scan in scans or [list(range(len(planes)))]:
        data += segment(0xDA, bytes([len(scan)]) + b"".join(bytes([ids[c], 0]) for c in scan) + b"\x00\x3f\x00")
        data += entropy_coded(blocks, factors, scan, restart, ac_symbols, width, height, max_h, max_v)
    return data + b"\xff\xd9"


def entropy_coded(blocks, factors, scan, restart, ac_symbols, width, height, max_h, max_v):
    out, predictions, mcu = BitWriter(), [0] * len(blocks), 0
    if len(scan) > 1:
        mcus = [[(c, my * factors[c][1] + by, mx * factors[c][0] + bx) for c in scan
                 for by in range(factors[c][1]) for bx in range(factors[c][0])]
                for my in range(blocks[scan[0]].shape[0] // factors[scan[0]][1])
                for mx in range(blocks[scan[0]].shape[1] // factors[scan[0]][0])]
    else:  # a single component's MCU is one block, of those holding samples
        c, (h, v) = scan[0], factors[scan[0]]
        wide, high = -(-(-(-width * h // max_h)) // 8), -(-(-(-height * v // max_v)) // 8)
        mcus = [[(c, y, x)] for y in range(high) for x in range(wide)]
    for mcu, units in enumerate(mcus):
        if restart and mcu and mcu % restart == 0:
            out.pad()
            out.data += bytes([0xFF, 0xD0 + (mcu // restart - 1) % 8])
            predictions = [0] * len(blocks)
        for c, y, x in units:
            zigzag = blocks[c][y, x][ZIGZAG]
            difference, predictions[c] = zigzag[0] - predictions[c], zigzag[0]
            size = abs(int(difference)).bit_length()
            out.put(size, 4)
            out.put(difference if difference >= 0 else difference + (1 << size) - 1, size)
            run = 0
            for k in range(1, 64):
                value = int(zigzag[k])
                if value == 0:
                    run += 1
                    continue
                while run >= 16:
                    out.put(ac_symbols.index(0xF0), 8)
                    run -= 16
                size = abs(value).bit_length()
                out.put(ac_symbols.index(run << 4 | size), 8)
                out.put(value if value >= 0 else value + (1 << size) - 1, size)
                run = 0
            if run:
                out.put(ac_symbols.index(0x00), 8)
    out.pad()
    return bytes(out.data)


SAMPLINGS = {
    "4:4:0": [(1, 2), (1, 1), (1, 1)],
    "4:2:0": [(2, 2), (1, 1), (1, 1)],
    "4:2:2": [(2, 1), (1, 1), (1, 1)],
    "mixed": [(2, 2), (2, 1), (1, 2)],
    "chroma-larger": [(1, 1), (2, 2), (1, 2)],
    "ten-blocks": [(2, 2), (2, 1), (2, 2)],  # the most an interleaved MCU may hold
    "1x2-1x2-1x1": [(1, 2), (1, 2), (1, 1)],
}


@pytest.mark.parametrize("sampling", SAMPLINGS)
@pytest.mark.parametrize("layout", ["interleaved", "scan-per-component", "restarts", "restarts-per-component"])
def test_jpeg_sampling_factors_scans_and_restarts(sampling, layout):
    per_component = layout.endswith("per-component")
    for height, width in [(1, 1), (2, 3), (5, 2), (7, 13), (17, 33), (33, 17)]:
        planes = list(content(height, width, "smooth", seed=height).transpose(2, 0, 1))
        planes[1] = content(height, width, "random", seed=width)[..., 1]
        data = jpeg_bytes(planes, SAMPLINGS[sampling], scans=[[0], [2], [1]] if per_component else None,
                          restart=(1 if per_component else 2) if "restarts" in layout else 0)
        assert_matches_pillow(data)


@pytest.mark.parametrize(
    "ids, markers, rgb",
    [((1, 2, 3), (), False), ((82, 71, 66), (), True), ((82, 71, 66), ("JFIF",), False),
     ((1, 2, 3), ("Adobe0",), True), ((82, 71, 66), ("Adobe1",), False), ((1, 2, 3), ("JFIF", "Adobe0"), False)],
)
def test_jpeg_color_space_as_libjpeg_guesses_it(ids, markers, rgb):
    planes = list(content(9, 11, "smooth").transpose(2, 0, 1))
    data = jpeg_bytes(planes, [(1, 1)] * 3, ids=ids, markers=markers, step=0)
    got = decode_any(data)
    np.testing.assert_array_equal(got, pillow_rgb(data))
    if rgb:  # quantization by 1 keeps the samples within 1
        assert np.abs(got.astype(int) - np.stack(planes, -1)).max() <= 1


def test_jpeg_gray_with_sampling_factors():
    plane = content(19, 23, "random")[..., 0]
    for factors in [(1, 1), (2, 2), (1, 2)]:
        assert_matches_pillow(jpeg_bytes([plane], [factors], restart=3))


def patched(data, changes):
    """`data` with the bytes at the offsets of `changes` {offset: value} replaced."""
    data = bytearray(data)
    for at, value in changes.items():
        data[at] = value
    return bytes(data)


def sof(data):
    return bytes(data).index(b"\xff\xc0")


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda d: encode(PIL.fromarray(RGB), "JPEG", progressive=True), "progressive JPEG"),
        (lambda d: patched(d, {sof(d) + 1: 0xC3}), "lossless JPEG"),
        (lambda d: patched(d, {sof(d) + 1: 0xC9}), "arithmetic-coded JPEG"),
        (lambda d: patched(d, {sof(d) + 1: 0xC5}), "hierarchical JPEG"),
        (lambda d: patched(d, {sof(d) + 4: 12}), "12-bit JPEG"),
        (lambda d: patched(d, {sof(d) + 11: 0x41}), "sampling factor 4x1"),
        (lambda d: encode(PIL.fromarray(RGB).convert("CMYK"), "JPEG"), "4-component JPEG"),
    ],
)
def test_jpeg_refused_features(make, message):
    with pytest.raises(RuntimeError, match=f"{message}.* is not supported"):
        decode_any(make(encode(PIL.fromarray(RGB), "JPEG")))


def test_jpeg_malformed_streams():
    good = encode(PIL.fromarray(content(40, 40, "random")), "JPEG", restart_marker_blocks=1)
    at = sof(good)  # FF C0, length (2 bytes), precision, height (2), width (2)
    cases = {
        "is cut off": good[: len(good) // 2],
        "entropy-coded data is cut off": good[:-2],
        "image of 0 x": patched(good, {at + 7: 0, at + 8: 0}),
        "whose height is given by a DNL": patched(good, {at + 5: 0, at + 6: 0}),
        "in a stream of": patched(good, {at + 5: 0x10, at + 7: 0x10}),  # 4096 x 4096 pixels
        "restart marker": bytes(good).replace(b"\xff\xd1", b"\xff\xd3"),
        "more codes than their lengths allow": bytes(good).replace(
            b"\xff\xc4\x00\x1f\x00\x00\x01\x05", b"\xff\xc4\x00\x1f\x00\x00\x03\x03"
        ),
    }
    for message, data in cases.items():
        with pytest.raises((ValueError, RuntimeError), match=message):
            decode_any(data)


# A TIFF writer for what Pillow does not write (big-endian files, the predictor, LZW and
# PackBits of our own, WhiteIsZero); Pillow's reading of them (libtiff) is the reference.

TIFF_TYPES = {1: "B", 3: "H", 4: "I"}


def packbits(data):
    out, i = bytearray(), 0
    while i < len(data):
        run = 1
        while i + run < len(data) and run < 128 and data[i + run] == data[i]:
            run += 1
        if run > 1:
            out += bytes([257 - run, data[i]])
            i += run
            continue
        j = i + 1
        while j < len(data) and j - i < 128 and not (j + 1 < len(data) and data[j + 1] == data[j]):
            j += 1
        out += bytes([j - i - 1]) + bytes(data[i:j])
        i = j
    return bytes(out)


def lzw(data):
    """TIFF's LZW: MSB first, a clear code first, the width growing one code early, a
    clear when the table is full."""
    out, bits, count = bytearray(), 0, 0
    width, table, prefix = 9, {bytes([i]): i for i in range(256)}, b""

    def emit(code):
        nonlocal bits, count
        bits, count = (bits << width) | code, count + width
        while count >= 8:
            count -= 8
            out.append((bits >> count) & 0xFF)

    emit(256)
    for byte in data:
        longer = prefix + bytes([byte])
        if longer in table:
            prefix = longer
            continue
        emit(table[prefix])
        table[longer] = len(table) + 2
        if len(table) + 2 >= 4094:
            emit(256)
            width, table = 9, {bytes([i]): i for i in range(256)}
        elif len(table) + 2 >= 1 << width:
            width += 1
        prefix = bytes([byte])
    if prefix:
        emit(table[prefix])
        if len(table) + 3 >= 1 << width:
            width += 1
    emit(257)
    if count:
        out.append((bits << (8 - count)) & 0xFF)
    return bytes(out)


def tiff_bytes(pixels, *, compression=1, predictor=1, rows_per_strip=None, big_endian=False, photometric=None,
               colormap=None, extra=(), fields=None, encoded=None):
    """An 8-bit chunky TIFF of `pixels` [H, W, samples] in strips of `rows_per_strip`, with
    more `fields` {tag: (type, values)}; `encoded` strips replace those of the pixels."""
    height, width, samples = pixels.shape
    rows = rows_per_strip or height
    order = ">" if big_endian else "<"
    strips = []
    for top in range(0, height, rows):
        raw = pixels[top:top + rows].astype(np.int32)
        if predictor == 2 and compression in (5, 8, 32946):  # libtiff ignores it elsewhere
            raw = np.concatenate([raw[:, :1], np.diff(raw, axis=1)], axis=1)
        raw = (raw % 256).astype(np.uint8).tobytes()
        compress = {1: bytes, 5: lzw, 8: zlib.compress, 32946: zlib.compress, 32773: packbits}[compression]
        strips.append(compress(raw))
    strips = encoded or strips
    data = bytearray((b"MM\0*" if big_endian else b"II*\0") + b"\0\0\0\0")
    offsets = []
    for strip in strips:
        offsets.append(len(data))
        data += strip + b"\0" * (len(strip) % 2)
    if photometric is None:
        photometric = 2 if samples - len(extra) == 3 else 1
    fields = dict(fields or {})
    fields |= {256: (4, [width]), 257: (4, [height]), 258: (3, [8] * samples), 259: (3, [compression]),
              262: (3, [photometric]), 273: (4, offsets), 277: (3, [samples]), 278: (4, [rows]),
              279: (4, [len(s) for s in strips]), 284: (3, [1])}
    if predictor != 1:
        fields[317] = (3, [predictor])
    if colormap is not None:
        fields[320] = (3, list(colormap))
    if extra:
        fields[338] = (3, list(extra))
    external = bytearray()
    ifd_at = len(data)
    ifd_end = ifd_at + 2 + 12 * len(fields) + 4
    entries = b""
    for tag, (kind, values) in sorted(fields.items()):
        packed = struct.pack(order + TIFF_TYPES[kind] * len(values), *values)
        if len(packed) <= 4:
            value = packed.ljust(4, b"\0")
        else:
            value = struct.pack(order + "I", ifd_end + len(external))
            external += packed + b"\0" * (len(packed) % 2)
        entries += struct.pack(order + "HHI", tag, kind, len(values)) + value
    data += struct.pack(order + "H", len(fields)) + entries + b"\0\0\0\0" + external
    data[4:8] = struct.pack(order + "I", ifd_at)
    return bytes(data)


def assert_tiff_decodes(data, pixels):
    """onnxtrain's pixels are Pillow's, and those are `pixels` (RGB, or gray [H, W])."""
    got = decode_any(data)
    np.testing.assert_array_equal(got, pillow_rgb(data))
    expected = pixels if pixels.ndim == 3 else np.repeat(pixels[..., None], 3, axis=2)
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("compression", ["raw", "packbits", "tiff_lzw", "tiff_adobe_deflate", "tiff_deflate"])
@pytest.mark.parametrize("mode", ["RGB", "L", "P", "RGBA"])
def test_tiff_pillow_writes(compression, mode):
    for height, width in [(1, 1), (7, 13), (33, 17), (64, 48)]:
        for kind in ["random", "smooth"]:
            image = PIL.fromarray(content(height, width, kind))
            image = image.quantize(64) if mode == "P" else image.convert(mode)
            data = encode(image, "TIFF", compression=compression)
            assert_tiff_decodes(data, np.array(image.convert("RGB")))


@pytest.mark.parametrize("compression", [1, 5, 8, 32946, 32773])
@pytest.mark.parametrize("big_endian", [False, True])
@pytest.mark.parametrize("predictor", [1, 2])
def test_tiff_written_here(compression, big_endian, predictor):
    rgb = content(45, 31, "smooth")
    rgb[::7] = content(45, 31, "random")[::7]
    for rows in [None, 1, 4, 16]:
        options = dict(compression=compression, predictor=predictor, rows_per_strip=rows, big_endian=big_endian)
        assert_tiff_decodes(tiff_bytes(rgb, **options), rgb)
        assert_tiff_decodes(tiff_bytes(rgb[..., :1], **options), rgb[..., 0])
        rgba = np.concatenate([rgb, rgb[..., :1]], axis=2)
        assert_tiff_decodes(tiff_bytes(rgba, extra=[2], **options), rgb)
    white_is_zero = tiff_bytes(rgb[..., :1], photometric=0, big_endian=big_endian, compression=compression)
    assert_tiff_decodes(white_is_zero, 255 - rgb[..., 0])
    colormap = np.random.default_rng(3).integers(0, 65536, 768)
    palette = tiff_bytes(rgb[..., :1], photometric=3, colormap=colormap, big_endian=big_endian, compression=compression)
    assert_tiff_decodes(palette, (colormap.reshape(3, 256).T >> 8)[rgb[..., 0]].astype(np.uint8))


def test_tiff_lzw_long_runs_clear_the_table():
    # 40000 bytes of varied data fill the 4096-entry table several times over.
    pixels = np.random.default_rng(5).integers(0, 4, (100, 400, 1), dtype=np.uint8) * 60
    assert_tiff_decodes(tiff_bytes(pixels, compression=5), pixels[..., 0])


def tiff_field(data, tag, value):
    """`data` with field `tag`'s (inline, little-endian SHORT or LONG) value replaced."""
    data = bytearray(data)
    ifd = struct.unpack_from("<I", data, 4)[0]
    for i in range(struct.unpack_from("<H", data, ifd)[0]):
        at = ifd + 2 + 12 * i
        if struct.unpack_from("<H", data, at)[0] == tag:
            kind = struct.unpack_from("<H", data, at + 2)[0]
            struct.pack_into("<H" if kind == 3 else "<I", data, at + 8, value)
            return bytes(data)
    raise KeyError(tag)


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: encode(PIL.fromarray(RGB), "TIFF", compression="jpeg"), "JPEG-compressed TIFF"),
        (lambda: encode(PIL.fromarray(RGB[..., 0].astype(np.uint16)), "TIFF"), "16-bit TIFF samples"),
        (lambda: encode(PIL.fromarray(RGB).convert("1"), "TIFF"), "1-bit TIFF samples"),
        (lambda: encode(PIL.fromarray(RGB).convert("CMYK"), "TIFF"), "photometric interpretation 5 \\(CMYK\\)"),
        (lambda: tiff_field(tiff_bytes(RGB), 284, 2), "TIFF planar configuration 2"),
        (lambda: tiff_field(tiff_bytes(RGB, compression=5, predictor=2), 317, 3), "TIFF predictor 3"),
        (lambda: tiff_bytes(RGB, fields={322: (3, [16]), 323: (3, [16])}), "tiled TIFF"),
    ],
)
def test_tiff_refused_features(make, message):
    with pytest.raises(RuntimeError, match=f"{message}.* is not supported"):
        decode_any(make())


def lzw_codes(codes):
    """Codes packed at the widths a TIFF LZW decoder reads them, whatever they mean: 9 bits
    after a clear, a bit more each time the table grows to one below a power of 2."""
    bits, width, next_code, first = "", 9, 258, True
    for code in codes:
        bits += format(code, f"0{width}b")
        if code == 256:
            width, next_code, first = 9, 258, True
        elif first:
            first = False
        else:
            next_code += 1
            if next_code + 1 >= 1 << width and width < 12:
                width += 1
    bits += "0" * (-len(bits) % 8)
    return bytes(int(bits[i:i + 8], 2) for i in range(0, len(bits), 8))


def test_tiff_malformed_streams():
    strips = tiff_bytes(RGB, compression=5, rows_per_strip=4)
    one_strip = tiff_bytes(RGB)
    gray = np.zeros((64, 64, 1), np.uint8)

    def with_strip(strip):  # a gray 64 x 64 LZW TIFF of one strip, `strip`
        return tiff_bytes(gray, compression=5, encoded=[strip])

    cases = {
        "lies past the end": tiff_field(one_strip, 273, 10**6),
        "image of 0 x": tiff_field(strips, 256, 0),
        "image of 300000 x 300000": tiff_field(tiff_field(strips, 256, 300000), 257, 300000),
        "cannot hold": tiff_field(tiff_bytes(RGB, rows_per_strip=4), 278, 40),
        "strips with": tiff_field(strips, 278, 1),
        "is cut off": strips[:-20],
        "LZW code 300 is beyond the table": with_strip(lzw_codes([256, 65, 300])),
        "LZW table overflow": with_strip(lzw_codes([256] + [65] * 4000)),
        "LZW data starts with code 258": with_strip(lzw_codes([256, 258])),
        "decodes to 3 bytes, expected 4096": with_strip(lzw_codes([256, 65, 66, 67, 257])),
        "PackBits data is cut off": tiff_field(tiff_bytes(gray, compression=32773), 279, 1),
    }
    for message, data in cases.items():
        with pytest.raises((ValueError, RuntimeError), match=message):
            decode_any(data)


def corruptions(data, rng, flips):
    """`data` cut at many lengths, then with 1 to 4 random bytes changed `flips` times."""
    data = bytes(data)
    step = max(1, len(data) // 150)
    yield from (data[:n] for n in range(0, len(data), step))
    for _ in range(flips):
        corrupt = bytearray(data)
        for at in rng.integers(0, len(data), rng.integers(1, 5)):
            corrupt[at] = rng.integers(0, 256) if rng.random() < 0.5 else corrupt[at] ^ (1 << rng.integers(0, 8))
        yield bytes(corrupt)


def test_corrupted_jpeg_and_tiff_decode_or_raise():
    # Decoded or refused with onnxtrain's error, never a crash (the sanitizer build reads out
    # of bounds loudly).
    rng = np.random.default_rng(7)
    image = PIL.fromarray(content(21, 27, "smooth"))
    seeds = [
        encode(image, "JPEG", subsampling=2, restart_marker_blocks=2),
        encode(image.convert("L"), "JPEG", optimize=True),
        jpeg_bytes(list(content(19, 13, "random").transpose(2, 0, 1)), SAMPLINGS["mixed"], scans=[[0], [1, 2]],
                   restart=1),
        tiff_bytes(np.array(image), compression=5, predictor=2, rows_per_strip=5),
        tiff_bytes(np.array(image)[..., :1], compression=32773, big_endian=True, rows_per_strip=7),
        tiff_bytes(np.array(image), compression=8, rows_per_strip=8),
        encode(image.quantize(16), "TIFF", compression="raw"),
    ]
    outcomes = {"decoded": 0, "error": 0}
    for seed in seeds:
        for data in corruptions(seed, rng, 400):
            try:
                decode_any(data)
                outcomes["decoded"] += 1
            except (ValueError, RuntimeError):
                outcomes["error"] += 1
    assert outcomes["decoded"] > 100 and outcomes["error"] > 1000, outcomes
