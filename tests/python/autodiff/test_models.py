"""Whole-model gradients against torch.autograd, and the same gradient models in stock
onnxruntime (portability) and in onnxtrain.

Each reference model of the engine issue, exported in training mode (dropout p=0; BatchNorm
on batch statistics), gets a scalar loss on top — mean softmax cross-entropy of the logits
against random labels, as a SoftmaxCrossEntropyLoss node — and every parameter's gradient
is compared with PyTorch's in float32: rtol 1e-4, atol 1e-6, except that atol is raised to
four times PyTorch's own float32 rounding error for that parameter (its largest difference
from the float64 gradient) where that is larger: in ResNet-18 the float32 noise of the
convolution weight gradients is ~1e-5, so no float32 implementation, PyTorch included,
meets atol 1e-6 against another.

Two differences from PyTorch are not the gradient's: rows of an nn.Embedding's
padding_idx get no gradient in PyTorch (an autograd special case the ONNX graph does not
carry), and the dynamo exporter merges equal initializers (see `prepared`).
"""

from __future__ import annotations

import copy
import functools

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

import onnxtrain
from models import build_model, get_case, is_sequence_model, parse_case_id

from .gradcheck import Unsupported, make_session

torch = pytest.importorskip("torch")

MODELS = ["mlp", "cnn", "resnet18", "gpt2", "bert"]
CASES = [f"{m}-torchscript-train" for m in MODELS] + [f"{m}-dynamo-train" for m in MODELS]
BATCH = 3
SEQ_LEN = 7
RTOL, ATOL = 1e-4, 1e-6
# Cases whose float32 forward, in onnxtrain, puts a ReLU input on the other side of 0 than
# PyTorch and onnxruntime do (one element of layer3.1 at 1e-6: within float32 noise of
# the kink); the gradient of everything before it then differs by up to 7%. The float64
# test below checks these models exactly.
KINK_SENSITIVE = {("resnet18-torchscript-train", "onnxtrain")}


def with_loss(model: onnx.ModelProto) -> onnx.ModelProto:
    """Adds `labels` (int64, the logits' shape without the class axis) and a scalar
    `loss` = mean cross-entropy of the logits (classes on the last axis)."""
    model = onnx.ModelProto.FromString(model.SerializeToString())
    graph = model.graph
    logits = graph.output[0].name
    rank = len(graph.output[0].type.tensor_type.shape.dim)
    label_dims = [d.dim_param or d.dim_value for d in graph.output[0].type.tensor_type.shape.dim][:-1]
    graph.input.append(helper.make_tensor_value_info("labels", onnx.TensorProto.INT64, label_dims))
    scores = logits
    if rank == 3:  # [batch, seq, classes] -> [batch, classes, seq]
        graph.node.append(helper.make_node("Transpose", [logits], ["scores"], perm=[0, 2, 1], name="loss/Transpose"))
        scores = "scores"
    graph.node.append(helper.make_node("SoftmaxCrossEntropyLoss", [scores, "labels"], ["loss"], name="loss/SCE"))
    graph.output.append(helper.make_tensor_value_info("loss", onnx.TensorProto.FLOAT, []))
    return model


@functools.cache
def prepared(cid: str):
    """The case's ONNX model with a loss, its feeds, the torch module with the ONNX
    weights, and the parameters to differentiate."""
    model_name, exporter, mode = parse_case_id(cid)
    case = get_case(cid)
    model = onnx.load(case.onnx_path)
    feeds = case.make_inputs(BATCH, 7, SEQ_LEN) if is_sequence_model(model_name) else case.make_inputs(BATCH, 7)
    spec = build_model(model_name, mode, exporter)
    module = spec.module
    params = dict(module.named_parameters())
    initializers = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    wrt = [name for name in initializers if name in params and tuple(params[name].shape) == initializers[name].shape]
    # The dynamo exporter merges equal initializers (every LayerNorm's ones and zeros): the
    # merged initializer's gradient sums over all its uses, not comparable with one
    # parameter's. Leave out parameters whose values another parameter repeats.
    wrt = [
        name
        for name in wrt
        if not any(
            other != name and p.shape == params[name].shape and torch.equal(p, params[name])
            for other, p in params.items()
        )
    ]
    with torch.no_grad():  # the torch module computes with exactly the ONNX weights
        for name in wrt:
            params[name].copy_(torch.from_numpy(np.array(initializers[name])))
    logits_shape = session_output_shape(model, feeds)
    classes = logits_shape[-1]
    labels = np.random.default_rng(3).integers(0, classes, logits_shape[:-1]).astype(np.int64)
    return with_loss(model), feeds, labels, module, wrt


