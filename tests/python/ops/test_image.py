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
