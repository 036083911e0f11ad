"""DFT, STFT, the windows and MelWeightMatrix against numpy.fft (float64, rtol 1e-10),
onnxruntime and onnx.reference. Lengths cover the three FFT paths: powers of two
(radix-2), small odd lengths (the direct sum) and long non-powers of two (Bluestein)."""

import numpy as np
import pytest
from onnx import TensorProto

from op_harness import check_op, make_model, run_onnxtrain

rng = np.random.default_rng(0)
F64 = dict(rtol=1e-10, atol=1e-10)


def as_pairs(z):
    return np.stack([z.real, z.imag], axis=-1)


def dft(x, axis, n=None, inverse=False, onesided=False, opset=20):
    inputs = {"x": x, "n": None if n is None else np.array(n, np.int64)}
    attrs = {"inverse": int(inverse), "onesided": int(onesided)}
    if opset >= 20:
        inputs["axis"] = np.array(axis, np.int64)
    else:
        attrs["axis"] = axis
    model = make_model("DFT", inputs, attrs, opset=opset)
    return run_onnxtrain(model, {k: v for k, v in inputs.items() if v is not None})[0]


@pytest.mark.parametrize("n", [1, 2, 3, 5, 8, 12, 17, 64, 100, 257, 1000])
@pytest.mark.parametrize("complex_input", [False, True])
def test_dft_lengths_against_numpy(n, complex_input):
    z = rng.standard_normal((3, n)) + (1j * rng.standard_normal((3, n)) if complex_input else 0)
    x = as_pairs(z) if complex_input else z.real[..., None].copy()
    np.testing.assert_allclose(dft(x, 1), as_pairs(np.fft.fft(z, axis=1)), **F64)
    np.testing.assert_allclose(dft(x, 1, inverse=True), as_pairs(np.fft.ifft(z, axis=1)), **F64)


@pytest.mark.parametrize("n", [4, 7, 31, 100])
def test_dft_onesided_and_length(n):
    x = rng.standard_normal((2, 20, 1))
    z = x[..., 0]
    np.testing.assert_allclose(dft(x, 1, n=n, onesided=True), as_pairs(np.fft.rfft(z, n=n, axis=1)), **F64)
    np.testing.assert_allclose(dft(x, -2, n=n), as_pairs(np.fft.fft(z, n=n, axis=1)), **F64)


@pytest.mark.parametrize("axis", [0, 1, 2, -2, -3])
def test_dft_axes(axis):
    z = rng.standard_normal((4, 6, 9)) + 1j * rng.standard_normal((4, 6, 9))
    x = as_pairs(z)
    np.testing.assert_allclose(dft(x, axis), as_pairs(np.fft.fft(z, axis=axis % 4)), **F64)


@pytest.mark.parametrize("opset", [17, 20])
@pytest.mark.parametrize("inverse", [0, 1])
def test_dft_float32_vs_onnxruntime(opset, inverse):
    x = rng.standard_normal((2, 50, 3, 2)).astype(np.float32)
    inputs = {"x": x}
    attrs = {"inverse": inverse}
    if opset >= 20:
        inputs.update({"n": None, "axis": np.array(1, np.int64)})
    else:
        attrs["axis"] = 1
    # onnxruntime sums in float32 (errors ~1e-4 at |y| ~ 10); onnxtrain in double.
    check_op("DFT", inputs, attrs, opset=opset, rtol=1e-4, atol=1e-3)


def test_dft_matches_onnx_reference_onesided_inverse():
    x = rng.standard_normal((2, 10, 2))
    inputs = {"x": x, "n": None, "axis": np.array(1, np.int64)}
    check_op("DFT", inputs, {"inverse": 1, "onesided": 1}, opset=20, reference="onnx.reference", **F64)


def test_dft_rejects_the_component_axis_and_bad_last_axis():
    with pytest.raises((ValueError, RuntimeError), match=r"axis 2 is out of range"):
        dft(rng.standard_normal((2, 3, 1)), 2)
    with pytest.raises((ValueError, RuntimeError), match=r"the last axis of input holds"):
        dft(rng.standard_normal((2, 3, 3)), 1)


@pytest.mark.parametrize("onesided", [0, 1])
@pytest.mark.parametrize("with_window", [False, True])
def test_stft(onesided, with_window):
    x = rng.standard_normal((2, 300, 1)).astype(np.float32)
    window = np.hanning(40).astype(np.float32)
    inputs = {"x": x, "step": np.array(13, np.int64), "window": window if with_window else None,
              "frame_length": None if with_window else np.array(40, np.int64)}
    got = check_op("STFT", inputs, {"onesided": onesided}, reference="onnx.reference", rtol=1e-4, atol=1e-4)[0]
    frames = np.stack([x[:, f * 13:f * 13 + 40, 0] * (window if with_window else 1) for f in range(1 + 260 // 13)], 1)
    spectrum = np.fft.rfft(frames.astype(np.float64)) if onesided else np.fft.fft(frames.astype(np.float64))
    np.testing.assert_allclose(got, as_pairs(spectrum), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("op", ["HannWindow", "HammingWindow", "BlackmanWindow"])
@pytest.mark.parametrize("periodic", [0, 1])
@pytest.mark.parametrize("dtype", [TensorProto.FLOAT, TensorProto.DOUBLE])
def test_windows(op, periodic, dtype):
    inputs = {"size": np.array(33, np.int64)}
    check_op(op, inputs, {"periodic": periodic, "output_datatype": dtype}, reference="onnx.reference", rtol=1e-6,
             atol=1e-6)
    check_op(op, inputs, {"periodic": periodic, "output_datatype": dtype}, rtol=1e-6, atol=1e-6)


def test_hann_matches_numpy():
    (w,) = run_onnxtrain(make_model("HannWindow", {"size": np.array(16, np.int64)}, {"periodic": 0,
                                                                                   "output_datatype": 11}),
                         {"size": np.array(16, np.int64)})
    np.testing.assert_allclose(w, np.hanning(16), **F64)


@pytest.mark.parametrize("bins,n,rate,lo,hi", [(8, 16, 8192, 0.0, 4096.0), (20, 512, 16000, 20.0, 8000.0)])
def test_mel_weight_matrix(bins, n, rate, lo, hi):
    inputs = {"bins": np.array(bins, np.int64), "n": np.array(n, np.int64), "rate": np.array(rate, np.int64),
              "lo": np.array(lo, np.float32), "hi": np.array(hi, np.float32)}
    check_op("MelWeightMatrix", inputs, {}, reference="onnx.reference")


def test_stft_without_window_or_frame_length_takes_one_frame_of_the_signal():
    x = rng.standard_normal((2, 24, 2))
    inputs = {"x": x, "step": np.array(5, np.int64)}
    (got,) = check_op("STFT", inputs, {"onesided": 0}, reference="onnx.reference", **F64)
    assert got.shape == (2, 1, 24, 2)
