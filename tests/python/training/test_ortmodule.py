"""ORTModule against torch.autograd: forward outputs, every gradient, training loops with
torch.optim, and the behaviours around them (re-export, eval, no_grad, fallback, state)."""

import copy
import os
import pickle
import warnings

import numpy as np
import onnx
import pytest
import torch

from onnxtrain.training.ortmodule import DebugOptions, ORTModule

warnings.filterwarnings("ignore", category=DeprecationWarning)
transformers = pytest.importorskip("transformers")


def mlp(dtype=torch.float32):
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(6, 16), torch.nn.ReLU(), torch.nn.Linear(16, 16), torch.nn.GELU(), torch.nn.Linear(16, 4)
    ).to(dtype)


def assert_grads_match(module, reference, rtol, atol=None):
    atol = rtol if atol is None else atol
    for (name, p), q in zip(module.named_parameters(), reference.parameters()):
        assert (p.grad is None) == (q.grad is None), name
        if p.grad is not None:
            torch.testing.assert_close(p.grad, q.grad, rtol=rtol, atol=atol, msg=name)


def compare(module, call, rtol, atol=None):
    """Runs `call(model)` on ORTModule(module) and on a copy in torch; compares the outputs
    (first leaf: a loss or logits) and every gradient after backward of their sum."""
    reference = copy.deepcopy(module)
    wrapped = ORTModule(module)
    ours, theirs = call(wrapped), call(reference)
    ours_flat = [t for t in torch.utils._pytree.tree_leaves(ours) if isinstance(t, torch.Tensor)]
    theirs_flat = [t for t in torch.utils._pytree.tree_leaves(theirs) if isinstance(t, torch.Tensor)]
    assert len(ours_flat) == len(theirs_flat)
    for a, b in zip(ours_flat, theirs_flat):
        torch.testing.assert_close(a, b, rtol=rtol, atol=rtol if atol is None else atol)
    sum(t.float().sum() for t in ours_flat if t.requires_grad).backward()
    sum(t.float().sum() for t in theirs_flat if t.requires_grad).backward()
    assert_grads_match(module, reference, rtol, atol)
    assert wrapped.runs_in_onnxtrain, wrapped.fallback_reason
    return wrapped, reference


@pytest.mark.parametrize("dtype,rtol", [(torch.float32, 1e-4), (torch.float64, 1e-9)])
def test_mlp_forward_and_gradients(dtype, rtol):
    x = torch.randn(8, 6, dtype=dtype)
    compare(mlp(dtype), lambda m: m(x), rtol)


@pytest.mark.parametrize("dtype,rtol", [(torch.float32, 1e-3), (torch.float64, 1e-8)])
def test_adamw_training_follows_torch(dtype, rtol):
    ours_module = mlp(dtype)
    theirs = copy.deepcopy(ours_module)
    ours = ORTModule(ours_module)
    optimizers = [torch.optim.AdamW(m.parameters(), lr=1e-2) for m in (ours, theirs)]
    generator = torch.Generator().manual_seed(1)
    for step in range(100):
        x = torch.randn(16, 6, dtype=dtype, generator=generator)
        target = torch.randint(0, 4, (16,), generator=generator)
        losses = []
        for model, optimizer in zip((ours, theirs), optimizers):
            optimizer.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(x), target)
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
        np.testing.assert_allclose(losses[0], losses[1], rtol=rtol, err_msg=f"step {step}")
    assert ours.export_count == 1


def test_gpt2_lm_head():
    config = transformers.GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=300, n_positions=64,
                                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    torch.manual_seed(0)
    ids = torch.randint(0, 300, (2, 16))
    wrapped, _ = compare(transformers.GPT2LMHeadModel(config), lambda m: m(input_ids=ids, labels=ids).loss, 1e-4)
    # Hugging Face's mask code turns shapes into Python values while tracing (the tracer
    # warns): that export holds for its shapes only, and a new sequence length exports again.
    other = torch.randint(0, 300, (3, 9))
    out = wrapped(input_ids=other, labels=other)
    assert out.logits.shape == (3, 9, 300)
    assert wrapped.export_count == 2
    wrapped(input_ids=ids, labels=ids)
    assert wrapped.export_count == 2


