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
    # The numbers behind the picture: every step's loss and its smoothed line, each epoch's
    # held-out accuracy (measured on the eval model; the last equals the exported model's).
    assert len(summary["step_losses"]) == len(summary["step_losses_smoothed"]) == summary["steps"]
    assert summary["steps"] == 15 * summary["steps_per_epoch"]
    epochs = summary["epochs"]
    assert [e["epoch"] for e in epochs] == list(range(1, 16))
    assert epochs[-1]["held_out_accuracy"] == pytest.approx(summary["held_out_accuracy"])
    assert epochs[0]["held_out_accuracy"] < epochs[-1]["held_out_accuracy"]
    assert "held-out" in printed
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


def test_smoothed_is_a_bias_corrected_moving_average() -> None:
    from onnxtrain.training.train_cli import smoothed

    assert smoothed([2.0, 2.0, 2.0]) == pytest.approx([2.0, 2.0, 2.0])
    values = [1.0, 0.0, 1.0, 0.0]
    weight, average, expected = 0.5, 0.0, []
    for step, value in enumerate(values, start=1):
        average = weight * average + (1 - weight) * value
        expected.append(average / (1 - weight**step))
    assert smoothed(values, weight) == pytest.approx(expected)


def test_console_script_dispatches_train(tmp_path):
    result = subprocess.run([sys.executable, "-m", "onnxtrain._cli", "train", "--help"], capture_output=True,
                            text=True)
    assert result.returncode == 0 and "--artifacts" in result.stdout


def _cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "onnxtrain", *args], capture_output=True, text=True, timeout=120,
                          env=env)


def test_help_lists_every_command_and_version() -> None:
    import onnxtrain
    from onnxtrain._cli import COMMANDS

    helped = _cli("--help")
    assert helped.returncode == 0
    for command in ("inspect", "gen-artifacts", "train"):
        assert command in COMMANDS and f"  {command} " in helped.stdout, helped.stdout
    version = _cli("--version")
    assert version.returncode == 0 and version.stdout.strip() == f"onnxtrain {onnxtrain.__version__}"


def test_unknown_flags_and_commands_are_errors() -> None:
    unknown_global = _cli("--frobnicate", "inspect", "m.onnx")
    assert unknown_global.returncode == 2 and "unrecognized arguments: --frobnicate" in unknown_global.stderr
    unknown_command = _cli("frobnicate")
    assert unknown_command.returncode == 2 and "invalid choice: 'frobnicate'" in unknown_command.stderr
    no_command = _cli()
    assert no_command.returncode == 2 and "COMMAND" in no_command.stderr
    train_flag = _cli("train", "--epochz", "3")
    assert train_flag.returncode == 2 and "unrecognized arguments: --epochz" in train_flag.stderr


def test_per_command_help_and_flags_reach_the_cpp_tool(tmp_path) -> None:
    from onnxtrain._cli import executable

    if not executable().exists():
        pytest.skip("the onnxtrain command-line tool is not built beside this package")
    helped = _cli("inspect", "--help")
    assert helped.returncode == 0 and "usage: onnxtrain inspect MODEL.onnx" in helped.stdout, helped
    assert "gen-artifacts" not in helped.stderr
    wrong = _cli("inspect", "--shapes", "model.onnx")
    assert wrong.returncode == 1 and "unknown option --shapes" in wrong.stderr
    generate = _cli("gen-artifacts", "--help")
    assert generate.returncode == 0 and "--clip-grad-norm" in generate.stdout
    model = digits_cnn(seed=0)
    import onnx

    onnx.save(model, tmp_path / "model.onnx")
    shown = _cli("inspect", str(tmp_path / "model.onnx"))
    assert shown.returncode == 0 and "ops without a kernel: none" in shown.stdout
    tool_help = subprocess.run([str(executable()), "--help"], capture_output=True, text=True, timeout=60)
    assert tool_help.returncode == 0 and "train" in tool_help.stdout


def test_log_level_option_and_environment(tmp_path) -> None:
    import os

    model = digits_cnn(seed=0)
    import onnx

    onnx.save(model, tmp_path / "model.onnx")
    script = ("from onnxtrain.training import artifacts; "
              f"artifacts.generate_artifacts({str(tmp_path / 'model.onnx')!r}, "
              "loss=artifacts.LossType.CrossEntropyLoss, optimizer=artifacts.OptimType.AdamW, "
              f"artifact_directory={str(tmp_path / 'art')!r})")
    quiet = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                           env={k: v for k, v in os.environ.items() if k != "ONNXTRAIN_LOG_LEVEL"})
    assert quiet.returncode == 0 and "generated artifacts" not in quiet.stderr
    loud = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "ONNXTRAIN_LOG_LEVEL": "info"})
    assert loud.returncode == 0, loud.stderr
    assert f"onnxtrain INFO: generated artifacts in {tmp_path / 'art'}" in loud.stderr
    bad = subprocess.run([sys.executable, "-c", "import onnxtrain"], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "ONNXTRAIN_LOG_LEVEL": "chatty"})
    assert bad.returncode == 0 and "unknown log level 'chatty'" in bad.stderr
    np.savez(tmp_path / "data.npz", image=np.zeros((4, 1, 8, 8), np.float32), labels=np.zeros(4, np.int64))
    trained = _cli("--log-level", "info", "train", "--artifacts", str(tmp_path / "art"), "--data",
                   str(tmp_path / "data.npz"), "--batch-size", "4")
    assert trained.returncode == 0, trained.stderr
    assert "onnxtrain INFO: loaded checkpoint" in trained.stderr
    assert "onnxtrain INFO: saved checkpoint" in trained.stderr
