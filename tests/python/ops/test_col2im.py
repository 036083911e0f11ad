"""Col2Im against onnxruntime 1.23 (2-D, float32), onnx.reference 1.19 (1-D and 3-D
images, other types) and torch.nn.functional.fold; rtol / atol 1e-5 (exact for integers)."""

import numpy as np
import pytest

from op_harness import check_op, make_model, run_onnxtrain

rng = np.random.default_rng(0)
F32 = dict(rtol=1e-5, atol=1e-5)


def blocks(image, block, strides=None, dilations=None, pads=None):
    r = len(image)
    strides, dilations, pads = strides or [1] * r, dilations or [1] * r, pads or [0] * (2 * r)
    count = 1
    for a in range(r):
        count *= (image[a] + pads[a] + pads[a + r] - dilations[a] * (block[a] - 1) - 1) // strides[a] + 1
    return count


@pytest.mark.parametrize("image, block, attrs", [
    ([5, 5], [1, 5], {}),
    ([5, 5], [2, 2], {}),
    ([6, 7], [2, 3], {"strides": [2, 1]}),
    ([5, 5], [2, 2], {"dilations": [2, 2]}),
    ([5, 5], [3, 2], {"pads": [1, 0, 2, 1]}),
    ([6, 6], [3, 3], {"strides": [2, 2], "dilations": [1, 2], "pads": [1, 1, 1, 1]}),
])
def test_col2im_2d(image, block, attrs):
    c = 2
    x = rng.standard_normal((2, c * int(np.prod(block)), blocks(image, block, **attrs))).astype(np.float32)
    inputs = {"x": x, "image_shape": np.array(image, np.int64), "block_shape": np.array(block, np.int64)}
    check_op("Col2Im", inputs, attrs, opset=18, constants=["image_shape", "block_shape"], **F32)


@pytest.mark.parametrize("image, block, attrs", [
    ([3, 4, 5], [1, 2, 2], {}),
    ([4, 4, 4], [2, 2, 2], {"strides": [2, 1, 1], "pads": [0, 1, 0, 0, 0, 1]}),
    ([9], [3], {"dilations": [2]}),
])
def test_col2im_other_ranks(image, block, attrs):
    x = rng.standard_normal((1, 2 * int(np.prod(block)), blocks(image, block, **attrs)))
    inputs = {"x": x, "image_shape": np.array(image, np.int64), "block_shape": np.array(block, np.int64)}
    check_op("Col2Im", inputs, attrs, opset=18, reference="onnx.reference", rtol=1e-12, atol=1e-12)


def test_col2im_integers_fed_shapes():
    x = rng.integers(-5, 5, (1, 4, 16)).astype(np.int32)
    inputs = {"x": x, "image_shape": np.array([5, 5], np.int64), "block_shape": np.array([2, 2], np.int64)}
    check_op("Col2Im", inputs, opset=18, reference="onnx.reference")


def test_col2im_matches_torch_fold():
    torch = pytest.importorskip("torch")
    x = rng.standard_normal((2, 3 * 6, blocks([7, 8], [2, 3], [2, 1], [1, 2], [1, 0, 1, 0])))
    attrs = {"strides": [2, 1], "dilations": [1, 2], "pads": [1, 0, 1, 0]}
    inputs = {"x": x, "image_shape": np.array([7, 8], np.int64), "block_shape": np.array([2, 3], np.int64)}
    (ours,) = run_onnxtrain(make_model("Col2Im", inputs, attrs, opset=18), inputs)
    theirs = torch.nn.functional.fold(torch.tensor(x), (7, 8), (2, 3), dilation=(1, 2), padding=(1, 0), stride=(2, 1))
    np.testing.assert_allclose(ours, theirs.numpy(), rtol=1e-12, atol=1e-12)


def test_col2im_rejects_wrong_block_count():
    x = rng.standard_normal((1, 4, 15)).astype(np.float32)
    inputs = {"x": x, "image_shape": np.array([5, 5], np.int64), "block_shape": np.array([2, 2], np.int64)}
    with pytest.raises((ValueError, RuntimeError), match=r"input must be \[N, C \* 4, 16\]"):
        run_onnxtrain(make_model("Col2Im", inputs, opset=18), inputs)