def test_bert_for_sequence_classification():
    config = transformers.BertConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, intermediate_size=128,
                                     vocab_size=300, max_position_embeddings=64, hidden_dropout_prob=0.0,
                                     attention_probs_dropout_prob=0.0, num_labels=3)
    torch.manual_seed(0)
    ids = torch.randint(0, 300, (2, 12))
    mask = torch.ones(2, 12, dtype=torch.int64)
    mask[1, 8:] = 0
    labels = torch.tensor([0, 2])
    compare(transformers.BertForSequenceClassification(config),
            lambda m: m(input_ids=ids, attention_mask=mask, labels=labels).loss, 1e-4)


def test_resnet18_with_batch_norm_statistics():
    torchvision = pytest.importorskip("torchvision")
    torch.manual_seed(0)
    x = torch.randn(4, 3, 64, 64, dtype=torch.float64)
    module = torchvision.models.resnet18(num_classes=10).double()
    wrapped, reference = compare(module, lambda m: m(x), 1e-9)
    for (name, a), b in zip(wrapped.named_buffers(), reference.buffers()):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-9, msg=name)
    wrapped.eval()
    reference.eval()
    with torch.no_grad():
        torch.testing.assert_close(wrapped(x), reference(x), rtol=1e-9, atol=1e-9)
    # A frozen BatchNorm (eval inside a training module) is a new schema and stays frozen.
    wrapped.train()
    reference.train()
    module.bn1.eval()
    reference.bn1.eval()
    wrapped(x).sum().backward()
    reference(x).sum().backward()
    assert not module.bn1.training and module.layer1.training
    assert_grads_match(module, reference, 1e-9)


