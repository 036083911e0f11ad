"""One training step (forward + loss + backward + AdamW step), time and peak memory:
onnxtrain against PyTorch and onnxruntime-training 1.19.2 (issue 4's benchmark).

The models are the parity tests' MLP, CNN (with BatchNorm) and small GPT
(``zoo/training.py``), on the same fixed batches:

- onnxtrain: ``generate_artifacts(..., loss=CrossEntropyLoss, optimizer=AdamW)``, then
  ``Module``/``Optimizer``; each step is ``module(x, y); optimizer.step(); module.lazy_reset_grad()``;
- PyTorch: the same module and weights, ``F.cross_entropy``, ``torch.optim.AdamW``,
  ``zero_grad(set_to_none=True)``;
- ORT-training: onnxruntime-training's own artifacts for the same ONNX model, the same loop.
  It lives in its own virtualenv (``scripts/setup_ort_training.sh``); without it the other
  columns are still measured.
- onnxtrain on ORT's files (``onnxtrain-ort``): onnxtrain training ORT-training's own
  artifacts and ODTC checkpoint, as they are (issue 16), the same loop; its own table sets it
  beside ORT-training running the same files.

The ONNX runtimes' Modules load the training model only: the step never runs the eval
model (and ORT-training's eval model of the CNN does not load: its BatchNormalization nodes
keep the training outputs with training_mode=0).

All run at the same thread count (``torch.set_num_threads``, ``intra_op_num_threads``, and
OMP_NUM_THREADS in each process). The parent exports the models and the data (.onnx, .npz)
and generates the artifacts up front; every measurement then runs in a fresh process that
loads them, so its peak RSS (VmHWM, see ``peak_rss_mb``) is that framework's alone, and the
onnxtrain process never imports torch. Memory is shown as the peak and as the peak's growth
over the process's peak right after its imports ("+N"). Step time is the median of
``--steps`` steps after ``--warmup``; ``--rounds`` interleaved rounds over every (threads,
model, framework) follow each other and the table shows the median of the rounds (each
round is listed below it), with the load average, since the 2 cores are shared.

``--contention N`` measures every case a second time next to N busy processes
(``contention.py``) and prints each framework's slowdown.

    PYTHONPATH=build/<dir>/python .venv/bin/python bench/training_step.py [--threads 1 2] [--rounds 3]
    PYTHONPATH=build/<dir>/python .venv/bin/python bench/training_step.py --threads 2 --contention 1
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np
from contention import Competitors

ROOT = Path(__file__).resolve().parents[1]
MODELS = ("mlp", "cnn", "gpt")
# Issue 13's models (zoo/training.py): larger, timed with --models; target <= 0.9x PyTorch.
TRIO = ("llama", "lstm", "gru", "qat")
FRAMEWORKS = ("onnxtrain", "ort-training", "torch", "onnxtrain-ort")
TITLES = {"onnxtrain": "onnxtrain", "torch": "PyTorch", "ort-training": "ORT-training",
          "onnxtrain-ort": "onnxtrain on ORT's files", "torch-fused": "PyTorch fused"}  # the last: training_scale.py's
# onnxtrain's target on ORT-training's own artifacts: at most this share of ORT's step time.
ORT_FILES_TARGET = 0.77
ORT_TRAINING_PYTHON = Path.home() / ".cache" / "onnxtrain" / "ort-training-1.19.2" / "bin" / "python"
LEARNING_RATE = 1e-3
WEIGHT_DECAY = 0.01  # torch's AdamW default; the artifacts keep generate_artifacts' 0 (ORT's): the same work per step


# ---- measurement, in the child process of one framework ----


def peak_rss_mb() -> float:
    """This process's peak resident size, in MiB.

    VmHWM, not getrusage's ru_maxrss: Linux carries ru_maxrss across exec, so a child
    spawned by a large parent (this one holds torch and the exported models) would report
    at least the parent's size."""
    with open("/proc/self/status") as status:
        return int(re.search(r"VmHWM:\s+(\d+) kB", status.read()).group(1)) / 1024


def load_batches(folder: Path) -> list[tuple[np.ndarray, np.ndarray]]:
    data = np.load(folder / "data.npz")
    return list(zip(data["inputs"], data["labels"]))


