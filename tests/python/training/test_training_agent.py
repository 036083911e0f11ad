"""TrainingAgent and ModuleGraphBuilder: forward and backward as two partial runs of one
plan, checked against torch.autograd."""

import gc
import io

import numpy as np
import onnx
import pytest
import torch

from onnxtrain import OrtValue
from onnxtrain.training import ModuleGraphBuilder, TrainingAgent


def export(net, x, dtype=torch.float32):
    net = net.to(dtype)
    f = io.BytesIO()
    torch.onnx.export(net, (x.to(dtype),), f, input_names=["x"], output_names=["y"],
                      dynamic_axes={"x": {0: "batch"}}, dynamo=False, opset_version=17,
                      do_constant_folding=False)
    return onnx.load_from_string(f.getvalue())


def mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3), torch.nn.Sigmoid())


def torch_grads(net, x, dy):
    xr = x.clone().requires_grad_()
    y = net(xr)
    y.backward(dy)
    return y.detach(), {**{n: p.grad for n, p in net.named_parameters()}, "x": xr.grad}


def build(net, x, dtype=torch.float32, inputs_requiring_grad=("x",), output_type="numpy"):
    model = export(net, x, dtype)
    weights = [n for n, _ in net.named_parameters()]
    builder = ModuleGraphBuilder(model, weights, list(inputs_requiring_grad))
    builder.build()
    info = builder.get_graph_info()
    return TrainingAgent(builder.get_model(), info, output_type=output_type), info


def weight_feeds(net):
    return {n: p.detach().numpy() for n, p in net.named_parameters()}


@pytest.mark.parametrize("dtype,rtol", [(torch.float32, 1e-5), (torch.float64, 1e-12)])
def test_forward_and_backward_match_torch(dtype, rtol):
    net = mlp().to(dtype)
    x = torch.randn(5, 4, dtype=dtype)
    dy = torch.randn(5, 3, dtype=dtype)
    agent, info = build(net, x, dtype)
    assert info.user_input_names == ["x"]
    assert info.output_grad_names == ["y_grad"]
    outputs, state = agent.run_forward({"x": x.numpy(), **weight_feeds(net)})
    assert state.backward_pending
    grads = agent.run_backward({"y_grad": dy.numpy()}, state)
    assert not state.backward_pending
    y, expected = torch_grads(net, x, dy)
    np.testing.assert_allclose(outputs[0], y.numpy(), rtol=rtol, atol=rtol)
    assert set(grads) == set(expected)
    for name, g in expected.items():
        np.testing.assert_allclose(grads[name], g.numpy(), rtol=rtol, atol=rtol, err_msg=name)


def test_pending_forwards_each_keep_their_state():
    net = mlp()
    agent, _ = build(net, torch.randn(2, 4), output_type="torch")
    batches = [torch.randn(b, 4) for b in (5, 5, 7)]
    dys = [torch.randn(b.shape[0], 3) for b in batches]
    # Three forwards in flight (two of the same shape, which share a memory plan), then the
    # backwards in another order; repeated so that later rounds run from the recorded plans.
    for _ in range(3):
        states = [agent.run_forward({"x": b, **weight_feeds(net)})[1] for b in batches]
        for i in (1, 2, 0):
            grads = agent.run_backward({"y_grad": dys[i]}, states[i])
            _, expected = torch_grads(net, batches[i], dys[i])
            net.zero_grad()
            for name, g in expected.items():
                torch.testing.assert_close(grads[name], g, rtol=1e-5, atol=1e-6)


def test_dropped_state_and_forward_only_runs_need_no_gradients():
    net = mlp()
    agent, _ = build(net, torch.randn(2, 4))
    x = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    for _ in range(3):  # a forward whose backward never comes: no 'y_grad' needed, nothing leaks
        outputs, state = agent.run_forward({"x": x, **weight_feeds(net)})
        del state
    y, _ = torch_grads(net, torch.from_numpy(x), torch.ones(3, 3))
    np.testing.assert_allclose(outputs[0], y.numpy(), rtol=1e-6)


def test_state_keeps_the_feeds_the_backward_reads():
    net = mlp()
    agent, _ = build(net, torch.randn(2, 4))
    x = torch.randn(6, 4)
    feeds = {"x": x.numpy().copy(), **{n: v.copy() for n, v in weight_feeds(net).items()}}
    _, state = agent.run_forward(feeds)
    del feeds
    gc.collect()
    np.random.default_rng(1).standard_normal((1000, 1000))  # reuse the freed memory, if it were freed
    dy = torch.randn(6, 3)
    grads = agent.run_backward({"y_grad": dy.numpy()}, state)
    _, expected = torch_grads(net, x, dy)
    for name, g in expected.items():
        np.testing.assert_allclose(grads[name], g.numpy(), rtol=1e-5, atol=1e-6)


