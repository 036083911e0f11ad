"""One training step (forward + cross-entropy + backward + AdamW step) at realistic model sizes:
onnxtrain against PyTorch (for-loop and fused AdamW) and onnxruntime-training 1.19.2; step
time, achieved GFLOP/s and peak memory.

The models (``scale_models.py``, float32, seed 0, no dropout, TorchScript exports at fixed
shapes, opset 17): the MLP 1024-4096-4096-1000 at batch 256; ResNet-18 (100 classes, 112x112,
BatchNorm on batch statistics) at batch 16; the GPT decoder (d 512, 8 heads, 4 layers, T 256,
vocabulary 8192, cross-entropy over every position) at batch 8; the BERT encoder (d 768, 12
heads, 6 layers, T 128, vocabulary 8192; the first token classified into 10 classes through a
tanh pooler, one label per sequence) at batch 8.

The step is bench/training_step.py's, on the same batches, initial weights, learning rate
(1e-3) and weight decay (0.01) everywhere:

- onnxtrain: ``generate_artifacts(..., loss=CrossEntropyLoss, optimizer=AdamW)``, then
  ``Module``/``Optimizer``; each step is ``module(x, y); optimizer.step(); module.lazy_reset_grad()``;
- PyTorch: the same module and weights, ``F.cross_entropy``, ``torch.optim.AdamW`` (its
  default for-loop update), ``zero_grad(set_to_none=True)``; "PyTorch fused": the same with
  ``AdamW(fused=True)`` (n/a where this torch has no fused AdamW on the CPU);
- ORT-training: onnxruntime-training's own artifacts of the same ONNX model, the same loop, in
  its own virtualenv (``scripts/setup_ort_training.sh``; without it its columns read n/a).

``generate_artifacts``' AdamW has ORT-training's defaults (epsilon 1e-6, weight decay 0): the
weight decay of both runtimes' optimizer models is set to torch's 0.01, and PyTorch gets
their epsilon, 1e-6 (the ONNX runtimes' update adds it before the bias correction, torch's
after: the same work).

As in training_step.py, the parent exports the models, data and artifacts up front, and every
measurement runs in a fresh process of one framework (peak RSS from VmHWM, "+N" its growth
over the peak right after the imports; the onnxtrain process never imports torch), at
``--threads`` threads; a step time is the median of ``--steps`` steps after ``--warmup``, and
``--rounds`` interleaved rounds give the tables' median and the fastest round ("min"). Achieved
GFLOP/s: 3x the forward's matmul and convolution FLOPs (counted from the shapes) over the
median step, against the GEMM peak measured first (``inference_scale.gemm_peak``: onnxtrain's
float32 MatMul, ``--gemm-size`` cubed, constant weight, at the same thread count).

``--contention N`` measures every case a second time next to N busy processes
(``contention.py``) and prints each framework's slowdown and onnxtrain's against ORT-training's.

    PYTHONPATH=build/<dir>/python .venv/bin/python bench/training_scale.py [--rounds 3] [--models gpt,bert]
    PYTHONPATH=build/<dir>/python .venv/bin/python bench/training_scale.py --models gpt --batch 4 --seq-len 128
    PYTHONPATH=build/<dir>/python .venv/bin/python bench/training_scale.py --contention 1
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import tempfile
from pathlib import Path

import numpy as np
from contention import Competitors
from inference_scale import format_rate, gemm_peak
from scale_models import TRAINING, Spec, build_module, export, make_batches, resized, step_flops, trainable_names
from training_step import (LEARNING_RATE, ORT_TRAINING_PYTHON, TITLES, WEIGHT_DECAY, format_ms,
                           generate_onnxtrain_artifacts, git_revision, load_batches, measure_onnxtrain,
                           measure_ort_training, median_of, onnxtrain_location, ort_training_available, peak_rss_mb,
                           print_contention_table, print_loss_check, print_spread, print_tables, run_child,
                           run_ort_artifacts_child, time_torch_steps, uptime)

FRAMEWORKS = ("onnxtrain", "torch", "torch-fused", "ort-training")
EPSILON = 1e-6  # generate_artifacts' AdamW epsilon (onnxtrain's and ORT-training's)
BATCHES = 4  # distinct batches, cycled through the steps

Results = dict[tuple[int, str, str], list[dict | str]]


# ---- measurement, in the child process of one framework ----


def measure_torch(folder: Path, threads: int, warmup: int, steps: int, fused: bool = False) -> dict:
    import torch

    spec = Spec(**json.loads((folder / "spec.json").read_text()))
    if spec.model.startswith("resnet"):
        import torchvision  # noqa: F401 (the model's own library: part of the framework's imports)
    baseline = peak_rss_mb()
    torch.set_num_threads(threads)
    module = build_module(spec, train=True)
    module.load_state_dict(torch.load(folder / "torch_state.pt"))
    optimizer = torch.optim.AdamW(module.parameters(), lr=LEARNING_RATE, weight_decay=WEIGHT_DECAY, eps=EPSILON,
                                  fused=fused or None)
    return {**time_torch_steps(module, optimizer, folder, warmup, steps), "baseline_mb": baseline}


MEASURE = {"onnxtrain": measure_onnxtrain, "ort-training": measure_ort_training, "torch": measure_torch,
           "torch-fused": lambda *args: measure_torch(*args, fused=True)}


def run_measurement(framework: str, folder: Path, threads: int, warmup: int, steps: int) -> None:
    result = MEASURE[framework](folder, threads, warmup, steps)
    print(json.dumps({**result, "peak_mb": peak_rss_mb()}))


# ---- the parent: prepare, run the children, print the tables ----


def set_weight_decay(optimizer_model: Path) -> None:
    """Sets the weight decay of the AdamW nodes of `optimizer_model` to WEIGHT_DECAY: onnxtrain's
    AdamWStep (one per parameter) holds it as a tensor, ORT-training's AdamWOptimizer as a float."""
    import onnx
    from onnx import helper, numpy_helper

    model = onnx.load(str(optimizer_model))
    attributes = [a for node in model.graph.node for a in node.attribute if a.name == "weight_decay"]
    if not attributes:
        raise ValueError(f"{optimizer_model} has no AdamW node with a weight_decay attribute")
    for attribute in attributes:
        if attribute.type == onnx.AttributeProto.FLOAT:
            attribute.f = WEIGHT_DECAY
        else:
            dtype = helper.tensor_dtype_to_np_dtype(attribute.t.data_type)
            attribute.t.CopyFrom(numpy_helper.from_array(np.array(WEIGHT_DECAY, dtype)))
    onnx.save(model, str(optimizer_model))