def time_steps(train: Callable[[Any, Any], Any], update: Callable[[], None],
               batches: list[tuple[Any, Any]], warmup: int, steps: int) -> dict:
    """Runs warmup + steps training steps; the medians of the whole step and of its parts."""
    whole, train_part, update_part, losses = [], [], [], []
    for i in range(warmup + steps):
        x, y = batches[i % len(batches)]
        start = time.perf_counter()
        loss = train(x, y)
        middle = time.perf_counter()
        update()
        end = time.perf_counter()
        losses.append(float(loss))
        if i >= warmup:
            whole.append(end - start)
            train_part.append(middle - start)
            update_part.append(end - middle)
    return {"step_ms": statistics.median(whole) * 1e3, "mean_ms": statistics.fmean(whole) * 1e3,
            "train_ms": statistics.median(train_part) * 1e3, "optimizer_ms": statistics.median(update_part) * 1e3,
            "first_loss": losses[0], "last_loss": losses[-1]}


def measure_onnxtrain(folder: Path, threads: int, warmup: int, steps: int, files: str = "onnxtrain") -> dict:
    """`files`: whose artifacts onnxtrain trains, its own or ORT-training's ("ort-training")."""
    import onnxtrain
    from onnxtrain.training.api import CheckpointState, Module, Optimizer

    baseline = peak_rss_mb()
    artifacts = folder / files
    options = onnxtrain.SessionOptions()
    options.intra_op_num_threads = threads
    state = CheckpointState.load_checkpoint(artifacts / "checkpoint")
    module = Module(artifacts / "training_model.onnx", state, session_options=options)
    optimizer = Optimizer(artifacts / "optimizer_model.onnx", module)
    optimizer.set_learning_rate(LEARNING_RATE)

    def update() -> None:
        optimizer.step()
        module.lazy_reset_grad()

    result = time_steps(module, update, load_batches(folder), warmup, steps)
    assert "torch" not in sys.modules, "the onnxtrain measurement must not load torch"
    return {**result, "baseline_mb": baseline}


def measure_ort_training(folder: Path, threads: int, warmup: int, steps: int) -> dict:
    import onnxruntime
    from onnxruntime.training.api import CheckpointState, Module, Optimizer

    baseline = peak_rss_mb()
    artifacts = folder / "ort-training"
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    state = CheckpointState.load_checkpoint(str(artifacts / "checkpoint"))
    module = Module(str(artifacts / "training_model.onnx"), state, device="cpu", session_options=options)
    optimizer = Optimizer(str(artifacts / "optimizer_model.onnx"), module)
    optimizer.set_learning_rate(LEARNING_RATE)
    module.train()

    def update() -> None:
        optimizer.step()
        module.lazy_reset_grad()

    return {**time_steps(module, update, load_batches(folder), warmup, steps), "baseline_mb": baseline}


def torch_module(model: str, folder: Path) -> Any:
    """The torch module of `model` (zoo/training.py) with the weights the ONNX model was exported with."""
    import torch
    from zoo.training import training_module

    module = training_module(model)
    module.load_state_dict(torch.load(folder / "torch_state.pt"))
    return module.train()


def measure_torch(folder: Path, threads: int, warmup: int, steps: int) -> dict:
    import torch

    sys.path.insert(0, str(ROOT))
    import zoo  # noqa: F401
    if folder.name == "gpt":
        import transformers  # noqa: F401 (the model's own library: part of the framework's imports)
    baseline = peak_rss_mb()
    torch.set_num_threads(threads)
    module = torch_module(folder.name, folder)
    optimizer = torch.optim.AdamW(module.parameters(), lr=LEARNING_RATE, weight_decay=WEIGHT_DECAY)
    return {**time_torch_steps(module, optimizer, folder, warmup, steps), "baseline_mb": baseline}


