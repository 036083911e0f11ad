"""RotaryEmbedding (opset 23) against onnxruntime 1.23 and onnx.reference: 4-D and 3-D
(num_heads) input, with and without position_ids, interleaved or halves, partial rotation
(rotary_embedding_dim). Tolerances: float32 rtol 1e-5 / atol 1e-6 (one product and sum per
element), float16 1e-3 (the output's rounding)."""

import numpy as np
import pytest

from op_harness import check_op

rng = np.random.default_rng(0)
F32 = dict(rtol=1e-5, atol=1e-6)


def caches(positions, half, dtype=np.float32):
    """cos/sin caches as a model computes them: angle = position * 10000^(-2i / dim)."""
    inv_freq = 1.0 / (10000 ** (np.arange(half) / half))
    angles = np.asarray(positions, np.float64)[..., None] * inv_freq
    return np.cos(angles).astype(dtype), np.sin(angles).astype(dtype)


def inputs(shape, rotary_dim=0, num_heads=0, position_ids=True, dtype=np.float32):
    b = shape[0]
    seq = shape[2] if len(shape) == 4 else shape[1]
    head = shape[3] if len(shape) == 4 else shape[2] // num_heads
    half = (rotary_dim or head) // 2
    x = rng.standard_normal(shape).astype(dtype)
    if position_ids:
        max_pos = seq + 5
        pos = rng.integers(0, max_pos, size=(b, seq)).astype(np.int64)
        cos, sin = caches(np.arange(max_pos), half, dtype)
        return {"x": x, "cos": cos, "sin": sin, "pos": pos}
    cos, sin = caches(np.arange(seq)[None, :] + np.arange(b)[:, None], half, dtype)
    return {"x": x, "cos": cos, "sin": sin}


CASES = [
    ("4d", (2, 3, 5, 8), {}),
    ("4d-interleaved", (2, 3, 5, 8), {"interleaved": 1}),
    # onnxruntime wants num_heads whenever rotary_embedding_dim is set (the spec does not).
    ("4d-partial", (2, 2, 4, 10), {"rotary_embedding_dim": 4, "num_heads": 2}),
    ("4d-partial-interleaved", (1, 2, 6, 12), {"rotary_embedding_dim": 6, "interleaved": 1, "num_heads": 2}),
    ("4d-partial-no-num-heads", (2, 2, 4, 10), {"rotary_embedding_dim": 4}),
    ("3d", (2, 5, 24), {"num_heads": 3}),
    ("3d-interleaved-partial", (2, 4, 32), {"num_heads": 2, "rotary_embedding_dim": 8, "interleaved": 1}),
]


@pytest.mark.parametrize("reference", ["onnxruntime", "onnx.reference"])
@pytest.mark.parametrize("position_ids", [True, False])
@pytest.mark.parametrize("name, shape, attrs", CASES, ids=[c[0] for c in CASES])
def test_rotary_embedding(name, shape, attrs, position_ids, reference):
    if name == "4d-partial-no-num-heads" and reference == "onnxruntime":
        pytest.skip("onnxruntime refuses rotary_embedding_dim without num_heads")
    feeds = inputs(shape, attrs.get("rotary_embedding_dim", 0), attrs.get("num_heads", 0), position_ids)
    check_op("RotaryEmbedding", feeds, attrs, opset=23, reference=reference, **F32)


def test_rotary_embedding_constant_caches_long_sequence():
    feeds = inputs((1, 4, 300, 64))
    check_op("RotaryEmbedding", feeds, opset=23, constants=["cos", "sin"], **F32)


def test_rotary_embedding_float16():
    feeds = inputs((2, 2, 5, 8), dtype=np.float16)
    check_op("RotaryEmbedding", feeds, {"interleaved": 1}, opset=23, rtol=1e-3, atol=1e-3)


def test_rotary_embedding_float64_extension():
    # float64 is beyond the spec's types (kept for finite differences): onnx.reference.
    feeds = {k: (v.astype(np.float64) if v.dtype == np.float32 else v) for k, v in inputs((2, 3, 4, 6)).items()}
    check_op("RotaryEmbedding", feeds, opset=23, reference="onnx.reference", rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("feeds_change, attrs, message", [
    (lambda f: f.update(pos=f["pos"] + 100), {}, r"position_ids holds \d+, outside the caches' 10 positions"),
    (lambda f: f.update(cos=f["cos"][:, :3]), {}, r"cos_cache \[10, 3\] must be \[max_position, 4\]"),
    (lambda f: f.update(pos=f["pos"][:, :2]), {}, r"position_ids \[2, 2\] must be \[batch, sequence\] = \[2, 5\]"),
    (lambda f: None, {"rotary_embedding_dim": 3}, r"rotary_embedding_dim is 3, expected an even number"),
    (lambda f: None, {"rotary_embedding_dim": 10}, r"rotary_embedding_dim 10 must be even and at most the head size 8"),
])
def test_rotary_embedding_rejects_bad_inputs(feeds_change, attrs, message):
    feeds = inputs((2, 3, 5, 8))
    feeds_change(feeds)
    with pytest.raises((ValueError, RuntimeError), match=message):
        check_op("RotaryEmbedding", feeds, attrs, opset=23, reference="onnx.reference")


def test_rotary_embedding_3d_needs_num_heads():
    feeds = inputs((2, 5, 24), num_heads=3)
    with pytest.raises((ValueError, RuntimeError), match=r"3-D, which needs the num_heads attribute"):
        check_op("RotaryEmbedding", feeds, opset=23, reference="onnx.reference")