def fused_adamw_missing() -> str:
    """Empty when torch's fused AdamW runs on the CPU here, else why not."""
    import torch

    parameter = torch.nn.Parameter(torch.ones(2))
    try:
        optimizer = torch.optim.AdamW([parameter], fused=True)
        parameter.sum().backward()
        optimizer.step()
    except (RuntimeError, ValueError) as error:
        return str(error).splitlines()[0][:200]
    return ""


def unavailable_frameworks(frameworks: list[str]) -> dict[str, str]:
    """The frameworks asked for that cannot run here, and why: their columns read n/a."""
    checks = {"ort-training": lambda: ort_training_available(ORT_TRAINING_PYTHON), "torch-fused": fused_adamw_missing}
    reasons = {f: checks[f]() for f in frameworks if f in checks}
    return {f: why for f, why in reasons.items() if why}


def prepare(specs: dict[str, Spec], frameworks: list[str], work: Path) -> dict[str, tuple[str, str]]:
    """Exports each model, its data and torch weights into work/<model>/ and generates the
    artifacts there (training_step.py's layout). Returns, per model, why ORT-training has no
    artifacts ("" when it has) and what was changed on the input side for it."""
    import torch

    ort_outcome: dict[str, tuple[str, str]] = {}
    for name, spec in specs.items():
        folder = work / name
        folder.mkdir(parents=True, exist_ok=True)
        module = build_module(spec, train=True)
        inputs, labels = zip(*make_batches(spec, BATCHES))
        export(module, spec, inputs[0], folder / "model.onnx")
        trainable = trainable_names(module, folder / "model.onnx")
        (folder / "trainable.json").write_text(json.dumps(trainable))
        (folder / "spec.json").write_text(json.dumps(dataclasses.asdict(spec)))
        np.savez(folder / "data.npz", inputs=np.stack(inputs), labels=np.stack(labels))
        torch.save(module.state_dict(), folder / "torch_state.pt")
        if "onnxtrain" in frameworks:
            generate_onnxtrain_artifacts(folder, trainable)
            set_weight_decay(folder / "onnxtrain" / "optimizer_model.onnx")
        if "ort-training" in frameworks:
            ort_outcome[name] = run_ort_artifacts_child(folder)
            if not ort_outcome[name][0]:
                set_weight_decay(folder / "ort-training" / "optimizer_model.onnx")
    return ort_outcome


def measure_all(models: list[str], frameworks: list[str], skipped: dict[tuple[str, str], str],
                args: argparse.Namespace, work: Path) -> tuple[Results, Results]:
    """The rounds: every (model, framework) not `skipped` (whose reason stands in for its
    results), quiet and (with --contention) next to the competitors."""
    quiet: Results = {(args.threads, m, f): [] for m in models for f in frameworks}
    contended: Results = {key: [] for key in quiet}
    for _ in range(args.rounds):
        for model in models:
            for framework in frameworks:
                key = (args.threads, model, framework)
                if (model, framework) in skipped:
                    quiet[key].append(skipped[model, framework])
                    continue
                quiet[key].append(run_child(framework, work / model, args.threads, args, script=__file__))
                if args.contention:
                    with Competitors(args.contention):
                        contended[key].append(run_child(framework, work / model, args.threads, args, script=__file__))
    return quiet, contended