def time_torch_steps(module: Any, optimizer: Any, folder: Path, warmup: int, steps: int) -> dict:
    """PyTorch's step on `folder`'s batches: zero_grad, cross-entropy, backward, optimizer.step."""
    import torch
    import torch.nn.functional as F

    batches = [(torch.from_numpy(x), torch.from_numpy(y)) for x, y in load_batches(folder)]

    def train(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        optimizer.zero_grad(set_to_none=True)
        loss = F.cross_entropy(module(x), y)
        loss.backward()
        return loss.detach()

    return time_steps(train, optimizer.step, batches, warmup, steps)


MEASURE = {"onnxtrain": measure_onnxtrain, "torch": measure_torch, "ort-training": measure_ort_training,
           "onnxtrain-ort": lambda *args: measure_onnxtrain(*args, files="ort-training")}


def run_measurement(framework: str, folder: Path, threads: int, warmup: int, steps: int) -> None:
    result = MEASURE[framework](folder, threads, warmup, steps)
    print(json.dumps({**result, "peak_mb": peak_rss_mb()}))


# ---- onnxruntime-training's artifacts, in its own virtualenv ----


def with_layer_norm_statistics(model: Any) -> Any:
    """The model with LayerNormalization's optional Mean and InvStdDev outputs declared:
    the same computation, but ORT-training's LayerNormalization gradient reads them."""
    for node in model.graph.node:
        if node.op_type == "LayerNormalization" and len(node.output) == 1:
            node.output.extend([f"{node.output[0]}.mean", f"{node.output[0]}.inv_std_dev"])
    return model


def generate_ort_training_artifacts(folder: Path) -> None:
    import onnx
    from onnxruntime.training import artifacts

    requires_grad = json.loads((folder / "trainable.json").read_text())
    target = folder / "ort-training"
    target.mkdir(exist_ok=True)

    def generate(model: Any) -> None:
        artifacts.generate_artifacts(model, requires_grad=requires_grad, loss=artifacts.LossType.CrossEntropyLoss,
                                     optimizer=artifacts.OptimType.AdamW, artifact_directory=str(target))

    note = ""
    try:
        generate(onnx.load(folder / "model.onnx"))
    except RuntimeError as error:
        model = onnx.load(folder / "model.onnx")
        if not any(n.op_type == "LayerNormalization" and len(n.output) == 1 for n in model.graph.node):
            raise
        reason = re.sub(r"/\S*/", "", str(error).strip().splitlines()[0])[:200]  # no build paths
        note = (f"the export as is fails ({reason}); its LayerNormalization nodes given their optional "
                "Mean/InvStdDev outputs, which ORT-training's gradient rule reads")
        generate(with_layer_norm_statistics(model))
    print(json.dumps({"note": note}))


# ---- the parent: prepare, run the children, print the tables ----


def prepare(models: list[str], frameworks: list[str], batch_count: int, work: Path) -> dict[str, tuple[str, str]]:
    """Exports each model, its data and torch weights into work/<model>/ and generates
    onnxtrain's and ORT-training's artifacts there. Returns, per model, why ORT-training
    has no artifacts ("" when it has) and what was changed on the input side for it."""
    import torch

    sys.path.insert(0, str(ROOT))
    from zoo.training import make_case, trainable_names

    ort_outcome: dict[str, tuple[str, str]] = {}
    for name in models:
        folder = work / name
        case = make_case(name, folder)
        trainable = trainable_names(case)
        case.onnx_path.rename(folder / "model.onnx")
        (folder / "trainable.json").write_text(json.dumps(trainable))
        inputs, labels = zip(*case.batches(batch_count))
        np.savez(folder / "data.npz", inputs=np.stack(inputs), labels=np.stack(labels))
        torch.save(case.module.state_dict(), folder / "torch_state.pt")
        if "onnxtrain" in frameworks:
            generate_onnxtrain_artifacts(folder, trainable)
        if "ort-training" in frameworks or "onnxtrain-ort" in frameworks:
            ort_outcome[name] = run_ort_artifacts_child(folder)
    return ort_outcome


def generate_onnxtrain_artifacts(folder: Path, trainable: list[str]) -> None:
    import warnings

    from onnxtrain.training import artifacts

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*stay constants")  # BatchNorm's running statistics
        artifacts.generate_artifacts(str(folder / "model.onnx"), requires_grad=trainable,
                                     loss=artifacts.LossType.CrossEntropyLoss, optimizer=artifacts.OptimType.AdamW,
                                     artifact_directory=folder / "onnxtrain")


def ort_training_available(python: Path) -> str:
    """Empty when ORT-training's virtualenv works, else how to set it up."""
    if not python.exists():
        return f"not installed: run scripts/setup_ort_training.sh (it creates {python.parents[1]})"
    check = subprocess.run([str(python), "-c", "import onnxruntime.training.api"], capture_output=True, text=True,
                           env=child_environment("ort-training", 1))
    if check.returncode != 0:
        return f"{python} cannot import onnxruntime.training: run scripts/setup_ort_training.sh"
    return ""


def child_environment(framework: str, threads: int) -> dict[str, str]:
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    if framework == "ort-training":
        env.pop("PYTHONPATH", None)  # its own virtualenv only
    return env


def run_ort_artifacts_child(folder: Path) -> tuple[str, str]:
    """Generates ORT-training's artifacts in its virtualenv: (why it failed or "", note)."""
    done = subprocess.run([str(ORT_TRAINING_PYTHON), __file__, "--ort-artifacts", str(folder)],
                          capture_output=True, text=True, env=child_environment("ort-training", 1))
    if done.returncode != 0:
        return "generate_artifacts failed: " + last_error_line(done.stderr), ""
    return "", json.loads(done.stdout.strip().splitlines()[-1])["note"]


def last_error_line(stderr: str) -> str:
    lines = [line for line in stderr.strip().splitlines() if line.strip() and not line.startswith("20")]
    return lines[-1][:200] if lines else "no message"


def run_child(framework: str, folder: Path, threads: int, args: argparse.Namespace,
              script: str = __file__) -> dict | str:
    """One measurement in a fresh process (`script --child`, this one's or another bench's):
    its result, or why it failed."""
    python = str(ORT_TRAINING_PYTHON) if framework == "ort-training" else sys.executable
    command = [python, script, "--child", framework, str(folder), "--threads", str(threads),
               "--warmup", str(args.warmup), "--steps", str(args.steps)]
    done = subprocess.run(command, capture_output=True, text=True, env=child_environment(framework, threads))
    if done.returncode != 0:
        return "failed: " + last_error_line(done.stderr)
    return json.loads(done.stdout.strip().splitlines()[-1])


def median_of(runs: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in runs)


def format_ms(ms: float) -> str:
    return f"{ms:.3g}"  # 0.0412, 1.49, 15.9: three digits whatever the model's size


def growth_mb(runs: list[dict]) -> float:
    return statistics.median(r["peak_mb"] - r["baseline_mb"] for r in runs)


def format_memory(runs: list[dict]) -> str:
    return f"{median_of(runs, 'peak_mb'):.0f} (+{growth_mb(runs):.0f})"


def format_ratios(ours: list[dict], theirs: list[dict]) -> tuple[str, str]:
    """(speed-up: their time / ours, memory: our peak / theirs (+ our growth / theirs))."""
    if not ours or not theirs:
        return "n/a", "n/a"
    speedup = median_of(theirs, "step_ms") / median_of(ours, "step_ms")
    peak = median_of(ours, "peak_mb") / median_of(theirs, "peak_mb")
    growth = growth_mb(ours) / max(growth_mb(theirs), 1e-9)
    return f"{speedup:.2f}×", f"{peak:.2f} (+{growth:.2f})"


def print_ort_files_table(threads: int, models: list[str], results: dict[tuple[int, str, str], list[dict | str]]) -> None:
    """onnxtrain and ORT-training, each training ORT-training's own artifacts."""
    print(f"\n### ORT-training's own artifacts, threads = {threads}\n")
    print("| model | onnxtrain ms | ORT-training ms | onnxtrain / ORT | target ≤ " + f"{ORT_FILES_TARGET} |")
    print("|---|---|---|---|---|")
    for model in models:
        ours = [r for r in results[threads, model, "onnxtrain-ort"] if isinstance(r, dict)]
        theirs = [r for r in results[threads, model, "ort-training"] if isinstance(r, dict)]
        cells = [format_ms(median_of(done, "step_ms")) if done else "n/a" for done in (ours, theirs)]
        if ours and theirs:
            ratio = median_of(ours, "step_ms") / median_of(theirs, "step_ms")
            cells += [f"{ratio:.2f}", "met" if ratio <= ORT_FILES_TARGET else "missed"]
        else:
            cells += ["n/a", "n/a"]
        print(f"| {model} | " + " | ".join(cells) + " |")


def print_tables(threads: int, models: list[str], frameworks: list[str],
                 results: dict[tuple[int, str, str], list[dict | str]]) -> None:
    ours = "onnxtrain"
    others = [f for f in frameworks if f not in (ours, "onnxtrain-ort")] if ours in frameworks else []

    def runs(model: str, framework: str) -> list[dict]:
        return [r for r in results[threads, model, framework] if isinstance(r, dict)]

    def failure(model: str, framework: str) -> str:
        failed = [r for r in results[threads, model, framework] if isinstance(r, str)]
        return failed[0] if failed else "n/a"

    print(f"\n### threads = {threads}\n")
    header = ["model"] + [f"{TITLES[f]} ms" for f in frameworks]
    header += [f"speed-up vs {TITLES[f]}" for f in others]
    header += [f"{TITLES[f]} MB" for f in frameworks]
    header += [f"memory vs {TITLES[f]}" for f in others]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for model in models:
        times = [format_ms(median_of(runs(model, f), "step_ms")) if runs(model, f) else failure(model, f)
                 for f in frameworks]
        memory = [format_memory(runs(model, f)) if runs(model, f) else "n/a" for f in frameworks]
        ratios = [format_ratios(runs(model, ours), runs(model, other)) for other in others]
        speedups = [speedup for speedup, _ in ratios]
        memory_ratios = [memory_ratio for _, memory_ratio in ratios]
        print("| " + " | ".join([model] + times + speedups + memory + memory_ratios) + " |")
    print("\nms: median step time (forward + loss + backward + optimizer step); speed-up = their ms / ours.")
    print("MB: peak RSS of the process (+ its growth over the peak right after imports); "
          "memory vs X = our peak / X's peak (+ our growth / X's growth): below 1 is less memory.")

    print("\nwhere the step goes (ms, medians): training call (forward + loss + backward) / optimizer step")
    print("| model | " + " | ".join(TITLES[f] for f in frameworks) + " |")
    print("|" + "---|" * (1 + len(frameworks)))
    for model in models:
        cells = []
        for f in frameworks:
            done = runs(model, f)
            cells.append(f"{format_ms(median_of(done, 'train_ms'))} / {format_ms(median_of(done, 'optimizer_ms'))}"
                         if done else "n/a")
        print(f"| {model} | " + " | ".join(cells) + " |")


def print_contention_table(threads: int, models: list[str], frameworks: list[str], competitors: int,
                           quiet: dict[tuple[int, str, str], list[dict | str]],
                           contended: dict[tuple[int, str, str], list[dict | str]]) -> None:
    """Step times next to `competitors` busy processes, and the slowdown against the quiet runs."""
    def runs(results: dict, model: str, framework: str) -> list[dict]:
        return [r for r in results[threads, model, framework] if isinstance(r, dict)]

    def slowdown(model: str, framework: str, key: str) -> float | None:
        busy, calm = runs(contended, model, framework), runs(quiet, model, framework)
        return median_of(busy, key) / median_of(calm, key) if busy and calm else None

    print(f"\n### next to {competitors} busy process(es), threads = {threads}\n")
    header = ["model"] + [f"{TITLES[f]} ms (slowdown)" for f in frameworks]
    if "onnxtrain" in frameworks and "ort-training" in frameworks:
        header.append("onnxtrain slowdown / ORT-training's")
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for model in models:
        cells = [model]
        for framework in frameworks:
            busy = runs(contended, model, framework)
            if not busy:
                cells.append("n/a")
                continue
            median, mean = slowdown(model, framework, "step_ms"), slowdown(model, framework, "mean_ms")
            cells.append(f"{format_ms(median_of(busy, 'step_ms'))} / {format_ms(median_of(busy, 'mean_ms'))} "
                         f"({median:.2f}× / {mean:.2f}×)" if median and mean else "n/a")
        if len(header) > len(frameworks) + 1:
            ours, theirs = slowdown(model, "onnxtrain", "mean_ms"), slowdown(model, "ort-training", "mean_ms")
            cells.append(f"{ours / theirs:.2f}" if ours and theirs else "n/a")
        print("| " + " | ".join(cells) + " |")
    print("\nms: median / mean step time with the competitors running; slowdown: against the same "
          "framework's quiet runs of the same rounds (median / mean). The last column compares the mean "
          "slowdowns: at most 1 means onnxtrain suffers no more than ORT-training from a shared CPU.")


def print_loss_check(models: list[str], frameworks: list[str], threads: list[int],
                     results: dict[tuple[int, str, str], list[dict | str]]) -> None:
    """The first step's loss of each framework: the same model on the same batch."""
    print("\nfirst-step loss (same model, weights and batch in every framework):")
    for model in models:
        cells = []
        for framework in frameworks:
            done = [r for r in results[threads[0], model, framework] if isinstance(r, dict)]
            cells.append(f"{TITLES[framework]} {done[0]['first_loss']:.5f}" if done else f"{TITLES[framework]} n/a")
        print(f"  {model}: " + ", ".join(cells))


def print_spread(results: dict[tuple[int, str, str], list[dict | str]]) -> None:
    """Each round's median step time: how much the shared machine moved the table."""
    print("\nms per round (the table shows their median):")
    for (threads, model, framework), runs in results.items():
        times = [format_ms(r["step_ms"]) for r in runs if isinstance(r, dict)]
        if times:
            print(f"  threads={threads} {model} {TITLES[framework]}: " + ", ".join(times))


def onnxtrain_location() -> str:
    done = subprocess.run([sys.executable, "-c", "import onnxtrain; print(onnxtrain.__file__)"],
                          capture_output=True, text=True)
    return str(Path(done.stdout.strip()).parent) if done.returncode == 0 else "(not importable)"


def git_revision() -> str:
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True)
    if head.returncode != 0:
        return "(not a git checkout)"
    return head.stdout.strip() + (" with uncommitted changes" if dirty.stdout.strip() else "")


