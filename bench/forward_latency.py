"""Forward latency of onnxtrain against onnxruntime on the reference models.

For each model (eval mode, TorchScript and dynamo exports, see ``zoo/``),
batch size and thread count, both runtimes run the same inputs at the same intra-op thread
count. Each runtime is warmed up, then the timed runs alternate between the two in
``--rounds`` blocks, so that a change in machine load during a measurement hits both; the
median wall time of ``--repeat`` runs per runtime is printed as a markdown table, with the
load average before and after (the medians mean little on a machine busy with other work).
onnxruntime keeps its default graph optimizations and thread settings (what users get).

Each block starts after a pause (``--pause``) and one untimed run. Both runtimes' worker
threads keep spinning for a while after a run (onnxruntime's thread pool by default,
OpenMP's until GOMP_SPINCOUNT runs out); on a 2-core machine, the other runtime's
spinning threads would otherwise take the cores from the block that follows them
(ResNet-18 at batch 1 on 2 threads measured 2.7 ms right after onnxruntime's runs and
2.6 ms after a 10 ms pause, against onnxruntime's 2.4 ms).

    .venv/bin/python bench/forward_latency.py [--threads 1 2] [--repeat 50] [--models mlp bert]
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from zoo import EXPORTERS, MODELS, case_id, get_case, is_sequence_model  # noqa: E402

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


def timed_runs(run: Runner, feeds: dict[str, np.ndarray], count: int) -> list[float]:
    """Wall times of ``count`` calls of ``run(feeds)``, in milliseconds."""
    times = []
    for _ in range(count):
        start = time.perf_counter()
        run(feeds)
        times.append((time.perf_counter() - start) * 1e3)
    return times


def interleaved_medians(runners: list[Runner], feeds: dict[str, np.ndarray],
                        args: argparse.Namespace) -> list[float]:
    """Median ms of each runner: all warmed up, then timed in alternating blocks."""
    for run in runners:
        timed_runs(run, feeds, args.warmup)
    times: list[list[float]] = [[] for _ in runners]
    per_round = max(1, math.ceil(args.repeat / args.rounds))
    for _ in range(args.rounds):
        for run, collected in zip(runners, times):
            time.sleep(args.pause)  # the other runtime's threads stop spinning
            run(feeds)
            collected += timed_runs(run, feeds, per_round)
    return [statistics.median(t) for t in times]


def _load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f} {five:.2f} {fifteen:.2f}"


def _measure(onnxtrain: Any, path: Path, feeds: dict[str, np.ndarray], threads: int,
             args: argparse.Namespace) -> tuple[float, float | None, str]:
    """(ORT ms, onnxtrain ms or None, onnxtrain cell text). A failure of onnxtrain becomes
    the cell text, not an abort."""
    ort = ort_runner(path, threads)
    if onnxtrain is None:
        return interleaved_medians([ort], feeds, args)[0], None, ""
    try:
        ours = onnxtrain_runner(onnxtrain, path, threads)
        ours(feeds)
    except Exception as e:  # report and continue with the other models
        message = " ".join(str(e).split())  # one line, for a table cell
        return interleaved_medians([ort], feeds, args)[0], None, f"error: {type(e).__name__}: {message[:100]}"
    ort_ms, ours_ms = interleaved_medians([ort, ours], feeds, args)
    return ort_ms, ours_ms, f"{ours_ms:.3f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", nargs="+", type=int, default=[1, 2],
                        help="intra-op thread counts, each used by both runtimes")
    parser.add_argument("--repeat", type=int, default=50, help="timed runs per runtime and measurement")
    parser.add_argument("--warmup", type=int, default=5, help="untimed runs first")
    parser.add_argument("--rounds", type=int, default=5, help="alternating blocks the timed runs come in")
    parser.add_argument("--pause", type=float, default=0.05, help="seconds of idle time before each block")
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=MODELS)
    parser.add_argument("--exporters", nargs="+", default=list(EXPORTERS), choices=EXPORTERS)
    parser.add_argument("--batch", nargs="+", type=int, default=[1, 8], help="batch sizes")
    parser.add_argument("--seq-len", type=int, default=16, help="sequence length (gpt2, bert)")
    args = parser.parse_args()

    onnxtrain, why_not = _import_onnxtrain()
    if onnxtrain is None:
        print(f"onnxtrain is not importable ({why_not}); onnxruntime only.\n")
    print(f"threads={args.threads} repeat={args.repeat} warmup={args.warmup} rounds={args.rounds} "
          f"seq_len={args.seq_len} (gpt2, bert); eval-mode exports; median ms; "
          f"load average {_load()} ({os.cpu_count()} CPUs)\n")
    header = "| model | exporter | batch | threads | ORT ms |"
    rule = "|---|---|---|---|---|"
    if onnxtrain is not None:
        header += " onnxtrain ms | ratio (onnxtrain/ORT) |"
        rule += "---|---|"
    print(header)
    print(rule, flush=True)

    ratios: dict[int, list[float]] = {t: [] for t in args.threads}
    for model in args.models:
        for exporter in args.exporters:
            case = get_case(case_id(model, exporter, "eval"))
            for batch in args.batch:
                seq_len = args.seq_len if is_sequence_model(model) else None
                feeds = case.make_inputs(batch, seed=0, seq_len=seq_len)
                for threads in args.threads:
                    ort_ms, ours_ms, cell = _measure(onnxtrain, case.onnx_path, feeds, threads, args)
                    row = f"| {model} | {exporter} | {batch} | {threads} | {ort_ms:.3f} |"
                    if onnxtrain is not None:
                        ratio = "-" if ours_ms is None else f"{ours_ms / ort_ms:.2f}"
                        if ours_ms is not None:
                            ratios[threads].append(ours_ms / ort_ms)
                        row += f" {cell} | {ratio} |"
                    print(row, flush=True)

    print(f"\nload average {_load()}")
    for threads, values in ratios.items():
        if values:
            slower = sum(r > 1.0 for r in values)
            geomean = math.exp(statistics.fmean(math.log(r) for r in values))
            print(f"threads={threads}: geometric mean ratio {geomean:.2f}, "
                  f"onnxtrain slower on {slower} of {len(values)}")


if __name__ == "__main__":
    main()
