"""`onnxtrain train`: the built-in digits job end to end, and a user's artifacts on an .npz."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import onnxruntime
import pytest

from onnxtrain.training import artifacts
from onnxtrain.training.train_cli import digits_cnn, main

pytestmark = pytest.mark.filterwarnings("ignore:.*stay constants")


def test_digits_job_reaches_95_percent_held_out(tmp_path, capsys):
    assert main(["--out", str(tmp_path), "--threads", "1", "--epochs", "15"]) == 0
    printed = capsys.readouterr().out
    assert "epoch  15/15" in printed and "samples/s" in printed and "accuracy" in printed
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["held_out_accuracy"] >= 0.95, summary
    assert (tmp_path / "loss_curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # The exported model is plain ONNX: onnxruntime gives the same held-out accuracy.
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    images = (digits.images / 16.0).astype(np.float32).reshape(-1, 1, 8, 8)
    _, x_test, _, y_test = train_test_split(images, digits.target, test_size=0.2, random_state=0,
                                            stratify=digits.target)
    logits = onnxruntime.InferenceSession(str(tmp_path / "inference.onnx")).run(None, {"image": x_test})[0]
    assert np.mean(np.argmax(logits, axis=1) == y_test) == pytest.approx(summary["held_out_accuracy"])


def test_user_artifacts_on_an_npz(tmp_path, capsys):
    model = digits_cnn(seed=1)
    artifacts.generate_artifacts(model, requires_grad=[i.name for i in model.graph.initializer],
                                 loss=artifacts.LossType.CrossEntropyLoss, optimizer=artifacts.OptimType.SGD,
                                 artifact_directory=tmp_path)
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "data.npz", pixels=rng.random((64, 1, 8, 8), dtype=np.float32),
             labels=rng.integers(0, 10, 64))
    before = (tmp_path / "checkpoint").read_bytes()
    code = main(["--artifacts", str(tmp_path), "--data", str(tmp_path / "data.npz"), "--map", "image=pixels",
                 "--epochs", "2", "--batch-size", "16", "--lr", "0.1", "--loss-curve", str(tmp_path / "c.png")])
    assert code == 0
    assert (tmp_path / "checkpoint").read_bytes() != before and (tmp_path / "c.png").exists()
    assert "epoch   2/2" in capsys.readouterr().out

    assert main(["--artifacts", str(tmp_path), "--data", str(tmp_path / "data.npz")]) == 1
    assert "no array 'image'" in capsys.readouterr().err
    assert main(["--artifacts", str(tmp_path), "--data", str(tmp_path / "missing.npz")]) == 1
    assert "missing.npz does not exist" in capsys.readouterr().err


def test_console_script_dispatches_train(tmp_path):
    result = subprocess.run([sys.executable, "-m", "onnxtrain._cli", "train", "--help"], capture_output=True,
                            text=True)
    assert result.returncode == 0 and "--artifacts" in result.stdout