class KeywordModule(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(4, 3)
        self.b = torch.nn.Linear(4, 3)

    def forward(self, x, y=None, scale=1.0, mode="sum"):
        out = {"first": self.a(x) * scale}
        if y is not None:
            out["second"] = self.b(y) if mode == "sum" else -self.b(y)
        out["tag"] = mode
        return out


def test_keywords_none_scalars_and_dict_outputs():
    x, y = torch.randn(5, 4), torch.randn(5, 4)
    wrapped, _ = compare(KeywordModule(), lambda m: m(x, y=y, scale=2.0), 1e-5)
    out = wrapped(x, y=y, scale=2.0)
    assert set(out) == {"first", "second", "tag"} and out["tag"] == "sum"
    # Each change of schema is a new export, and gives what torch gives.
    reference = wrapped.module
    for kwargs in ({"scale": 2.0}, {"y": y, "scale": 3.0}, {"y": y, "scale": 3.0, "mode": "neg"}):
        before = wrapped.export_count
        got = wrapped(x, **kwargs)
        assert wrapped.export_count == before + 1
        expected = reference(x, **kwargs)
        for key in expected:
            if isinstance(expected[key], torch.Tensor):
                torch.testing.assert_close(got[key], expected[key])


def test_input_that_requires_grad():
    x = torch.randn(4, 6, requires_grad=True)
    x_ref = x.detach().clone().requires_grad_()
    module = mlp()
    reference = copy.deepcopy(module)
    wrapped = ORTModule(module)
    wrapped(x).pow(2).sum().backward()
    reference(x_ref).pow(2).sum().backward()
    torch.testing.assert_close(x.grad, x_ref.grad, rtol=1e-4, atol=1e-6)
    assert_grads_match(module, reference, 1e-4)
    # An input that starts or stops requiring grad is a new schema (ORT 1.19.2 missed it).
    x2 = torch.randn(4, 6)
    wrapped(x2).sum().backward()
    assert wrapped.export_count == 2


def test_two_forwards_before_one_backward():
    module = mlp()
    reference = copy.deepcopy(module)
    wrapped = ORTModule(module)
    a, b = torch.randn(3, 6), torch.randn(7, 6)
    (wrapped(a).sum() * 2 + wrapped(b).pow(2).mean()).backward()
    (reference(a).sum() * 2 + reference(b).pow(2).mean()).backward()
    assert_grads_match(module, reference, 1e-4, 1e-6)
    assert wrapped.export_count == 1  # a new batch size is not a new export


def test_a_new_input_dtype_exports_again():
    module = mlp()
    wrapped = ORTModule(module)
    wrapped(torch.randn(3, 6)).sum().backward()
    module.double()
    x = torch.randn(3, 6, dtype=torch.float64)
    out = wrapped(x)
    assert out.dtype == torch.float64 and wrapped.export_count == 2
    torch.testing.assert_close(out, module(x), rtol=1e-12, atol=1e-12)


class InverseErf(torch.nn.Module):
    """erfinv, exported (through a symbolic the test registers) as an op of a domain no
    runtime knows: an op onnxtrain has no kernel for."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)

    def forward(self, x):
        return torch.special.erfinv(0.5 * torch.tanh(self.fc(x)))


def test_an_op_onnxtrain_cannot_run_falls_back_with_its_name(monkeypatch):
    monkeypatch.delenv("ORTMODULE_FALLBACK_POLICY", raising=False)
    torch.onnx.register_custom_op_symbolic("aten::erfinv", lambda g, x: g.op("test.unknown::InverseErf", x), 9)
    try:
        module = InverseErf()
        wrapped = ORTModule(module)
        x = torch.randn(3, 4)
        with pytest.warns(UserWarning, match="InverseErf"):
            out = wrapped(x)
        torch.testing.assert_close(out, module(x))
        assert "InverseErf" in wrapped.fallback_reason
    finally:
        torch.onnx.unregister_custom_op_symbolic("aten::erfinv", 9)


def test_gradient_accumulation_and_dropped_graphs():
    module = mlp()
    reference = copy.deepcopy(module)
    wrapped = ORTModule(module)
    for _ in range(3):
        wrapped(torch.randn(2, 6))  # a forward whose backward never comes
    batches = [torch.randn(4, 6) for _ in range(3)]
    for batch in batches:
        wrapped(batch).sum().backward()
        reference(batch).sum().backward()
    assert_grads_match(module, reference, 1e-4, 1e-6)


def test_eval_and_no_grad_run_the_inference_graph():
    module = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Dropout(0.5), torch.nn.Linear(8, 2))
    wrapped = ORTModule(module)
    x = torch.randn(5, 6)
    wrapped.eval()
    assert not module.training
    with torch.no_grad():
        out = wrapped(x)
    assert not out.requires_grad
    torch.testing.assert_close(out, module(x).detach())
    wrapped.train()
    assert module.training
    with torch.no_grad():
        dropped = wrapped(x)
    assert dropped.shape == (5, 2)
    assert wrapped.export_count == 2


def test_parameters_are_read_every_call():
    module = mlp()
    wrapped = ORTModule(module)
    x = torch.randn(3, 6)
    wrapped(x)
    state = copy.deepcopy(module.state_dict())
    assert list(wrapped.state_dict()) == list(module.state_dict())
    assert [n for n, _ in wrapped.named_parameters()] == [n for n, _ in module.named_parameters()]
    with torch.no_grad():
        module[0].weight.mul_(2)  # in place
    torch.testing.assert_close(wrapped(x), module(x))
    module[2].weight.data = torch.randn(16, 16)  # .data replaced
    torch.testing.assert_close(wrapped(x), module(x))
    wrapped.load_state_dict(state)
    torch.testing.assert_close(wrapped(x), module(x))
    module[0].weight = torch.nn.Parameter(torch.randn(16, 7))  # another shape: a clear error
    with pytest.raises(ValueError, match="'0.weight'.*dimension 1 is 7, expected 6"):
        wrapped(x)


def test_structure_changes_between_calls_are_seen():
    """What ORTModule keeps of the module between calls (parameters, buffers, trainable
    names, modes) follows a replaced submodule, a requires_grad change and a mode change."""
    module = mlp()
    wrapped = ORTModule(module)
    x = torch.randn(3, 6)
    wrapped(x).sum().backward()
    module[2] = torch.nn.Linear(16, 16)  # a new submodule, new weights
    module.zero_grad(set_to_none=True)
    out = wrapped(x)
    torch.testing.assert_close(out, module(x))
    out.sum().backward()
    assert module[2].weight.grad is not None
    reference = copy.deepcopy(module)
    module[0].weight.requires_grad_(False)  # frozen: no gradient, the others still right
    reference[0].weight.requires_grad_(False)
    module.zero_grad(set_to_none=True)
    wrapped(x).sum().backward()
    reference(x).sum().backward()
    assert module[0].weight.grad is None
    assert_grads_match(module, reference, 1e-4, 1e-6)
    exports = wrapped.export_count
    module[3].training = False  # one submodule's mode, set directly: a new schema
    wrapped(x)
    assert wrapped.export_count == exports + 1


def test_profile_prefix_writes_the_engines_profiles(tmp_path):
    import json

    wrapped = ORTModule(mlp(), DebugOptions(profile_prefix=str(tmp_path / "step")))
    for _ in range(2):
        wrapped(torch.randn(3, 6)).sum().backward()
    path, = wrapped.end_profiling()
    assert os.path.basename(path).startswith("step_training")
    events = json.load(open(path))
    events = events["traceEvents"] if isinstance(events, dict) else events
    assert sum(e["name"] == "model_run" for e in events) == 4  # two forwards, two backwards
    assert ORTModule(mlp()).end_profiling() == []


def test_deepcopy_and_pickle():
    wrapped = ORTModule(mlp())
    x = torch.randn(3, 6)
    expected = wrapped(x).detach()
    for clone in (copy.deepcopy(wrapped), pickle.loads(pickle.dumps(wrapped))):
        torch.testing.assert_close(clone(x), expected)
        assert clone.runs_in_onnxtrain


class Unexportable(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(3, 3)

    def forward(self, x):
        return torch.linalg.eigvals(self.fc(x)).real


def test_fallback_warns_once_and_runs_torch(monkeypatch):
    monkeypatch.delenv("ORTMODULE_FALLBACK_POLICY", raising=False)
    module = Unexportable()
    wrapped = ORTModule(module)
    x = torch.randn(3, 3)
    with pytest.warns(UserWarning, match="falls back to running the module in PyTorch: torch.onnx.export failed"):
        out = wrapped(x)
    assert not wrapped.runs_in_onnxtrain and "eigvals" in wrapped.fallback_reason
    torch.testing.assert_close(out, module(x))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        wrapped(x)  # no second warning


def test_fallback_disabled_raises(monkeypatch):
    monkeypatch.setenv("ORTMODULE_FALLBACK_POLICY", "FALLBACK_DISABLE")
    with pytest.raises(RuntimeError, match="torch.onnx.export failed.*fallback disabled"):
        ORTModule(Unexportable())(torch.randn(3, 3))
    monkeypatch.setenv("ORTMODULE_FALLBACK_POLICY", "FALLBACK_NOPE")
    with pytest.raises(ValueError, match="unknown policy 'FALLBACK_NOPE'"):
        ORTModule(mlp())


def test_inputs_on_another_device_fall_back(monkeypatch):
    monkeypatch.delenv("ORTMODULE_FALLBACK_POLICY", raising=False)
    module = torch.nn.Linear(3, 2).to("meta")
    wrapped = ORTModule(module)
    with pytest.warns(UserWarning, match="device 'meta'"):
        out = wrapped(torch.empty(4, 3, device="meta"))
    assert out.shape == (4, 2)


def test_saved_graphs_load_in_onnxruntime(tmp_path):
    ort = pytest.importorskip("onnxruntime")
    prefix = str(tmp_path / "mlp")
    wrapped = ORTModule(mlp(), DebugOptions(save_onnx=True, onnx_prefix=prefix))
    x = torch.randn(3, 6)
    wrapped(x).sum().backward()
    for suffix in ("torch_exported_training", "pre_grad_optimized_training", "training"):
        path = f"{prefix}_{suffix}.onnx"
        onnx.checker.check_model(path)
        session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        feeds = {"input_0": x.numpy(), **{n: p.detach().numpy() for n, p in wrapped.named_parameters()}}
        names = {i.name for i in session.get_inputs()}
        feeds = {k: v for k, v in feeds.items() if k in names}
        for i in session.get_inputs():
            if i.name not in feeds:
                feeds[i.name] = np.ones((3, 4), np.float32)  # the output gradient
        first = session.run(None, feeds)[0]
        torch.testing.assert_close(torch.from_numpy(first), wrapped.module(x).detach(), rtol=1e-5, atol=1e-6)


def test_threads_of_torch_unchanged():
    before = torch.get_num_threads()
    wrapped = ORTModule(mlp())
    wrapped(torch.randn(3, 6)).sum().backward()
    assert torch.get_num_threads() == before


def test_distributed_data_parallel_matches_one_process(tmp_path):
    import subprocess
    import sys

    script = os.path.join(os.path.dirname(__file__), "ddp_ortmodule.py")
    result = subprocess.run([sys.executable, script, str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "gradients equal" in result.stdout


class LanguageModelWithLoss(torch.nn.Module):
    """GPT-2 with the loss inline, in the three forms users write it."""

    def __init__(self, model, vocab, form):
        super().__init__()
        self.model = model
        self.vocab = vocab
        self.form = form
        self.loss = torch.nn.CrossEntropyLoss()

    def forward(self, ids, labels):
        logits = self.model(input_ids=ids).logits
        if self.form == "inline":
            return torch.nn.CrossEntropyLoss()(logits.view(-1, self.vocab), labels.view(-1))
        if self.form == "functional":
            return torch.nn.functional.cross_entropy(logits.view(-1, self.vocab), labels.view(-1))
        return self.loss(logits.view(-1, self.vocab), labels.view(-1))


@pytest.mark.parametrize("form", ["inline", "functional", "submodule"])
def test_label_sparsity_gives_the_dense_loss_and_gradients(form, monkeypatch):
    monkeypatch.delenv("ORTMODULE_ENABLE_LABEL_SPARSE_OPTIMIZER", raising=False)
    vocab = 200
    config = transformers.GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=vocab, n_positions=32,
                                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    torch.manual_seed(0)
    base = LanguageModelWithLoss(transformers.GPT2LMHeadModel(config), vocab, form).double()
    ids = torch.randint(0, vocab, (3, 16))
    labels = ids.clone()
    labels[:, ::2] = -100
    labels[2, 5:] = -100  # about 40 % valid
    results = []
    for enabled in (True, False):
        module = copy.deepcopy(base)
        wrapped = ORTModule(module, label_sparsity=enabled)
        loss = wrapped(ids, labels)
        loss.backward()
        graph = wrapped.exported_graphs()[0]
        assert bool(graph.sparse_losses) == enabled
        if enabled:
            assert graph.sparse_losses[0].before_matmul and graph.sparse_losses[0].density < 0.5
        results.append((loss.detach(), [p.grad for p in module.parameters()]))
    # The pass changes nothing but the rows computed: sparse and dense agree to rounding.
    (sparse_loss, sparse_grads), (dense_loss, dense_grads) = results
    torch.testing.assert_close(sparse_loss, dense_loss, rtol=1e-12, atol=0)
    for a, b in zip(sparse_grads, dense_grads):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-14)
    # And both follow torch (Hugging Face's GPT-2 graph keeps some float32 constants, hence
    # not float64's full precision).
    reference = copy.deepcopy(base)
    expected = reference(ids, labels)
    expected.backward()
    torch.testing.assert_close(dense_loss, expected.detach(), rtol=1e-7, atol=0)
    for g, p in zip(dense_grads, reference.parameters()):
        torch.testing.assert_close(g, p.grad, rtol=1e-5, atol=1e-8)


def test_label_sparsity_switched_off_by_the_environment(monkeypatch):
    vocab = 50
    config = transformers.GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=vocab, n_positions=16)
    ids = torch.randint(0, vocab, (2, 8))
    labels = torch.full((2, 8), -100)
    labels[0, 0] = 3
    for variable in ("ORTMODULE_ENABLE_LABEL_SPARSE_OPTIMIZER", "ORTMODULE_ENABLE_COMPUTE_OPTIMIZER"):
        monkeypatch.setenv(variable, "0")
        wrapped = ORTModule(LanguageModelWithLoss(transformers.GPT2LMHeadModel(config), vocab, "inline"))
        wrapped(ids, labels).backward()
        assert not wrapped.exported_graphs()[0].sparse_losses
        monkeypatch.delenv(variable)
