"""One training run compared step by step with onnxruntime-training 1.19.2, each side with its
own defaults (AdamW with a LinearLRScheduler; SGD with the checkpoint's learning rate): change
the import line only, get the same numbers.

ORT's numbers are recorded in ort_1_19_2_reference_run.json by tools/ort_reference_run.py (the
two `onnxruntime` modules cannot share a venv); when ORT's venv is present, the record is made
afresh in a subprocess and must match the checked-in one.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

import onnxtrain.training

ROOT = Path(__file__).resolve().parents[3]
RECORD = json.loads((Path(__file__).with_name("ort_1_19_2_reference_run.json")).read_text())
ORT_PYTHON = Path(os.environ.get("ONNXTRAIN_CACHE", Path.home() / ".cache/onnxtrain")) / "ort-training-1.19.2/bin/python"

# Both optimizers: the same update rule, computed as ORT computes it (AdamW: Hugging Face's
# rule, adam_mode=1, in ORT's float order; bit for bit on the same gradients, see
# test_artifacts.py). What is left is the forward and backward pass: MLAS and oneDNN sum the
# GEMMs in other orders, a last bit of the gradients. Measured: losses within 1.2e-7
# (relative), weights within 6e-8 (absolute) after 20 steps.
RTOL, ATOL = 1e-6, 1e-7


def _tool():
    spec = importlib.util.spec_from_file_location("ort_reference_run", ROOT / "tools/ort_reference_run.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def ours(tmp_path_factory):
    tool = _tool()
    folder = tmp_path_factory.mktemp("reference")
    for name in ("adamw", "adamw_torch", "sgd", "swap"):
        (folder / name).mkdir()
    return {
        # The documented schedule, passed as documented.
        "adamw": tool.run(onnxtrain.training, "AdamW", folder / "adamw", (tool.WARMUP, tool.TOTAL)),
        # torch.optim.AdamW's rule, which onnxtrain keeps selectable.
        "adamw_torch": tool.run(onnxtrain.training, onnxtrain.training.onnxblock.optim.AdamW(mode="torch"),
                                folder / "adamw_torch", (tool.WARMUP, tool.TOTAL)),
        "sgd": tool.run(onnxtrain.training, "SGD", folder / "sgd", None),
        "scheduler_as_called": tool.run(onnxtrain.training, "SGD", folder / "swap",
                                        (tool.WARMUP, tool.TOTAL))["learning_rates"],
    }


@pytest.mark.parametrize("run", ["adamw", "sgd"])
def test_every_step_matches_onnxruntime_training(ours, run) -> None:
    expected, got = RECORD[run], ours[run]
    assert got["initial_learning_rate"] == pytest.approx(expected["initial_learning_rate"], rel=1e-7)
    np.testing.assert_allclose(got["learning_rates"], expected["learning_rates"], rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(got["losses"], expected["losses"], rtol=RTOL)
    assert got["eval_loss"] == pytest.approx(expected["eval_loss"], rel=RTOL)
    for name, values in expected["parameters"].items():
        np.testing.assert_allclose(got["parameters"][name], values, rtol=0, atol=ATOL, err_msg=name)


def _torch_adamw_run(rule: str) -> tuple[list[float], dict[str, np.ndarray]]:
    """The recorded AdamW run in torch (float32), with torch's AdamW rule or ORT's adam_mode=1 rule."""
    torch = pytest.importorskip("torch")
    from onnx import numpy_helper

    tool = _tool()
    params = {t.name: torch.tensor(numpy_helper.to_array(t)).requires_grad_(True) for t in
              tool.make_model().graph.initializer}
    m = {k: torch.zeros_like(v) for k, v in params.items()}
    v = {k: torch.zeros_like(p) for k, p in params.items()}
    beta1, beta2, eps = 0.9, 0.999, 1e-6  # ORT's defaults, weight decay 0
    losses = []
    for step, ((x, labels), lr) in enumerate(zip(tool.make_batches(), RECORD["adamw"]["learning_rates"]), 1):
        hidden = torch.relu(torch.from_numpy(x) @ params["fc1.weight"].T + params["fc1.bias"])
        loss = torch.nn.functional.cross_entropy(hidden @ params["fc2.weight"].T + params["fc2.bias"],
                                                 torch.from_numpy(labels))
        for p in params.values():
            p.grad = None
        loss.backward()
        losses.append(float(loss.detach()))
        bc1, bc2 = 1 - beta1**step, 1 - beta2**step
        with torch.no_grad():
            for k, p in params.items():
                m[k].mul_(beta1).add_(p.grad, alpha=1 - beta1)
                v[k].mul_(beta2).addcmul_(p.grad, p.grad, value=1 - beta2)
                if rule == "torch":
                    p.sub_(lr / bc1 * m[k] / (v[k].sqrt() / bc2**0.5 + eps))
                else:
                    p.sub_(lr * bc2**0.5 / bc1 * m[k] / (v[k].sqrt() + eps))
    return losses, {k: p.detach().numpy().ravel() for k, p in params.items()}


def test_each_adamw_rule_is_its_formula(ours) -> None:
    """ORT's adam_mode=1 rule written in torch reproduces ORT's run and onnxtrain's default one;
    torch.optim.AdamW's rule reproduces onnxtrain's mode="torch" run; the two rules part by
    about 1e-5 here (eps=1e-6), far beyond the tolerances above."""
    torch_losses, torch_params = _torch_adamw_run("torch")
    ort_losses, ort_params = _torch_adamw_run("ort")
    for rule, run, (losses, params) in (("ort", RECORD["adamw"], (ort_losses, ort_params)),
                                        ("ort", ours["adamw"], (ort_losses, ort_params)),
                                        ("torch", ours["adamw_torch"], (torch_losses, torch_params))):
        np.testing.assert_allclose(losses, run["losses"], rtol=1e-6, err_msg=rule)
        for name, values in params.items():
            np.testing.assert_allclose(values, run["parameters"][name], rtol=0, atol=1e-6, err_msg=f"{rule} {name}")
    gap = max(abs(a - b) / abs(b) for a, b in zip(ours["adamw_torch"]["losses"], RECORD["adamw"]["losses"]))
    assert gap > 5e-6


def test_the_scheduler_swap_is_onnxruntimes() -> None:
    """ORT 1.19.2's Python LinearLRScheduler(opt, warmup=4, total=20) warms up over 20 steps;
    onnxtrain keeps the documented meaning (docs/differences.md)."""
    steps, lr = RECORD["total"], RECORD["initial_lr"]
    np.testing.assert_allclose(RECORD["scheduler_as_called"], [lr * t / steps for t in range(steps)], rtol=1e-6)


def test_onnxtrain_keeps_the_documented_schedule(ours) -> None:
    warmup, total, lr = RECORD["warmup"], RECORD["total"], RECORD["initial_lr"]
    documented = [lr * t / warmup if t < warmup else lr * (total - t) / (total - warmup) for t in range(total)]
    np.testing.assert_allclose(ours["scheduler_as_called"], documented, rtol=1e-6, atol=1e-12)
    np.testing.assert_allclose(RECORD["adamw"]["learning_rates"], documented, rtol=1e-6, atol=1e-12)


@pytest.mark.skipif(not ORT_PYTHON.exists(), reason="onnxruntime-training's venv is missing "
                    "(scripts/setup_ort_training.sh makes it)")
def test_the_record_is_what_onnxruntime_training_gives_now() -> None:
    result = subprocess.run([str(ORT_PYTHON), str(ROOT / "tools/ort_reference_run.py"), "--out", "-"],
                            capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert result.returncode == 0, result.stderr[-3000:]
    fresh = json.loads(result.stdout)
    for run in ("adamw", "sgd"):
        np.testing.assert_allclose(fresh[run]["losses"], RECORD[run]["losses"], rtol=1e-6)
    np.testing.assert_allclose(fresh["scheduler_as_called"], RECORD["scheduler_as_called"], rtol=1e-7)