def print_rates(specs: dict[str, Spec], frameworks: list[str], results: Results, threads: int,
                peak: float | None) -> None:
    """The fastest rounds and the achieved GFLOP/s of each framework."""
    def runs(model: str, framework: str) -> list[dict]:
        return [r for r in results[threads, model, framework] if isinstance(r, dict)]

    header = ["model", "shape", "GFLOP / step"] + [f"{TITLES[f]} min ms" for f in frameworks]
    header += [f"{TITLES[f]} GFLOP/s (% of peak)" for f in frameworks]
    print("\n| " + " | ".join(header) + " |\n|" + "---|" * len(header))
    for model, spec in specs.items():
        done = {f: runs(model, f) for f in frameworks}
        cells = [model, spec.label(), f"{step_flops(spec) / 1e9:.3g}"]
        cells += [format_ms(min(r["step_ms"] for r in done[f])) if done[f] else "n/a" for f in frameworks]
        cells += [format_rate(step_flops(spec), median_of(done[f], "step_ms"), peak) if done[f] else "n/a"
                  for f in frameworks]
        print("| " + " | ".join(cells) + " |")
    print("\nmin ms: the fastest round's median step. GFLOP/s: 3 x the forward's matmul and convolution FLOPs "
          "over the median step (% of the GEMM peak).")


def print_notes(ort_outcome: dict[str, tuple[str, str]], unavailable: dict[str, str]) -> None:
    for framework, why in unavailable.items():
        print(f"{TITLES[framework]}: n/a, {why}")
    for model, (why, note) in ort_outcome.items():
        if why or note:
            print(f"ORT-training {model}: {why or note}")


def parse_arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=2, help="threads of every framework")
    parser.add_argument("--models", default=",".join(TRAINING), help="comma-separated: " + ",".join(TRAINING))
    parser.add_argument("--frameworks", default=",".join(FRAMEWORKS), help="comma-separated: " + ",".join(FRAMEWORKS))
    parser.add_argument("--batch", type=int, help="one batch size for every model (default: each model's own)")
    parser.add_argument("--seq-len", type=int, help="sequence length of gpt and bert (default: 256 and 128)")
    parser.add_argument("--steps", type=int, default=10, help="timed steps per measurement")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3, help="interleaved repeats; the table shows their median")
    parser.add_argument("--gemm-size", type=int, default=2048, help="the GEMM peak's matrix side")
    parser.add_argument("--work", type=Path, help="folder for the exported models and artifacts (default: temporary)")
    parser.add_argument("--contention", type=int, default=0, metavar="N",
                        help="also measure each case next to N busy processes (started and stopped by the bench)")
    parser.add_argument("--child", nargs=2, metavar=("FRAMEWORK", "FOLDER"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.models = [m for m in args.models.split(",") if m]
    args.frameworks = [f for f in args.frameworks.split(",") if f]
    for name in args.models + args.frameworks:
        if name not in (*TRAINING, *FRAMEWORKS):
            parser.error(f"unknown model or framework '{name}'; models: {tuple(TRAINING)}, frameworks: {FRAMEWORKS}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_arguments(argv)
    if args.child:
        run_measurement(args.child[0], Path(args.child[1]), args.threads, args.warmup, args.steps)
        return 0
    specs = {m: resized(TRAINING[m], args.batch, args.seq_len) for m in args.models}
    frameworks = args.frameworks
    unavailable = unavailable_frameworks(frameworks)

    with tempfile.TemporaryDirectory(prefix="training_scale.") as temporary:
        work = args.work or Path(temporary)
        ort_outcome = prepare(specs, [f for f in frameworks if f not in unavailable], work)
        skipped = {(m, f): "n/a" for m in specs for f in unavailable}
        skipped.update({(m, "ort-training"): why for m, (why, _) in ort_outcome.items() if why})
        load_before = uptime()
        peak, peak_line = gemm_peak(args.threads, args.gemm_size, work)
        results, contended = measure_all(list(specs), frameworks, skipped, args, work)
        load_after = uptime()

    print(f"training at scale: {args.steps} timed steps after {args.warmup} warm-up per process, median of "
          f"{args.rounds} interleaved round(s), AdamW (lr {LEARNING_RATE}, weight decay {WEIGHT_DECAY}), cross-entropy")
    print(f"onnxtrain from {onnxtrain_location()}, tree {git_revision()}")
    print(f"before: {load_before}\nafter:  {load_after}\n{peak_line}")
    print_tables(args.threads, list(specs), frameworks, results)
    print_rates(specs, frameworks, results, args.threads, peak)
    if args.contention:
        print_contention_table(args.threads, list(specs), frameworks, args.contention, results, contended)
    print_loss_check(list(specs), frameworks, [args.threads], results)
    print_notes(ort_outcome, unavailable)
    print_spread(results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