def uptime() -> str:
    done = subprocess.run(["uptime"], capture_output=True, text=True)
    if done.returncode == 0:
        return done.stdout.strip()
    return "load average: " + ", ".join(f"{x:.2f}" for x in os.getloadavg())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--steps", type=int, default=30, help="timed steps per measurement")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3, help="interleaved repeats; the table shows their median")
    parser.add_argument("--models", default=",".join(MODELS),
                        help="comma-separated: " + ",".join(MODELS + TRIO) + " (the last four: issue 13's)")
    parser.add_argument("--frameworks", default=",".join(FRAMEWORKS), help="comma-separated: " + ",".join(FRAMEWORKS))
    parser.add_argument("--work", type=Path, help="folder for the exported models and artifacts (default: temporary)")
    parser.add_argument("--contention", type=int, default=0, metavar="N",
                        help="also measure each case next to N busy processes (started and stopped by the bench)")
    parser.add_argument("--child", nargs=2, metavar=("FRAMEWORK", "FOLDER"), help=argparse.SUPPRESS)
    parser.add_argument("--ort-artifacts", type=Path, metavar="FOLDER", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        run_measurement(args.child[0], Path(args.child[1]), args.threads[0], args.warmup, args.steps)
        return 0
    if args.ort_artifacts:
        generate_ort_training_artifacts(args.ort_artifacts)
        return 0

    models = [m for m in args.models.split(",") if m]
    frameworks = [f for f in args.frameworks.split(",") if f]
    for name in models + frameworks:
        if name not in MODELS + TRIO + FRAMEWORKS:
            parser.error(f"unknown model or framework '{name}'; models: {MODELS + TRIO}, frameworks: {FRAMEWORKS}")
    if {"ort-training", "onnxtrain-ort"} & set(frameworks) and (why := ort_training_available(ORT_TRAINING_PYTHON)):
        print(f"ORT-training {why}; measuring the other frameworks", file=sys.stderr)
        frameworks = [f for f in frameworks if f not in ("ort-training", "onnxtrain-ort")]

    with tempfile.TemporaryDirectory(prefix="training_step.") as temporary:
        work = args.work or Path(temporary)
        ort_outcome = prepare(models, frameworks, args.warmup + args.steps, work)
        load_before = uptime()
        results: dict[tuple[int, str, str], list[dict | str]] = {
            (t, m, f): [] for t in args.threads for m in models for f in frameworks}
        contended: dict[tuple[int, str, str], list[dict | str]] = {key: [] for key in results}
        for _ in range(args.rounds):
            for threads in args.threads:
                for model in models:
                    for framework in frameworks:
                        if framework in ("ort-training", "onnxtrain-ort") and ort_outcome[model][0]:
                            results[threads, model, framework].append(ort_outcome[model][0])
                            continue
                        results[threads, model, framework].append(run_child(framework, work / model, threads, args))
                        if args.contention:
                            with Competitors(args.contention):
                                contended[threads, model, framework].append(
                                    run_child(framework, work / model, threads, args))
        load_after = uptime()

    print(f"training step benchmark: {args.steps} timed steps after {args.warmup} warm-up per process, "
          f"median of {args.rounds} interleaved round(s), AdamW, cross-entropy")
    print(f"onnxtrain from {onnxtrain_location()}, tree {git_revision()}")
    print(f"before: {load_before}\nafter:  {load_after}")
    if "OMP_WAIT_POLICY" in os.environ:
        print(f"OMP_WAIT_POLICY={os.environ['OMP_WAIT_POLICY']}")
    for threads in args.threads:
        print_tables(threads, models, frameworks, results)
        if {"ort-training", "onnxtrain-ort"} <= set(frameworks):
            print_ort_files_table(threads, models, results)
        if args.contention:
            print_contention_table(threads, models, frameworks, args.contention, results, contended)
    print_loss_check(models, frameworks, args.threads, results)
    for model, (_, note) in ort_outcome.items():
        if note:
            print(f"ORT-training {model}: {note}")
    print_spread(results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