def session_output_shape(model: onnx.ModelProto, feeds) -> tuple[int, ...]:
    import onnxruntime as ort

    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)[0].shape


def _backward(module, feeds, labels, dtype) -> dict[str, np.ndarray]:
    module = copy.deepcopy(module).to(dtype)
    module.zero_grad()
    inputs = [torch.from_numpy(v).to(dtype) if v.dtype.kind == "f" else torch.from_numpy(v) for v in feeds.values()]
    logits = module(*inputs)
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), torch.from_numpy(labels).reshape(-1))
    loss.backward()
    grads = {name: p.grad.numpy().copy() for name, p in module.named_parameters() if p.grad is not None}
    # nn.Embedding(padding_idx=i) drops row i's gradient in autograd; the exported graph is
    # a plain Gather, whose row i does get one. Compare the other rows.
    for prefix, sub in module.named_modules():
        if isinstance(sub, torch.nn.Embedding) and sub.padding_idx is not None:
            name = f"{prefix}.weight"
            if name in grads:
                grads[name] = np.delete(grads[name], sub.padding_idx, axis=0)
    return grads


@functools.cache
def torch_gradients(cid: str) -> dict[str, np.ndarray]:
    _, feeds, labels, module, wrt = prepared(cid)
    grads = _backward(module, feeds, labels, torch.float32)
    return {name: grads[name] for name in wrt if name in grads}


@functools.cache
def torch_noise(cid: str) -> dict[str, float]:
    """PyTorch's float32 rounding error per parameter: max |float32 - float64 gradient|."""
    _, feeds, labels, module, wrt = prepared(cid)
    exact = _backward(module, feeds, labels, torch.float64)
    return {name: float(np.max(np.abs(g.astype(np.float64) - exact[name]))) for name, g in torch_gradients(cid).items()}


def padding_rows(module) -> dict[str, int]:
    return {
        f"{prefix}.weight": sub.padding_idx
        for prefix, sub in module.named_modules()
        if isinstance(sub, torch.nn.Embedding) and sub.padding_idx is not None
    }


@functools.cache
def gradient_model(cid: str) -> onnx.ModelProto:
    model, _, _, _, wrt = prepared(cid)
    return onnxtrain.build_gradient_graph(model, wrt, "loss")


def run_gradients(cid: str, runtime: str) -> dict[str, np.ndarray]:
    model, feeds, labels, _, wrt = prepared(cid)
    grad_model = gradient_model(cid)
    run = make_session(grad_model, runtime)
    names = [o.name for o in grad_model.graph.output]
    return dict(zip(names, run({**feeds, "labels": labels})))


@pytest.mark.parametrize("cid", CASES)
def test_builds_every_parameter_gradient(cid: str) -> None:
    _, _, _, _, wrt = prepared(cid)
    outputs = {o.name for o in gradient_model(cid).graph.output}
    expected = set(torch_gradients(cid))
    assert expected, "no parameter of the torch module matches an initializer"
    assert {f"{n}_grad" for n in expected} <= outputs


@pytest.mark.parametrize("runtime", ["onnxruntime", "onnxtrain"])
@pytest.mark.parametrize("cid", CASES)
def test_gradients_match_torch(cid: str, runtime: str, request: pytest.FixtureRequest) -> None:
    if (cid, runtime) in KINK_SENSITIVE:
        request.applymarker(pytest.mark.xfail(reason="a ReLU input within float32 noise of 0", strict=False))
    try:
        ours = run_gradients(cid, runtime)
    except Unsupported as e:
        pytest.skip(f"{runtime} lacks a kernel: {str(e).splitlines()[0][:200]}")
    reference = torch_gradients(cid)
    noise = torch_noise(cid)
    skipped_rows = padding_rows(prepared(cid)[3])
    for name, expected in reference.items():
        actual = ours[f"{name}_grad"]
        if name in skipped_rows:
            actual = np.delete(actual, skipped_rows[name], axis=0)
        atol = max(ATOL, 4 * noise[name])
        np.testing.assert_allclose(actual, expected, rtol=RTOL, atol=atol, err_msg=f"{cid}: {name}")


