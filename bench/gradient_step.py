"""Forward+backward time and peak memory: onnxtrain's gradient models against PyTorch.

For each reference model (training-mode TorchScript export, dropout p=0, see
``tests/python/models``) with a mean cross-entropy loss on top, one training step's
forward and backward pass runs in

- onnxtrain: the gradient model from ``onnxtrain.build_gradient_graph`` (loss and every
  parameter gradient as outputs);
- onnxruntime: the same gradient model (stock inference package, for reference);
- PyTorch: ``loss.backward()`` on the same module and weights,

all at the same intra-op thread count. Each (runtime, model) runs in a fresh process;
time is the median of ``--repeat`` steps after ``--warmup``; peak memory is the process's
peak resident size above what it held after loading the model (ru_maxrss), i.e. what the
step itself needs: activations, gradients, workspace.

    PYTHONPATH=build/<dir>/python .venv/bin/python bench/gradient_step.py [--threads 2] [--models mlp cnn]
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "python"))

BATCH = {"mlp": 256, "cnn": 64, "resnet18": 16, "gpt2": 8, "bert": 8}
SEQ_LEN = 64
MODELS = list(BATCH)


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def setup(model: str):
    from autodiff.test_models import with_loss  # noqa: PLC0415 (tests are not a package on sys.path otherwise)
    from models import build_model, get_case, is_sequence_model

    import onnx

    cid = f"{model}-torchscript-train"
    case = get_case(cid)
    forward = onnx.load(case.onnx_path)
    batch = BATCH[model]
    feeds = case.make_inputs(batch, 0, SEQ_LEN) if is_sequence_model(model) else case.make_inputs(batch, 0)
    classes = 10 if model in ("mlp", "cnn", "resnet18") else 128
    label_shape = (batch, SEQ_LEN) if is_sequence_model(model) else (batch,)
    labels = np.random.default_rng(1).integers(0, classes, label_shape).astype(np.int64)
    return cid, with_loss(forward), feeds, labels, build_model(model, "train", "torchscript").module


def measure(runtime: str, model: str, threads: int, warmup: int, repeat: int) -> dict:
    cid, forward, feeds, labels, module = setup(model)
    import torch

    torch.set_num_threads(threads)
    if runtime == "pytorch":
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
        import onnxtrain

        params = {n for n, _ in module.named_parameters()}
        wrt = [i.name for i in forward.graph.initializer if i.name in params]
        data = onnxtrain.build_gradient_graph(forward, wrt, "loss").SerializeToString()
        run_feeds = {**feeds, "labels": labels}
        if runtime == "onnxtrain":
            options = onnxtrain.SessionOptions()
            options.intra_op_num_threads = threads
            session = onnxtrain.InferenceSession(data, sess_options=options)
        else:
            import onnxruntime

            options = onnxruntime.SessionOptions()
            options.intra_op_num_threads = threads
            options.inter_op_num_threads = 1
            session = onnxruntime.InferenceSession(data, sess_options=options, providers=["CPUExecutionProvider"])

        def step():
            session.run(None, run_feeds)

    baseline = peak_rss_mb()
    for _ in range(warmup):
        step()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    return {"ms": statistics.median(times) * 1e3, "peak_mb": peak_rss_mb() - baseline}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--models", nargs="*", default=MODELS)
    parser.add_argument("--runtimes", nargs="*", default=["onnxtrain", "pytorch", "onnxruntime"])
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        runtime, model = args.child
        print(json.dumps(measure(runtime, model, args.threads, args.warmup, args.repeat)))
        return
    header = "| model | batch |" + "".join(f" {r} ms | {r} MB |" for r in args.runtimes)
    print(f"threads={args.threads}, median of {args.repeat} steps; MB = peak RSS above the loaded model\n")
    print(header)
    print("|" + "---|" * (2 + 2 * len(args.runtimes)))
    for model in args.models:
        cells = []
        for runtime in args.runtimes:
            command = [sys.executable, __file__, "--child", runtime, model, "--threads", str(args.threads),
                       "--warmup", str(args.warmup), "--repeat", str(args.repeat)]
            done = subprocess.run(command, capture_output=True, text=True)
            if done.returncode != 0:
                cells += ["error", "error"]
                print(f"{runtime} {model}: {done.stderr.strip().splitlines()[-1:]}", file=sys.stderr)
                continue
            result = json.loads(done.stdout.strip().splitlines()[-1])
            cells += [f"{result['ms']:.1f}", f"{result['peak_mb']:.0f}"]
        batch = f"{BATCH[model]}x{SEQ_LEN}" if model in ("gpt2", "bert") else str(BATCH[model])
        print(f"| {model} | {batch} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
