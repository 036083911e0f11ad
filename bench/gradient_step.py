"""Forward+backward time and peak memory: onnxtrain's gradient models against PyTorch.

For each reference model (training-mode TorchScript export, dropout p=0, see
``zoo/``) with a mean cross-entropy loss on top, one training step's
forward and backward pass runs in

- onnxtrain: the gradient model from ``onnxtrain.build_gradient_graph`` (loss and every
  parameter gradient as outputs);
- onnxruntime: the same gradient model (stock inference package, for reference);
- PyTorch: ``loss.backward()`` on the same module and weights,

all at the same intra-op thread count. The parent builds the gradient models and the
batches once (``--work``, a temporary folder by default); each (runtime, model) then runs
in a fresh process that only loads what it runs: the ONNX runtimes' processes import
neither torch nor the exporters, so no memory freed by them sits in the heap for the steps
to reuse. Time is the median of ``--repeat`` steps after ``--warmup``; peak memory is the
process's peak resident size during the steps (warm-up included) above its resident size
just before them (the peak is reset first through /proc/self/clear_refs, so loading does
not count), i.e. what the step itself needs: activations, gradients, workspace, and any
copy of the weights a runtime makes.

On a shared machine the runtimes are interleaved: ``--rounds`` sweeps over every
(model, runtime) pair, and the table shows the median over the rounds (the spread,
min-max of the rounds' medians, goes to stderr). The load average before and after is
printed with the table. Besides wall time, "cpu" is the process's CPU time per step (all
its threads): time spent descheduled by other processes does not count in it, so at one
thread it is the steadier measure of the work a step does.

    PYTHONPATH=build/<dir>/python .venv/bin/python bench/gradient_step.py [--threads 2] [--rounds 3] [--models mlp cnn]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "python"))

BATCH = {"mlp": 256, "cnn": 64, "resnet18": 16, "gpt2": 8, "bert": 8}
SEQ_LEN = 64
MODELS = list(BATCH)


def memory_mb(field: str) -> float:
    """VmRSS (resident now) or VmHWM (peak resident) of this process, in MiB."""
    with open("/proc/self/status") as status:
        return int(re.search(rf"{field}:\s+(\d+)", status.read()).group(1)) / 1024


def reset_peak_memory() -> None:
    with open("/proc/self/clear_refs", "w") as refs:
        refs.write("5")


def prepare(model: str, folder: Path) -> None:
    """Writes the model's gradient model and its batch (inputs and labels) into `folder`."""
    from zoo import build_model, get_case, is_sequence_model
    from zoo.training import with_loss

    import onnx
    import onnxtrain

    case = get_case(f"{model}-torchscript-train")
    forward = with_loss(onnx.load(case.onnx_path))
    batch = BATCH[model]
    feeds = case.make_inputs(batch, 0, SEQ_LEN) if is_sequence_model(model) else case.make_inputs(batch, 0)
    classes = 10 if model in ("mlp", "cnn", "resnet18") else 128
    label_shape = (batch, SEQ_LEN) if is_sequence_model(model) else (batch,)
    labels = np.random.default_rng(1).integers(0, classes, label_shape).astype(np.int64)
    params = {n for n, _ in build_model(model, "train", "torchscript").module.named_parameters()}
    wrt = [i.name for i in forward.graph.initializer if i.name in params]
    folder.mkdir(parents=True, exist_ok=True)
    onnx.save(onnxtrain.build_gradient_graph(forward, wrt, "loss"), str(folder / "gradient.onnx"))
    np.savez(folder / "batch.npz", labels=labels, **feeds)


