"""ORTModule training step (forward + loss + backward + torch AdamW): torch eager against
onnxtrain's ORTModule and, where it runs here, onnxruntime-training 1.19.2's ORTModule.

Models, built from configs (no downloads), with fixed seeds:

- ``gpt2``: Hugging Face GPT2LMHeadModel, 2 layers, d 256, 4 heads, T 128, batch 8, vocab
  8192; the loss inside the wrapped module (``nn.CrossEntropyLoss()(logits.view(-1, V),
  labels.view(-1))``) with 50 % of the labels -100, so label sparsity applies;
- ``bert``: BertForSequenceClassification, 2 layers, d 128, 2 heads, T 128, batch 8;
- ``resnet18``: torchvision's, 100 classes, batch 16, 112x112.

Every (model, framework) block runs in a fresh process (its peak RSS is its own) at the
same thread count; blocks alternate between frameworks, ``--rounds`` times, and the table
shows the median over rounds of each block's median step. The first call (export + graph
build for the ORTModules) is reported apart. ORT-training runs in its own virtualenv with
the anchor of ``../shared/anchors/ort-ortmodule`` (its overlay at
``~/.cache/onnxtrain/ort-ortmodule-overlay``); without it its column is empty. ORT's
GPT-2 gets an all-ones attention_mask (its export fails without one; torch's exporter fails
on onnxtrain's side with one); that is the same computation. ``onnxtrain-dense`` is
onnxtrain with label sparsity off, to show what the pass gains.

    PYTHONPATH=build/<dir>/python .venv/bin/python bench/ortmodule_step.py [--rounds 3] [--models gpt2 bert]

``--profile DIR`` also times onnxtrain's kernels in its timed steps (the engines' profiles,
see docs/ortmodule.md) and prints the forward and backward runs by op type.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CACHE = Path(os.environ.get("ONNXTRAIN_CACHE", Path.home() / ".cache" / "onnxtrain"))
ORT_PYTHON = CACHE / "ort-training-1.19.2" / "bin" / "python"
ORT_OVERLAY = CACHE / "ort-ortmodule-overlay"
# The anchor lives beside the repository (../shared); a clone elsewhere names it.
ORT_ANCHOR = Path(os.environ.get("ORT_ORTMODULE_ANCHOR", ROOT.parent / "shared" / "anchors" / "ort-ortmodule"))
MODELS = ("gpt2", "bert", "resnet18")
FRAMEWORKS = ("torch", "onnxtrain", "onnxtrain-dense", "ort")
TITLES = {"torch": "torch eager", "onnxtrain": "onnxtrain ORTModule", "onnxtrain-dense": "onnxtrain, label sparsity off",
          "ort": "ORT 1.19.2 ORTModule"}


# ---- in the worker process ----


def peak_rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def build(model_name: str, framework: str):
    """(module with its loss inside, a function giving the batch as call arguments)."""
    import torch

    torch.manual_seed(0)
    if model_name == "gpt2":
        from transformers import GPT2Config, GPT2LMHeadModel

        vocab = 8192
        config = GPT2Config(n_layer=2, n_embd=256, n_head=4, n_positions=128, vocab_size=vocab,
                            resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
        pass_mask = framework == "ort"

        class WithLoss(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.model = GPT2LMHeadModel(config)

            def forward(self, ids, mask, labels):
                logits = self.model(input_ids=ids, attention_mask=mask if pass_mask else None).logits
                return torch.nn.CrossEntropyLoss()(logits.view(-1, vocab), labels.view(-1))

        ids = torch.randint(0, vocab, (8, 128))
        labels = ids.clone()
        labels[torch.rand(labels.shape) < 0.5] = -100
        mask = torch.ones_like(ids)
        return WithLoss(), lambda: (ids, mask, labels)
    if model_name == "bert":
        from transformers import BertConfig, BertForSequenceClassification

        config = BertConfig(num_hidden_layers=2, hidden_size=128, num_attention_heads=2, intermediate_size=512,
                            vocab_size=8192, max_position_embeddings=128, hidden_dropout_prob=0.0,
                            attention_probs_dropout_prob=0.0, num_labels=2)

        class WithLoss(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.model = BertForSequenceClassification(config)

            def forward(self, ids, mask, labels):
                return self.model(input_ids=ids, attention_mask=mask, labels=labels).loss

        ids = torch.randint(0, 8192, (8, 128))
        mask = torch.ones_like(ids)
        labels = torch.randint(0, 2, (8,))
        return WithLoss(), lambda: (ids, mask, labels)
    import torchvision

    class WithLoss(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = torchvision.models.resnet18(num_classes=100)

        def forward(self, x, labels):
            return torch.nn.functional.cross_entropy(self.model(x), labels)

    x = torch.randn(16, 3, 112, 112)
    labels = torch.randint(0, 100, (16,))
    return WithLoss(), lambda: (x, labels)


def kernel_times(path: str, steps: int) -> dict:
    """Per run kind (forward, backward) and op type, the kernels' milliseconds per step in
    an engine profile whose runs alternate forward, backward."""
    with open(path) as f:
        events = json.load(f)
    events = events["traceEvents"] if isinstance(events, dict) else events
    runs = sorted((e for e in events if e.get("name") == "model_run"), key=lambda e: e["ts"])
    spans = [(r["ts"], r["ts"] + r["dur"], "forward" if i % 2 == 0 else "backward") for i, r in enumerate(runs)]
    times: dict = {"forward": {}, "backward": {}}
    for e in events:
        if e.get("cat") != "Node":
            continue
        kind = next((k for begin, end, k in spans if begin <= e["ts"] <= end), None)
        if kind:
            op = e["args"]["op_name"]
            times[kind][op] = times[kind].get(op, 0.0) + e["dur"] / 1000 / steps
    for kind, span_kind in (("forward run", "forward"), ("backward run", "backward")):
        times[kind] = sum(end - begin for begin, end, k in spans if k == span_kind) / 1000 / steps
    return times


def worker(framework: str, model_name: str, steps: int, warmup: int, threads: int, profile: str | None = None) -> dict:
    import warnings

    if framework == "ort":
        import torch29_compat  # noqa: F401  (the anchor's shim, before ORTModule)
    import torch

    torch.set_num_threads(threads)
    module, batch = build(model_name, framework)
    saved = tempfile.mkdtemp()
    if framework.startswith("onnxtrain"):
        from onnxtrain.training.ortmodule import ORTModule

        from onnxtrain.training.ortmodule import DebugOptions

        debug = DebugOptions(profile_prefix=os.path.join(profile, model_name)) if profile else None
        module = ORTModule(module, debug, label_sparsity=framework == "onnxtrain")
    elif framework == "ort":
        from onnxruntime.training.ortmodule import DebugOptions, ORTModule

        module = ORTModule(module, DebugOptions(save_onnx=True, onnx_prefix=os.path.join(saved, "m")))
    optimizer = torch.optim.AdamW(module.parameters(), lr=1e-4)

    def step() -> float:
        optimizer.zero_grad(set_to_none=True)
        loss = module(*batch())
        loss.backward()
        optimizer.step()
        return loss.item()

    with warnings.catch_warnings():
        # A fallback to torch warns: it must not pass unseen.
        warnings.filterwarnings("error", message=r"(?i).*fall(s|ing)? ?back")
        start = time.perf_counter()
        losses = [step()]
        first_call = time.perf_counter() - start
    if framework.startswith("onnxtrain") and not module.runs_in_onnxtrain:
        raise RuntimeError(f"onnxtrain fell back to torch: {module.fallback_reason}")
    if framework == "ort" and not os.listdir(saved):
        raise RuntimeError("ORT's ORTModule wrote no graphs: it fell back to torch")
    times = []
    for i in range(warmup + steps):
        start = time.perf_counter()
        losses.append(step())
        if i >= warmup:
            times.append(time.perf_counter() - start)
        if profile and framework.startswith("onnxtrain") and i + 1 == warmup:
            module.end_profiling()  # the timed steps only
    result = {"median_ms": 1000 * statistics.median(times), "first_call_s": first_call, "peak_rss_mb": peak_rss_mb(),
              "losses": losses[:3]}
    if profile and framework.startswith("onnxtrain"):
        result["kernels"] = kernel_times(module.end_profiling()[0], steps)
    return result


# ---- the driver ----


def run_block(framework: str, model_name: str, args: argparse.Namespace) -> dict | None:
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
    command = [sys.executable]
    if framework == "ort":
        if not (ORT_PYTHON.exists() and (ORT_OVERLAY / ".complete").exists() and ORT_ANCHOR.is_dir()):
            return None
        command = [str(ORT_PYTHON)]
        env["PYTHONPATH"] = f"{ORT_OVERLAY}:{ORT_ANCHOR}"
    command += [__file__, "--worker", framework, model_name, "--steps", str(args.steps), "--warmup",
                str(args.warmup), "--threads", str(args.threads)]
    if args.profile:
        command += ["--profile", args.profile]
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=1800)
    if result.returncode != 0:
        print(f"  {framework} {model_name} failed:\n{result.stderr[-2000:]}", file=sys.stderr)
        return None
    return json.loads(result.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", choices=MODELS, default=list(MODELS))
    parser.add_argument("--frameworks", nargs="+", choices=FRAMEWORKS, default=list(FRAMEWORKS))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--profile", metavar="DIR", help="time onnxtrain's kernels (engine profiles written "
                        "to DIR; the table of the last round's forward and backward by op type follows)")
    parser.add_argument("--worker", nargs=2, metavar=("FRAMEWORK", "MODEL"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(args.worker[0], args.worker[1], args.steps, args.warmup, args.threads, args.profile)))
        return
    if args.profile:
        os.makedirs(args.profile, exist_ok=True)

    results: dict[tuple[str, str], list[dict]] = {}
    for r in range(args.rounds):
        for model_name in args.models:
            order = args.frameworks if r % 2 == 0 else list(reversed(args.frameworks))
            for framework in order:
                block = run_block(framework, model_name, args)
                if block is not None:
                    results.setdefault((model_name, framework), []).append(block)
                    print(f"round {r + 1} {model_name:8s} {framework:9s} {block['median_ms']:9.1f} ms  "
                          f"first call {block['first_call_s']:.2f} s  peak {block['peak_rss_mb']:.0f} MB  "
                          f"load {os.getloadavg()[0]:.1f}", flush=True)

    def median(model_name: str, framework: str, key: str) -> float | None:
        blocks = results.get((model_name, framework))
        return statistics.median(b[key] for b in blocks) if blocks else None

    print(f"\nthreads {args.threads}, {args.rounds} rounds of {args.steps} steps (median of rounds of medians)\n")
    header = "| model | " + " | ".join(f"{TITLES[f]} ms" for f in args.frameworks)
    header += " | onnxtrain / torch | onnxtrain / ORT | first call onnxtrain / ORT s | peak MB " + " / ".join(
        args.frameworks) + " |"
    print(header)
    print("|" + "---|" * (header.count("|") - 1))
    for model_name in args.models:
        times = {f: median(model_name, f, "median_ms") for f in args.frameworks}
        cells = [f"{times[f]:.1f}" if times[f] is not None else "—" for f in args.frameworks]
        ratio = lambda a, b: f"{times[a] / times[b]:.2f}" if times.get(a) and times.get(b) else "—"  # noqa: E731
        first = [median(model_name, f, "first_call_s") for f in ("onnxtrain", "ort")]
        peaks = [median(model_name, f, "peak_rss_mb") for f in args.frameworks]
        print(f"| {model_name} | " + " | ".join(cells) + f" | {ratio('onnxtrain', 'torch')} | {ratio('onnxtrain', 'ort')} | "
              + " / ".join(f"{v:.2f}" if v else "—" for v in first) + " | "
              + " / ".join(f"{v:.0f}" if v else "—" for v in peaks) + " |")
    if args.profile:
        print_kernel_times(results)


def print_kernel_times(results: dict) -> None:
    """The last round's onnxtrain kernels per step, by run and op type (the ten largest)."""
    for (model_name, framework), blocks in results.items():
        kernels = blocks[-1].get("kernels")
        if not kernels:
            continue
        print(f"\n{model_name}, {framework}: forward run {kernels['forward run']:.1f} ms, backward run "
              f"{kernels['backward run']:.1f} ms a step; kernels by op type (ms a step):")
        for kind in ("forward", "backward"):
            top = sorted(kernels[kind].items(), key=lambda item: -item[1])[:10]
            print(f"  {kind}: " + ", ".join(f"{op} {ms:.2f}" for op, ms in top))


if __name__ == "__main__":
    main()
