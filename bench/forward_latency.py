"""Forward latency of onnxtrain against onnxruntime on the reference models.

For each model (eval mode, TorchScript and dynamo exports, see ``zoo/``),
batch size and thread count, both runtimes run the same inputs at the same intra-op thread
count. Each runtime is warmed up, then the timed runs alternate between the two in
``--rounds`` blocks, so that a change in machine load during a measurement hits both; the
median wall time of ``--repeat`` runs per runtime is printed as a markdown table, with the
load average before and after (the medians mean little on a machine busy with other work).
onnxruntime keeps its default graph optimizations and thread settings (what users get).

Each block starts after a pause (``--pause``), prolonged until the process is idle, and one
untimed run. Both runtimes' worker threads keep spinning for a while after a run
(onnxruntime's thread pool by default, OpenMP's until GOMP_SPINCOUNT runs out); on a 2-core
machine, the other runtime's spinning threads would otherwise take the cores from the block
that follows them (ResNet-18 at batch 1 on 2 threads measured 2.7 ms right after
onnxruntime's runs and 2.6 ms after a 10 ms pause, against onnxruntime's 2.4 ms). How long
they spin depends on the load: on a busy machine (load 5) onnxruntime's workers still ran
50-90 ms after its runs, so a fixed pause of 50 ms left them on the second core through much
of the next block; the pause now lasts until the process's threads use under 1 ms of CPU in
10 ms (at most a second).

    .venv/bin/python bench/forward_latency.py [--threads 1 2] [--repeat 50] [--models mlp bert]

``--quantized`` adds single-op models of quantized inference at realistic sizes (``--quantized``
alone: only those): int8 MatMul as QLinearMatMul and MatMulInteger (BERT-base's FFN, 768 x
3072, at 128 rows, and a 768 x 768 layer at 1 row) and int8 Conv as QLinearConv (ResNet's
64-channel 3x3 at 56 x 56), uint8 activations and int8 weights, constant weights.
``--recurrent`` likewise adds single-op float32 LSTM and GRU models (seq x batch x input x
hidden; constant weights), forward and bidirectional. ``--attention`` adds single-op float32
opset-23 Attention models (4-D Q, K and V, batch x heads x sequence x head size; "-causal"
with is_causal, ",KV" after the shape for grouped-query attention with KV key/value heads).
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


def wait_until_idle(pause: float, limit: float = 1.0) -> None:
    """Sleeps ``pause`` seconds, then on until this process's threads (either runtime's
    spinning workers) used under 1 ms of CPU in a 10 ms window, or ``limit`` seconds passed."""
    time.sleep(pause)
    end = time.perf_counter() + limit
    while time.perf_counter() < end:
        before = time.process_time()  # all threads of the process
        time.sleep(0.01)
        if time.process_time() - before < 0.001:
            return


def interleaved_medians(runners: list[Runner], feeds: dict[str, np.ndarray],
                        args: argparse.Namespace) -> list[float]:
    """Median ms of each runner: all warmed up, then timed in alternating blocks."""
    for run in runners:
        timed_runs(run, feeds, args.warmup)
    times: list[list[float]] = [[] for _ in runners]
    per_round = max(1, math.ceil(args.repeat / args.rounds))
    for _ in range(args.rounds):
        for run, collected in zip(runners, times):
            wait_until_idle(args.pause)  # the other runtime's threads stop spinning
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


# ---- quantized single-op models ----


def _quantized_model(op: str, shape: str, folder: Path) -> tuple[Path, dict[str, np.ndarray]]:
    """A one-node model of `op` at `shape` ("MxKxN" for the products, "NxCxHxW,M" for the
    convolution), its weights constant, and its feeds."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    u8 = lambda *s: rng.integers(0, 256, s, dtype=np.uint8)  # noqa: E731
    s8 = lambda *s: rng.integers(-128, 128, s, dtype=np.int8)  # noqa: E731
    scalar = lambda v, t: np.array(v, t)  # noqa: E731
    if op == "QLinearConv":
        image, m = shape.split(",")
        n, c, h, w = (int(v) for v in image.split("x"))
        x, weights = u8(n, c, h, w), s8(int(m), c, 3, 3)
        constants = {"x_scale": scalar(0.02, np.float32), "x_zero_point": scalar(128, np.uint8), "w": weights,
                     "w_scale": np.full(int(m), 0.003, np.float32), "w_zero_point": np.zeros(int(m), np.int8),
                     "y_scale": scalar(0.3, np.float32), "y_zero_point": scalar(128, np.uint8),
                     "B": rng.integers(-1000, 1000, int(m)).astype(np.int32)}
        inputs = ["x", "x_scale", "x_zero_point", "w", "w_scale", "w_zero_point", "y_scale", "y_zero_point", "B"]
        node = helper.make_node(op, inputs, ["y"], pads=[1, 1, 1, 1])
    else:
        m, k, n_out = (int(v) for v in shape.split("x"))
        x = u8(m, k)
        if op == "QLinearMatMul":
            constants = {"a_scale": scalar(0.02, np.float32), "a_zero_point": scalar(128, np.uint8), "b": s8(k, n_out),
                         "b_scale": scalar(0.003, np.float32), "b_zero_point": scalar(0, np.int8),
                         "y_scale": scalar(0.3, np.float32), "y_zero_point": scalar(128, np.uint8)}
            inputs = ["x", "a_scale", "a_zero_point", "b", "b_scale", "b_zero_point", "y_scale", "y_zero_point"]
        else:
            constants = {"b": s8(k, n_out), "a_zero_point": scalar(128, np.uint8), "b_zero_point": scalar(0, np.int8)}
            inputs = ["x", "b", "a_zero_point", "b_zero_point"]
        node = helper.make_node(op, inputs, ["y"])
    graph = helper.make_graph([node], op, [helper.make_tensor_value_info("x", TensorProto.UINT8, x.shape)],
                              [helper.make_empty_tensor_value_info("y")],
                              [numpy_helper.from_array(v, k) for k, v in constants.items()])
    path = folder / f"{op}_{shape.replace(',', '_')}.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8), str(path))
    return path, {"x": x}


