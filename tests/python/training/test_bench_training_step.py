"""bench/training_step.py works end to end: it exports the models, runs each framework in
its own process and prints the table. A few steps only; no timing is asserted."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[3]
BENCH = ROOT / "bench" / "training_step.py"


def test_bench_prints_a_row_per_model_for_onnxtrain_and_torch(tmp_path):
    done = subprocess.run(
        [sys.executable, str(BENCH), "--steps", "3", "--warmup", "1", "--rounds", "1", "--threads", "1",
         "--models", "mlp,cnn", "--frameworks", "onnxtrain,torch", "--work", str(tmp_path)],
        capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    printed = done.stdout
    assert "### threads = 1" in printed and "load average" in printed
    rows = {line.split("|")[1].strip(): line for line in printed.splitlines() if line.startswith("| ")}
    for model in ("mlp", "cnn"):
        cells = [c.strip() for c in rows[model].split("|")[2:-1]]
        assert all(c and "failed" not in c and c != "n/a" for c in cells), rows[model]
    # The same model, weights and batch: the first losses agree.
    for model in ("mlp", "cnn"):
        line = next(line for line in printed.splitlines() if line.strip().startswith(f"{model}:"))
        ours, theirs = (float(part.split()[-1]) for part in line.split(":", 1)[1].split(","))
        assert ours == pytest.approx(theirs, rel=1e-4), line
    # The onnxtrain measurement never loads torch (the child asserts it) and no ORT-training
    # column appears when it is not asked for.
    assert "ORT-training" not in printed


def test_help_lists_the_options():
    done = subprocess.run([sys.executable, str(BENCH), "--help"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "--frameworks" in done.stdout


ORT_PYTHON = Path.home() / ".cache" / "onnxtrain" / "ort-training-1.19.2" / "bin" / "python"


@pytest.mark.skipif(not ORT_PYTHON.exists(), reason="no onnxruntime-training venv (scripts/setup_ort_training.sh)")
def test_bench_sets_onnxtrain_on_orts_files_beside_ort_training(tmp_path):
    done = subprocess.run(
        [sys.executable, str(BENCH), "--steps", "3", "--warmup", "1", "--rounds", "1", "--threads", "1",
         "--models", "mlp", "--frameworks", "ort-training,onnxtrain-ort", "--work", str(tmp_path)],
        capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    printed = done.stdout
    assert "### ORT-training's own artifacts, threads = 1" in printed
    row = next(line for line in printed.splitlines() if line.startswith("| mlp |") and ("met" in line or "missed" in line))
    cells = [c.strip() for c in row.split("|")[2:-1]]
    assert all(c and c != "n/a" for c in cells), row
    # Both train the same files from the same checkpoint on the same batch.
    line = next(line for line in printed.splitlines() if line.strip().startswith("mlp:"))
    ort, ours = (float(part.split()[-1]) for part in line.split(":", 1)[1].split(","))
    assert ours == pytest.approx(ort, rel=1e-5), line
