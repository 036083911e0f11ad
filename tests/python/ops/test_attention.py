"""Attention (opset 23) against onnxruntime 1.23 and onnx.reference on random cases: 4-D
and 3-D layouts, grouped-query heads, a value head size other than the query's, boolean
and additive masks of rank 2 to 4 (also shorter than the total sequence), is_causal,
scale, softcap, the KV cache (past_key/past_value in, present_key/present_value out) and
the four qk_matmul_output modes. ONNX's own node tests (test_attention_*) run in
test_onnx_backend.py. Tolerances: float32 rtol 1e-5 / atol 1e-6 (sums over up to a few
hundred products), float16 2e-3, float64 1e-12."""

import numpy as np
import pytest
from onnx import helper

from op_harness import check_op, make_model, run_onnxtrain

rng = np.random.default_rng(0)
F32 = dict(rtol=1e-5, atol=1e-6)


def randn(*shape, dtype=np.float32):
    return rng.standard_normal(shape).astype(dtype)


def qkv(b=2, hq=4, hkv=4, sq=5, skv=5, d=8, dv=8, three_d=False, dtype=np.float32):
    if three_d:
        return {"q": randn(b, sq, hq * d, dtype=dtype), "k": randn(b, skv, hkv * d, dtype=dtype),
                "v": randn(b, skv, hkv * dv, dtype=dtype)}
    return {"q": randn(b, hq, sq, d, dtype=dtype), "k": randn(b, hkv, skv, d, dtype=dtype),
            "v": randn(b, hkv, skv, dv, dtype=dtype)}


def attention(inputs, attrs=None, n_outputs=1, reference="onnxruntime", **tol):
    return check_op("Attention", inputs, attrs or {}, n_outputs=n_outputs, opset=23, reference=reference,
                    **(tol or F32))


BOTH = pytest.mark.parametrize("reference", ["onnxruntime", "onnx.reference"])


@BOTH
@pytest.mark.parametrize("heads", [(4, 4), (4, 2), (6, 1)], ids=["mha", "gqa", "mqa"])
def test_attention_4d(heads, reference):
    attention(qkv(hq=heads[0], hkv=heads[1], sq=3, skv=7, dv=5), reference=reference)


@BOTH
@pytest.mark.parametrize("heads", [(2, 2), (4, 2)], ids=["mha", "gqa"])
def test_attention_3d(heads, reference):
    attention(qkv(hq=heads[0], hkv=heads[1], sq=4, skv=6, dv=6, three_d=True),
              {"q_num_heads": heads[0], "kv_num_heads": heads[1]}, reference=reference)


@BOTH
@pytest.mark.parametrize("mask_shape", [(5, 7), (4, 5, 7), (2, 1, 5, 7), (2, 4, 5, 7), (1, 7), (5, 4)],
                         ids=["2d", "3d", "4d-broadcast-heads", "4d", "row", "short"])
@pytest.mark.parametrize("kind", ["bool", "float"])
def test_attention_masks(mask_shape, kind, reference):
    inputs = qkv(sq=5, skv=7)
    if kind == "bool":
        mask = rng.random(mask_shape) < 0.7
        mask[..., 0] = True  # no row fully masked
    else:
        mask = randn(*mask_shape)
    if reference == "onnxruntime" and mask_shape in ((5, 4), (1, 7)):
        pytest.skip("onnxruntime 1.23 needs the mask's last two axes to be [q_sequence, total_sequence]")
    attention({**inputs, "mask": mask}, reference=reference)


@BOTH
@pytest.mark.parametrize("sq, skv", [(6, 6), (3, 7), (7, 3)])
def test_attention_causal(sq, skv, reference):
    attention(qkv(sq=sq, skv=skv, hq=4, hkv=2), {"is_causal": 1}, reference=reference)


@BOTH
def test_attention_causal_with_mask_scale_softcap(reference):
    inputs = {**qkv(sq=5, skv=5), "mask": randn(5, 5)}
    attention(inputs, {"is_causal": 1, "scale": 0.3, "softcap": 2.0}, reference=reference)


@BOTH
@pytest.mark.parametrize("softcap", [0.5, 3.0])
def test_attention_softcap(softcap, reference):
    attention(qkv(sq=4, skv=6), {"softcap": softcap, "scale": 0.7}, reference=reference)


@BOTH
@pytest.mark.parametrize("three_d", [False, True])
@pytest.mark.parametrize("causal", [0, 1])
def test_attention_kv_cache(three_d, causal, reference):
    b, hq, hkv, sq, past, d, dv = 2, 4, 2, 3, 6, 8, 6
    inputs = qkv(b, hq, hkv, sq, sq, d, dv, three_d)
    inputs["mask"] = None
    inputs["past_key"] = randn(b, hkv, past, d)
    inputs["past_value"] = randn(b, hkv, past, dv)
    attrs = {"is_causal": causal}
    if three_d:
        attrs |= {"q_num_heads": hq, "kv_num_heads": hkv}
    attention(inputs, attrs, n_outputs=3, reference=reference)