@pytest.mark.parametrize("cid", CASES)
def test_onnxtrain_matches_onnxruntime(cid: str, request: pytest.FixtureRequest) -> None:
    """Portability: the same gradient model gives the same gradients in both runtimes."""
    if (cid, "onnxtrain") in KINK_SENSITIVE:
        request.applymarker(pytest.mark.xfail(reason="a ReLU input within float32 noise of 0", strict=False))
    try:
        ours = run_gradients(cid, "onnxtrain")
    except Unsupported as e:
        pytest.skip(f"onnxtrain lacks a kernel: {str(e).splitlines()[0][:200]}")
    theirs = run_gradients(cid, "onnxruntime")
    noise = torch_noise(cid)
    for name, value in theirs.items():
        # the same float32 noise allowance as against PyTorch (forward outputs: 1e-5)
        atol = max(ATOL, 4 * noise[name[: -len("_grad")]]) if name.endswith("_grad") and name[:-5] in noise else 1e-5
        np.testing.assert_allclose(ours[name], value, rtol=RTOL, atol=atol, err_msg=f"{cid}: {name}")


def to_float64(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model computing in float64: float inputs, outputs, initializers, constants and
    Cast targets."""
    model = onnx.ModelProto.FromString(model.SerializeToString())
    graph = model.graph
    for value in [*graph.input, *graph.output, *graph.value_info]:
        if value.type.tensor_type.elem_type == onnx.TensorProto.FLOAT:
            value.type.tensor_type.elem_type = onnx.TensorProto.DOUBLE
    for i, init in enumerate(graph.initializer):
        if init.data_type == onnx.TensorProto.FLOAT:
            graph.initializer[i].CopyFrom(numpy_helper.from_array(numpy_helper.to_array(init).astype(np.float64), init.name))
    for node in graph.node:
        for a in node.attribute:
            if a.name == "to" and a.i == onnx.TensorProto.FLOAT:
                a.i = onnx.TensorProto.DOUBLE
            if a.type == onnx.AttributeProto.TENSOR and a.t.data_type == onnx.TensorProto.FLOAT:
                a.t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(a.t).astype(np.float64), a.t.name))
    return model


@pytest.mark.parametrize("cid", CASES)
def test_float64_gradients_match_torch_on_onnxtrain(cid: str) -> None:
    """In float64 no ReLU input sits within rounding noise of its kink, so onnxtrain's
    gradients must match PyTorch's tightly: rtol 1e-5, atol 1e-6 of the gradient's scale.
    (Not tighter: the exported graphs hold constants rounded to float32, such as GELU's
    sqrt(2), which PyTorch's float64 run computes exactly.)"""
    model, feeds, labels, module, wrt = prepared(cid)
    grad_model = onnxtrain.build_gradient_graph(to_float64(model), wrt, "loss")
    try:
        run = make_session(grad_model, "onnxtrain")
    except Unsupported as e:
        pytest.skip(f"onnxtrain lacks a kernel: {str(e).splitlines()[0][:200]}")
    feeds64 = {k: v.astype(np.float64) if v.dtype == np.float32 else v for k, v in feeds.items()}
    ours = dict(zip([o.name for o in grad_model.graph.output], run({**feeds64, "labels": labels})))
    exact = _backward(module, feeds, labels, torch.float64)
    skipped_rows = padding_rows(module)
    for name in torch_gradients(cid):
        actual = ours[f"{name}_grad"]
        if name in skipped_rows:
            actual = np.delete(actual, skipped_rows[name], axis=0)
        scale = float(np.max(np.abs(exact[name]))) or 1.0
        np.testing.assert_allclose(actual, exact[name], rtol=1e-5, atol=1e-6 * scale + 1e-12, err_msg=f"{cid}: {name}")


@pytest.mark.parametrize("cid", CASES)
def test_gradient_model_is_valid_onnx(cid: str) -> None:
    """Plain ONNX: the checker with shape inference accepts the gradient model."""
    onnx.checker.check_model(gradient_model(cid), full_check=True)