def test_inputs_as_ortvalues_and_torch_tensors():
    net = mlp()
    agent, _ = build(net, torch.randn(2, 4), inputs_requiring_grad=())
    x = torch.randn(4, 4)
    weights = {n: OrtValue.ortvalue_from_numpy(v) for n, v in weight_feeds(net).items()}
    outputs, state = agent.run_forward({"x": x, **weights})
    grads = agent.run_backward({"y_grad": torch.ones(4, 3)}, state)
    assert "x" not in grads
    _, expected = torch_grads(net, x, torch.ones(4, 3))
    np.testing.assert_allclose(grads["0.weight"], expected["0.weight"].numpy(), rtol=1e-5, atol=1e-6)


def test_bad_runs_get_clear_errors():
    net = mlp()
    agent, _ = build(net, torch.randn(2, 4))
    feeds = {"x": np.zeros((5, 4), np.float32), **weight_feeds(net)}
    _, state = agent.run_forward(feeds)
    with pytest.raises(ValueError, match="'y_grad'.*dimension 0 \\('batch'\\) is 4, but another input gave 'batch' = 5"):
        agent.run_backward({"y_grad": np.zeros((4, 3), np.float32)}, state)
    _, state = agent.run_forward(feeds)
    with pytest.raises(ValueError, match="input 'y_grad' .* is missing from stage 1"):
        agent.run_backward({}, state)
    _, state = agent.run_forward(feeds)
    with pytest.raises(ValueError, match="'x' was fed to an earlier stage"):
        agent.run_backward({"y_grad": np.zeros((5, 3), np.float32), "x": feeds["x"]}, state)
    _, state = agent.run_forward(feeds)
    agent.run_backward({"y_grad": np.zeros((5, 3), np.float32)}, state)
    with pytest.raises(ValueError, match="released"):
        agent.run_backward({"y_grad": np.zeros((5, 3), np.float32)}, state)
    with pytest.raises(ValueError, match="input 'x' .* is missing from stage 0"):
        agent.run_forward(weight_feeds(net))
    with pytest.raises(ValueError, match="weights \\['nope'\\] are neither"):
        ModuleGraphBuilder(export(net, torch.randn(2, 4)), ["nope"]).build()
    with pytest.raises(RuntimeError, match="call build"):
        ModuleGraphBuilder(export(net, torch.randn(2, 4)), []).get_model()


def test_inference_model_runs_in_onnxruntime():
    ort = pytest.importorskip("onnxruntime")
    net = mlp()
    builder = ModuleGraphBuilder(export(net, torch.randn(2, 4)), [n for n, _ in net.named_parameters()], ["x"])
    builder.build()
    x = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    for model in (builder.get_inference_optimized_model(), builder.get_model()):
        session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        feeds = {"x": x, **weight_feeds(net)}
        if any(i.name == "y_grad" for i in session.get_inputs()):
            feeds["y_grad"] = np.ones((3, 3), np.float32)
        y = session.run(["y"], feeds)[0]
        np.testing.assert_allclose(y, net(torch.from_numpy(x)).detach().numpy(), rtol=1e-5, atol=1e-6)


def test_profiling_times_the_forward_and_the_backward(tmp_path):
    import json

    from onnxtrain import SessionOptions

    net = mlp()
    x = torch.randn(5, 4)
    model = export(net, x)
    builder = ModuleGraphBuilder(model, [n for n, _ in net.named_parameters()], ["x"])
    builder.build()
    options = SessionOptions()
    options.enable_profiling = True
    options.profile_file_prefix = str(tmp_path / "agent")
    agent = TrainingAgent(builder.get_model(), builder.get_graph_info(), sess_options=options)
    for _ in range(2):
        _, state = agent.run_forward({"x": x.numpy(), **weight_feeds(net)})
        agent.run_backward({"y_grad": np.ones((5, 3), np.float32)}, state)
    path = agent.end_profiling()
    assert path.startswith(str(tmp_path / "agent"))
    events = json.load(open(path))
    events = events["traceEvents"] if isinstance(events, dict) else events
    assert sum(e["name"] == "model_run" for e in events) == 4  # two forwards, two backwards
    ops = {e["args"]["op_name"] for e in events if e.get("cat") == "Node"}
    assert {"Gemm", "Tanh", "TanhGrad", "SigmoidGrad"} <= ops, ops
    with pytest.raises(TypeError, match="SessionOptions"):
        TrainingAgent(builder.get_model(), builder.get_graph_info(), sess_options={"enable_profiling": True})
    assert build(net, x)[0].end_profiling() == ""  # not profiling