@BOTH
@pytest.mark.parametrize("mode", [0, 1, 2, 3])
def test_attention_qk_matmul_output(mode, reference):
    inputs = {**qkv(sq=4, skv=4, hq=2, hkv=2), "mask": randn(4, 4)}
    attrs = {"qk_matmul_output_mode": mode, "softcap": 1.5, "is_causal": 1}
    model = make_model("Attention", inputs, attrs, n_outputs=4, opset=23)
    # Outputs 1 and 2 (present_key/value) left out: only Y and qk_matmul_output.
    model.graph.node[0].output[1] = ""
    model.graph.node[0].output[2] = ""
    del model.graph.output[1:3]
    from op_harness import run_reference

    ours = run_onnxtrain(model, inputs)
    theirs = run_reference(model, inputs, reference)
    assert len(ours) == 2
    for a, b in zip(ours, theirs):
        np.testing.assert_allclose(a, b, **F32)


def test_attention_longer_sequences_blocks():
    # More query rows than one block (64), several threads' worth of tasks, head size 64.
    attention(qkv(b=1, hq=4, hkv=2, sq=70, skv=70, d=64, dv=64), {"is_causal": 1})
    attention(qkv(b=2, hq=2, hkv=2, sq=33, skv=129, d=32, dv=16))
    # The float32 product tiles' edges: key counts and value head sizes that are not
    # multiples of 16 or 32, query rows not of 4; 3-D output rows written in place.
    attention(qkv(b=1, hq=2, hkv=1, sq=131, skv=131, d=48, dv=40, three_d=True),
              {"is_causal": 1, "q_num_heads": 2, "kv_num_heads": 1})
    attention(qkv(b=1, hq=3, hkv=3, sq=67, skv=45, d=20, dv=7), {"scale": 0.3})


def test_attention_float16():
    attention(qkv(sq=5, skv=9, hq=4, hkv=2, dtype=np.float16), {"is_causal": 1}, rtol=2e-3, atol=2e-3)


def test_attention_float64():
    inputs = {**qkv(sq=5, skv=6, hq=4, hkv=2, dtype=np.float64), "mask": randn(5, 6, dtype=np.float64)}
    attention(inputs, {"softcap": 2.0}, reference="onnx.reference", rtol=1e-12, atol=1e-12)


def test_attention_nonpad_kv_seqlen_opset24():
    inputs = qkv(b=2, sq=3, skv=6)
    # A 4-D mask: onnx.reference fails to broadcast its padding mask into a 2-D bias.
    inputs |= {"mask": randn(2, 1, 3, 6), "past_key": None, "past_value": None,
               "lengths": np.array([4, 6], np.int64)}
    check_op("Attention", inputs, {}, opset=24, reference="onnx.reference", **F32)


@pytest.mark.parametrize("change, attrs, message", [
    (lambda f: f.update(k=randn(2, 4, 5, 6)), {}, r"K \[2, 4, 5, 6\] must have Q's head size 8"),
    (lambda f: f.update(k=randn(2, 3, 5, 8), v=randn(2, 3, 5, 8)), {},
     r"q_num_heads 4 must be a multiple of kv_num_heads 3"),
    (lambda f: f.update(mask=randn(3, 5)), {}, r"attn_mask \[3, 5\] must broadcast to"),
    (lambda f: f.update(mask=np.ones((5, 5), np.int32)), {}, r"attn_mask has element type int32, expected bool"),
    (lambda f: None, {"qk_matmul_output_mode": 4}, r"qk_matmul_output_mode is 4"),
    (lambda f: f.update(mask=None, past_key=randn(2, 4, 3, 8)), {}, r"past_key and past_value must be given together"),
])
def test_attention_rejects_bad_inputs(change, attrs, message):
    inputs = qkv(sq=5, skv=5)
    change(inputs)
    with pytest.raises((ValueError, RuntimeError), match=message):
        model = make_model("Attention", inputs, attrs, opset=23)
        run_onnxtrain(model, {k: v for k, v in inputs.items() if v is not None})


def test_attention_3d_needs_head_counts():
    inputs = qkv(three_d=True)
    with pytest.raises((ValueError, RuntimeError), match=r"3-D Q, K and V need the q_num_heads and kv_num_heads"):
        run_onnxtrain(make_model("Attention", inputs, {}, opset=23), inputs)


def test_attention_fully_masked_row_is_nan_as_the_reference():
    inputs = qkv(sq=3, skv=4, hq=2, hkv=2)
    mask = np.ones((3, 4), bool)
    mask[1] = False  # query 1 sees no key: softmax 0/0
    attention({**inputs, "mask": mask}, reference="onnx.reference")


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_attention_threads(threads):
    # Tasks (batch x heads x blocks of 64 query rows) shared among the threads as they come
    # (work_share.h): each thread keeps K^T of the last key/value head it packed.
    import onnxtrain

    from op_harness import run_reference

    options = onnxtrain.SessionOptions()
    options.intra_op_num_threads = threads
    for inputs, attrs in [(qkv(b=3, hq=4, hkv=2, sq=131, skv=131, d=64, dv=48), {"is_causal": 1}),
                          (qkv(b=2, hq=3, hkv=1, sq=70, skv=37, d=20, dv=7), {}),
                          (qkv(b=1, hq=1, hkv=1, sq=1, skv=5, d=8, dv=8), {})]:
        model = make_model("Attention", inputs, attrs, opset=23)
        session = onnxtrain.InferenceSession(model.SerializeToString(), sess_options=options)
        for _ in range(3):  # the helpers' buffers and packed keys reused
            np.testing.assert_allclose(session.run(None, inputs)[0], run_reference(model, inputs, "onnxruntime")[0],
                                       **F32)
