"""Forward latency of onnxtrain against onnxruntime on the reference models.

For each model (eval mode, TorchScript and dynamo exports, see ``tests/python/models``)
and each batch size, both runtimes run the same inputs at the same intra-op thread count;
the median wall time of ``--repeat`` runs after ``--warmup`` runs is printed as a markdown
table. onnxruntime keeps its default graph optimizations (what users get).

    .venv/bin/python bench/forward_latency.py [--threads 2] [--repeat 50] [--models mlp bert]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.python.models import EXPORTERS, MODELS, case_id, get_case, is_sequence_model  # noqa: E402

Runner = Callable[[dict[str, np.ndarray]], Any]


def _import_onnxtrain() -> tuple[Any, str | None]:
    """(module, None), or (None, why) when onnxtrain cannot be imported."""
    try:
        import onnxtrain

        return onnxtrain, None
    except ImportError as e:
        return None, f"{type(e).__name__}: {e}"


def ort_runner(path: Path, threads: int) -> Runner:
    """An onnxruntime CPU session with ``threads`` intra-op threads."""
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    session = onnxruntime.InferenceSession(str(path), sess_options=options,
                                           providers=["CPUExecutionProvider"])
    return lambda feeds: session.run(None, feeds)


def onnxtrain_runner(onnxtrain: Any, path: Path, threads: int) -> Runner:
    """An onnxtrain session with ``threads`` intra-op threads."""
    options = onnxtrain.SessionOptions()
    options.intra_op_num_threads = threads
    session = onnxtrain.InferenceSession(str(path), sess_options=options)
    return lambda feeds: session.run(None, feeds)


def median_ms(run: Runner, feeds: dict[str, np.ndarray], warmup: int, repeat: int) -> float:
    """Median wall time of ``run(feeds)`` in milliseconds, after ``warmup`` calls."""
    for _ in range(warmup):
        run(feeds)
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        run(feeds)
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def _measure_onnxtrain(onnxtrain: Any, path: Path, feeds: dict[str, np.ndarray],
                       args: argparse.Namespace) -> tuple[float | None, str]:
    """(median ms, cell text); a failure of onnxtrain becomes the cell text, not an abort."""
    try:
        ms = median_ms(onnxtrain_runner(onnxtrain, path, args.threads), feeds, args.warmup, args.repeat)
    except Exception as e:  # report and continue with the other models
        message = " ".join(str(e).split())  # one line, for a table cell
        return None, f"error: {type(e).__name__}: {message[:100]}"
    return ms, f"{ms:.3f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=2, help="intra-op threads for both runtimes")
    parser.add_argument("--repeat", type=int, default=50, help="timed runs per measurement")
    parser.add_argument("--warmup", type=int, default=5, help="untimed runs first")
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=MODELS)
    parser.add_argument("--exporters", nargs="+", default=list(EXPORTERS), choices=EXPORTERS)
    parser.add_argument("--batch", nargs="+", type=int, default=[1, 8], help="batch sizes")
    parser.add_argument("--seq-len", type=int, default=16, help="sequence length (gpt2, bert)")
    args = parser.parse_args()

    onnxtrain, why_not = _import_onnxtrain()
    if onnxtrain is None:
        print(f"onnxtrain is not importable ({why_not}); onnxruntime only.\n")
    print(f"threads={args.threads} repeat={args.repeat} warmup={args.warmup} "
          f"seq_len={args.seq_len} (gpt2, bert); eval-mode exports; median ms\n")
    header = "| model | exporter | batch | ORT ms |"
    rule = "|---|---|---|---|"
    if onnxtrain is not None:
        header += " onnxtrain ms | ratio (onnxtrain/ORT) |"
        rule += "---|---|"
    print(header)
    print(rule, flush=True)

    for model in args.models:
        for exporter in args.exporters:
            case = get_case(case_id(model, exporter, "eval"))
            for batch in args.batch:
                seq_len = args.seq_len if is_sequence_model(model) else None
                feeds = case.make_inputs(batch, seed=0, seq_len=seq_len)
                ort_ms = median_ms(ort_runner(case.onnx_path, args.threads), feeds, args.warmup, args.repeat)
                row = f"| {model} | {exporter} | {batch} | {ort_ms:.3f} |"
                if onnxtrain is not None:
                    ours_ms, cell = _measure_onnxtrain(onnxtrain, case.onnx_path, feeds, args)
                    ratio = f"{ours_ms / ort_ms:.2f}" if ours_ms is not None else "-"
                    row += f" {cell} | {ratio} |"
                print(row, flush=True)


if __name__ == "__main__":
    main()
