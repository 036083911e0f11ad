"""Training recurrent nets end to end against PyTorch: an LSTM next-token model (embedding →
LSTM → linear → cross-entropy) and a GRU classifier (GRU → last hidden state → linear),
exported by torch.onnx (TorchScript, opset 17), trained with generate_artifacts and the
training API for 100 steps of AdamW; every step's loss must match torch's within rtol 1e-4
in float64 and 1e-3 in float32. One thread on both sides."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from onnxtrain.training import artifacts  # noqa: E402
from onnxtrain.training.onnxblock import optim  # noqa: E402
from zoo.training import TrainingCase, _classification_batches, _export, _token_batches, _as_float64  # noqa: E402
from zoo.nets import GruClassifier, LstmLanguageModel  # noqa: E402
from zoo.training import torch_losses, train_artifacts, trainable_names  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")

STEPS = 100
LR = 1e-2
VOCAB = 24


def make_case(name: str, folder: Path, dtype: str) -> TrainingCase:
    torch.manual_seed(5)
    if name == "lstm-lm":
        module, batches, input_name = LstmLanguageModel(VOCAB), _token_batches(4, 10, VOCAB, seed=21), "input_ids"
    else:
        module, batches, input_name = GruClassifier(), _classification_batches((8, 7, 6), 5, seed=22), "x"
    if dtype == "float64":
        module = module.double()
        batches = _as_float64(batches)
    path = folder / f"{name}-{dtype}.onnx"
    _export(module, batches(1)[0][0], input_name, path)
    return TrainingCase(name, module, path, input_name, batches)


def onnxtrain_losses(case: TrainingCase, folder: Path) -> list[float]:
    artifacts.generate_artifacts(
        str(case.onnx_path), requires_grad=trainable_names(case), frozen_params=None,
        loss=artifacts.LossType.CrossEntropyLoss, optimizer=optim.AdamW(eps=1e-8, weight_decay=0.01, mode="torch"),
        artifact_directory=folder)
    return train_artifacts(folder, case.batches(STEPS), LR)[0]


@pytest.mark.filterwarnings("ignore:.*stay constants")
@pytest.mark.parametrize("dtype,rtol", [("float64", 1e-4), ("float32", 1e-3)])
@pytest.mark.parametrize("name", ["lstm-lm", "gru-classifier"])
def test_every_step_matches_pytorch(name: str, dtype: str, rtol: float, tmp_path: Path) -> None:
    case = make_case(name, tmp_path, dtype)
    names = trainable_names(case)
    assert any("lstm" in n or "gru" in n for n in names), names
    ours = onnxtrain_losses(case, tmp_path / "artifacts")
    theirs = torch_losses(case, lambda params: torch.optim.AdamW(params, lr=LR, weight_decay=0.01), STEPS)
    np.testing.assert_allclose(ours, theirs, rtol=rtol, atol=0)
    assert theirs[-1] < 0.85 * theirs[0]  # it trained, so the comparison means something


def test_ortmodule_stacked_bidirectional_lstm_and_gru() -> None:
    """ORTModule around a 2-layer bidirectional LSTM feeding a GRU: loss and every parameter's
    gradient as torch's (float64)."""
    import copy

    from onnxtrain.training.ortmodule import ORTModule

    class Stacked(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lstm = torch.nn.LSTM(5, 7, num_layers=2, batch_first=True, bidirectional=True)
            self.gru = torch.nn.GRU(14, 6)
            self.head = torch.nn.Linear(6, 3)

        def forward(self, x):  # type: ignore[no-untyped-def]
            y, _ = self.lstm(x)
            z, h = self.gru(y)
            return self.head(z).square().sum() + h.sum()

    torch.manual_seed(0)
    module = Stacked().double()
    reference = copy.deepcopy(module)
    x = torch.randn(3, 4, 5, dtype=torch.float64)
    ours = ORTModule(module)(x)
    ours.backward()
    theirs = reference(x)
    theirs.backward()
    np.testing.assert_allclose(float(ours), float(theirs), rtol=1e-8)
    for (name, p), (_, q) in zip(module.named_parameters(), reference.named_parameters()):
        np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=1e-9, atol=1e-12, err_msg=name)