def measure(runtime: str, model: str, folder: Path, threads: int, warmup: int, repeat: int) -> dict:
    with np.load(folder / "batch.npz") as batch:
        labels = batch["labels"]
        feeds = {k: batch[k] for k in batch.files if k != "labels"}
    if runtime == "pytorch":
        import torch
        from zoo import build_model

        torch.set_num_threads(threads)
        module = build_model(model, "train", "torchscript").module
        module.train()
        inputs = [torch.from_numpy(v) for v in feeds.values()]
        target = torch.from_numpy(labels).reshape(-1)

        def step():
            for p in module.parameters():
                p.grad = None
            logits = module(*inputs)
            loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), target)
            loss.backward()
    else:
        run_feeds = {**feeds, "labels": labels}
        path = str(folder / "gradient.onnx")
        if runtime == "onnxtrain":
            import onnxtrain

            options = onnxtrain.SessionOptions()
            options.intra_op_num_threads = threads
            session = onnxtrain.InferenceSession(path, sess_options=options)
        else:
            import onnxruntime

            options = onnxruntime.SessionOptions()
            options.intra_op_num_threads = threads
            options.inter_op_num_threads = 1
            session = onnxruntime.InferenceSession(path, sess_options=options, providers=["CPUExecutionProvider"])

        def step():
            session.run(None, run_feeds)

    gc.collect()
    reset_peak_memory()
    baseline = memory_mb("VmRSS")
    for _ in range(warmup):
        step()
    times, cpu_times = [], []
    for _ in range(repeat):
        start, cpu_start = time.perf_counter(), time.process_time()
        step()
        times.append(time.perf_counter() - start)
        cpu_times.append(time.process_time() - cpu_start)
    return {
        "ms": statistics.median(times) * 1e3,
        "cpu_ms": statistics.median(cpu_times) * 1e3,
        "peak_mb": memory_mb("VmHWM") - baseline,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--models", nargs="*", default=MODELS)
    parser.add_argument("--runtimes", nargs="*", default=["onnxtrain", "pytorch", "onnxruntime"])
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--work", type=Path, help="folder for the gradient models and batches (default: temporary)")
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        runtime, model, folder = args.child
        print(json.dumps(measure(runtime, model, Path(folder), args.threads, args.warmup, args.repeat)))
        return
    with tempfile.TemporaryDirectory(prefix="gradient_step_") as temporary:
        args.work = args.work or Path(temporary)
        for model in args.models:
            prepare(model, args.work / model)
        compare(args)


def compare(args: argparse.Namespace) -> None:
    load_before = os.getloadavg()
    results: dict[tuple[str, str], list[dict]] = {(m, r): [] for m in args.models for r in args.runtimes}
    for _ in range(args.rounds):
        for model in args.models:
            for runtime in args.runtimes:
                result = run_child(runtime, model, args)
                if result:
                    results[model, runtime].append(result)
    load_after = os.getloadavg()
    print(f"threads={args.threads}, median of {args.repeat} steps, median of {args.rounds} interleaved round(s); "
          f"MB = peak RSS during the steps above the RSS before them; "
          f"load average {load_before[0]:.1f} before, {load_after[0]:.1f} after\n")
    print("| model | batch |" + "".join(f" {r} ms | {r} cpu ms | {r} MB |" for r in args.runtimes))
    print("|" + "---|" * (2 + 3 * len(args.runtimes)))
    for model in args.models:
        cells = []
        for runtime in args.runtimes:
            runs = results[model, runtime]
            if not runs:
                cells += ["error"] * 3
                continue
            ms = [r["ms"] for r in runs]
            cpu_ms = statistics.median(r["cpu_ms"] for r in runs)
            cells += [f"{statistics.median(ms):.2f}", f"{cpu_ms:.2f}", f"{statistics.median(r['peak_mb'] for r in runs):.0f}"]
            print(f"{model} {runtime}: ms per round {min(ms):.2f}..{max(ms):.2f}", file=sys.stderr)
        batch = f"{BATCH[model]}x{SEQ_LEN}" if model in ("gpt2", "bert") else str(BATCH[model])
        print(f"| {model} | {batch} | " + " | ".join(cells) + " |", flush=True)


def run_child(runtime: str, model: str, args: argparse.Namespace) -> dict | None:
    command = [sys.executable, __file__, "--child", runtime, model, str(args.work / model), "--threads", str(args.threads),
               "--warmup", str(args.warmup), "--repeat", str(args.repeat)]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        print(f"{runtime} {model}: {done.stderr.strip().splitlines()[-1:]}", file=sys.stderr)
        return None
    return json.loads(done.stdout.strip().splitlines()[-1])


if __name__ == "__main__":
    main()
