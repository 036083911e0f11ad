"""bench/training_scale.py and bench/inference_scale.py work end to end at the tiniest sizes:
they export a model, measure the GEMM peak, run each framework in its own process and print
their tables. One model, batch 1, 8 tokens, one step; no timing is asserted."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

BENCH = Path(__file__).resolve().parents[2] / "bench"
TINY = ["--models", "gpt", "--batch", "1", "--seq-len", "8", "--rounds", "1", "--warmup", "0", "--threads", "1",
        "--gemm-size", "128"]


def run_bench(script: str, *options: str, work: Path) -> str:
    done = subprocess.run([sys.executable, str(BENCH / script), *TINY, *options, "--work", str(work)],
                          capture_output=True, text=True, timeout=150)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "load average" in done.stdout and "GEMM peak: " in done.stdout and "GEMM peak: n/a" not in done.stdout
    return done.stdout


def table_row(printed: str, first_cell: str) -> list[str]:
    """The cells after the first of the first table row that starts with `first_cell`."""
    line = next(line for line in printed.splitlines() if line.startswith(f"| {first_cell} |"))
    return [cell.strip() for cell in line.split("|")[2:-1]]


def test_training_scale_prints_the_tables_and_equal_first_losses(tmp_path):
    printed = run_bench("training_scale.py", "--steps", "1", "--frameworks", "onnxtrain,torch", work=tmp_path)
    assert "### threads = 1" in printed and "GFLOP/s (% of peak)" in printed
    cells = table_row(printed, "gpt")
    assert cells and all(c and "failed" not in c and c != "n/a" for c in cells), cells
    line = next(line for line in printed.splitlines() if line.strip().startswith("gpt:"))
    ours, theirs = (float(part.split()[-1]) for part in line.split(":", 1)[1].split(","))
    assert ours == pytest.approx(theirs, rel=1e-4), line


def test_inference_scale_prints_the_tables_and_matching_outputs(tmp_path):
    printed = run_bench("inference_scale.py", "--repeat", "1", work=tmp_path)
    for table in ("onnxtrain / onnxruntime", "GFLOP/s (% of peak)"):
        assert table in printed
    cells = table_row(printed, "gpt b1 T8")
    assert cells and all(c and "failed" not in c and c != "n/a" for c in cells), cells
    line = next(line for line in printed.splitlines() if line.strip().startswith("gpt b1 T8: max |difference|"))
    difference, largest = (float(part.split()[-1]) for part in line.split(":", 1)[1].split(","))
    assert difference <= 1e-4 * largest, line


def test_scaling_sweeps_both_sizes_and_writes_the_curves(tmp_path):
    done = subprocess.run(
        [sys.executable, str(BENCH / "scaling.py"), "--models", "gpt", "--seq-lens", "8,16", "--batch", "1",
         "--batches", "1,2", "--seq-len", "8", "--steps", "1", "--warmup", "0", "--rounds", "1", "--threads", "1",
         "--out", str(tmp_path / "curves"), "--work", str(tmp_path / "work")],
        capture_output=True, text=True, timeout=150)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = [line for line in done.stdout.splitlines() if line.startswith("| gpt |")]
    assert [row.split("|")[2:5] for row in rows] == [[" seq ", " 1 ", " 8 "], [" seq ", " 1 ", " 16 "],
                                                     [" batch ", " 1 ", " 8 "], [" batch ", " 2 ", " 8 "]]
    assert (tmp_path / "curves.png").stat().st_size > 10_000
    assert "| gpt | seq | 1 | 16 |" in (tmp_path / "curves.md").read_text()