def _recurrent_model(op: str, shape: str, folder: Path) -> tuple[Path, dict[str, np.ndarray]]:
    """A one-node float32 model of `op` (LSTM, GRU, or either with "-bi" for bidirectional) at
    `shape` ("SEQxBATCHxINPUTxHIDDEN"), its weights constant, X fed."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    cell, _, bi = op.partition("-")
    seq, batch, input_size, hidden = (int(v) for v in shape.split("x"))
    dirs, gates = (2 if bi else 1), (4 if cell == "LSTM" else 3)
    weights = {"W": rng.standard_normal((dirs, gates * hidden, input_size)) * 0.1,
               "R": rng.standard_normal((dirs, gates * hidden, hidden)) * 0.1,
               "B": rng.standard_normal((dirs, 2 * gates * hidden)) * 0.1}
    node = helper.make_node(cell, ["x", "W", "R", "B"], ["y", "y_h"], hidden_size=hidden,
                            direction="bidirectional" if bi else "forward")
    graph = helper.make_graph(
        [node], op, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [seq, batch, input_size])],
        [helper.make_empty_tensor_value_info("y"), helper.make_empty_tensor_value_info("y_h")],
        [numpy_helper.from_array(v.astype(np.float32), k) for k, v in weights.items()])
    path = folder / f"{op}_{shape}.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)], ir_version=8), str(path))
    return path, {"x": rng.standard_normal((seq, batch, input_size)).astype(np.float32)}


def _attention_model(op: str, shape: str, folder: Path) -> tuple[Path, dict[str, np.ndarray]]:
    """A one-node float32 opset-23 Attention model: `op` is "Attention" or "Attention-causal",
    `shape` "BATCHxHEADSxSEQxHEAD_SIZE" or that and ",KV_HEADS" (grouped-query); Q, K, V fed."""
    import onnx
    from onnx import TensorProto, helper

    rng = np.random.default_rng(0)
    dims, _, kv = shape.partition(",")
    batch, heads, seq, size = (int(v) for v in dims.split("x"))
    kv_heads = int(kv) if kv else heads
    shapes = {"q": (batch, heads, seq, size), "k": (batch, kv_heads, seq, size), "v": (batch, kv_heads, seq, size)}
    node = helper.make_node("Attention", ["q", "k", "v"], ["y"], is_causal=int(op.endswith("-causal")))
    graph = helper.make_graph([node], op, [helper.make_tensor_value_info(n, TensorProto.FLOAT, s)
                                           for n, s in shapes.items()], [helper.make_empty_tensor_value_info("y")])
    path = folder / f"{op}_{shape.replace(',', '_')}.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)], ir_version=10), str(path))
    return path, {n: rng.standard_normal(s).astype(np.float32) for n, s in shapes.items()}


ATTENTION_CASES = [("Attention", "1x8x128x64"), ("Attention-causal", "1x8x128x64"), ("Attention", "1x8x512x64"),
                   ("Attention-causal", "1x8x512x64"), ("Attention", "8x8x128x64"), ("Attention-causal", "8x8x128x64"),
                   ("Attention-causal", "8x8x512x64"), ("Attention-causal", "1x8x512x64,2")]

RECURRENT_CASES = [("LSTM", "32x1x128x256"), ("LSTM", "32x16x128x256"), ("LSTM-bi", "32x16x128x256"),
                   ("GRU", "32x1x128x256"), ("GRU", "32x16x128x256"), ("LSTM", "128x64x64x128")]

QUANTIZED_CASES = [("QLinearMatMul", "128x768x3072"), ("QLinearMatMul", "1x768x768"),
                   ("MatMulInteger", "128x768x3072"), ("MatMulInteger", "1x768x768"),
                   ("QLinearConv", "1x64x56x56,64"), ("QLinearConv", "8x64x56x56,64")]


def _print_row(first_cells: str, measured: tuple[float, float | None, str], ratios: list[float],
               with_onnxtrain: bool) -> None:
    """One table row: the leading cells, ORT's time and (with onnxtrain) onnxtrain's and the
    ratio, which joins `ratios`."""
    ort_ms, ours_ms, cell = measured
    row = f"{first_cells} {ort_ms:.3f} |"
    if with_onnxtrain:
        ratio = "-" if ours_ms is None else f"{ours_ms / ort_ms:.2f}"
        if ours_ms is not None:
            ratios.append(ours_ms / ort_ms)
        row += f" {cell} | {ratio} |"
    print(row, flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", nargs="+", type=int, default=[1, 2],
                        help="intra-op thread counts, each used by both runtimes")
    parser.add_argument("--repeat", type=int, default=50, help="timed runs per runtime and measurement")
    parser.add_argument("--warmup", type=int, default=5, help="untimed runs first")
    parser.add_argument("--rounds", type=int, default=5, help="alternating blocks the timed runs come in")
    parser.add_argument("--pause", type=float, default=0.05,
                        help="seconds of idle time at least before each block (longer while threads spin)")
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=MODELS)
    parser.add_argument("--exporters", nargs="+", default=list(EXPORTERS), choices=EXPORTERS)
    parser.add_argument("--batch", nargs="+", type=int, default=[1, 8], help="batch sizes")
    parser.add_argument("--seq-len", type=int, default=16, help="sequence length (gpt2, bert)")
    parser.add_argument("--quantized", action="store_true",
                        help="the quantized single-op models (alone unless --models is given too)")
    parser.add_argument("--recurrent", action="store_true",
                        help="single-op LSTM and GRU models (alone unless --models is given too)")
    parser.add_argument("--attention", action="store_true",
                        help="single-op opset-23 Attention models (alone unless --models is given too)")
    args = parser.parse_args()
    if (args.quantized or args.recurrent or args.attention) and "--models" not in sys.argv:
        args.models = []

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
                    measured = _measure(onnxtrain, case.onnx_path, feeds, threads, args)
                    _print_row(f"| {model} | {exporter} | {batch} | {threads} |", measured, ratios[threads],
                               onnxtrain is not None)

    single_ops = [(args.quantized, QUANTIZED_CASES, _quantized_model),
                  (args.recurrent, RECURRENT_CASES, _recurrent_model),
                  (args.attention, ATTENTION_CASES, _attention_model)]
    for wanted, cases, build in single_ops:
        if not wanted:
            continue
        import tempfile

        with tempfile.TemporaryDirectory() as folder:
            for op, shape in cases:
                path, feeds = build(op, shape, Path(folder))
                for threads in args.threads:
                    measured = _measure(onnxtrain, path, feeds, threads, args)
                    _print_row(f"| {op} | {shape} | - | {threads} |", measured, ratios[threads], onnxtrain is not None)

    print(f"\nload average {_load()}")
    for threads, values in ratios.items():
        if values:
            slower = sum(r > 1.0 for r in values)
            geomean = math.exp(statistics.fmean(math.log(r) for r in values))
            print(f"threads={threads}: geometric mean ratio {geomean:.2f}, "
                  f"onnxtrain slower on {slower} of {len(values)}")


if __name__ == "__main__":
    main()
