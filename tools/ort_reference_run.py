"""A short training run in onnxruntime-training 1.19.2 with its defaults, recorded step by step
into tests/python/training/ort_1_19_2_reference_run.json; test_ort_reference_run.py runs the
same with onnxtrain (change the import line only) and compares every step.

Run it in onnxruntime-training's own virtualenv (scripts/setup_ort_training.sh)::

    ~/.cache/onnxtrain/ort-training-1.19.2/bin/python tools/ort_reference_run.py

The model and the data come from this file's functions, which use numpy and onnx only, so
both sides build the very same ones. ``--out -`` prints the record instead of writing it.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OUTPUT = Path(__file__).resolve().parents[1] / "tests/python/training/ort_1_19_2_reference_run.json"
STEPS = 20
BATCH = 8
FEATURES, HIDDEN, CLASSES = 10, 16, 5
# The documented schedule: 4 warm-up steps of 20. ORT 1.19.2's Python LinearLRScheduler hands
# its two counts to the engine swapped, so the ORT run passes them swapped to get that schedule.
WARMUP, TOTAL, INITIAL_LR = 4, STEPS, 0.01


def make_model() -> onnx.ModelProto:
    """An MLP (Gemm, Relu, Gemm) with weights from a fixed seed; opset 17, IR 8."""
    rng = np.random.default_rng(1234)
    weights = {
        "fc1.weight": (rng.standard_normal((HIDDEN, FEATURES)) * 0.3).astype(np.float32),
        "fc1.bias": (rng.standard_normal(HIDDEN) * 0.1).astype(np.float32),
        "fc2.weight": (rng.standard_normal((CLASSES, HIDDEN)) * 0.3).astype(np.float32),
        "fc2.bias": (rng.standard_normal(CLASSES) * 0.1).astype(np.float32),
    }
    nodes = [
        helper.make_node("Gemm", ["input", "fc1.weight", "fc1.bias"], ["hidden"], name="fc1", transB=1),
        helper.make_node("Relu", ["hidden"], ["relu"], name="relu"),
        helper.make_node("Gemm", ["relu", "fc2.weight", "fc2.bias"], ["logits"], name="fc2", transB=1),
    ]
    graph = helper.make_graph(
        nodes, "mlp", [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch", FEATURES])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", CLASSES])],
        [numpy_helper.from_array(v, k) for k, v in weights.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def make_batches() -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(99)
    return [(rng.standard_normal((BATCH, FEATURES)).astype(np.float32),
             rng.integers(0, CLASSES, BATCH).astype(np.int64)) for _ in range(STEPS)]


def run(training: Any, optimizer_kind: Any, folder: Path, scheduler_counts: tuple[int, int] | None) -> dict[str, Any]:
    """Trains with ``training`` (``onnxruntime.training`` or ``onnxtrain.training``) and the
    library's defaults; returns the per-step losses and learning rates and the final weights.
    ``optimizer_kind``: an ``OptimType`` member's name, or an optimizer block of the library.
    ``scheduler_counts``: (warmup_step_count, total_step_count) as passed to the library."""
    from importlib import import_module

    artifacts = import_module(training.__name__ + ".artifacts")
    api = import_module(training.__name__ + ".api")
    model = make_model()
    artifacts.generate_artifacts(
        model, requires_grad=[t.name for t in model.graph.initializer], loss=artifacts.LossType.CrossEntropyLoss,
        optimizer=getattr(artifacts.OptimType, optimizer_kind) if isinstance(optimizer_kind, str) else optimizer_kind,
        artifact_directory=str(folder))
    state = api.CheckpointState.load_checkpoint(str(folder / "checkpoint"))
    module = api.Module(str(folder / "training_model.onnx"), state, str(folder / "eval_model.onnx"))
    optimizer = api.Optimizer(str(folder / "optimizer_model.onnx"), module)
    record: dict[str, Any] = {"initial_learning_rate": float(optimizer.get_learning_rate())}
    scheduler = None
    if scheduler_counts is not None:
        scheduler = api.LinearLRScheduler(optimizer, scheduler_counts[0], scheduler_counts[1], INITIAL_LR)
    losses, rates = [], []
    module.train()
    for x, labels in make_batches():
        rates.append(float(optimizer.get_learning_rate()))
        loss = module(x, labels)
        losses.append(float(loss[0] if isinstance(loss, (tuple, list)) else loss))
        optimizer.step()
        module.lazy_reset_grad()
        if scheduler is not None:
            scheduler.step()
    module.eval()
    x, labels = make_batches()[0]
    eval_loss = module(x, labels)
    record.update({
        "losses": losses, "learning_rates": rates,
        "eval_loss": float(eval_loss[0] if isinstance(eval_loss, (tuple, list)) else eval_loss),
        "parameters": {name: np.asarray(p.data).astype(float).ravel().tolist() for name, p in state.parameters},
    })
    return record


def record_ort() -> dict[str, Any]:
    import onnxruntime
    from onnxruntime import training

    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        for name in ("adamw", "sgd", "swap"):
            (root / name).mkdir()
        return {
            "onnxruntime_version": onnxruntime.__version__,
            "steps": STEPS, "warmup": WARMUP, "total": TOTAL, "initial_lr": INITIAL_LR,
            # AdamW with its defaults, scheduled as documented (the counts passed swapped).
            "adamw": run(training, "AdamW", root / "adamw", (TOTAL, WARMUP)),
            # SGD with its defaults and the checkpoint's learning rate, no scheduler.
            "sgd": run(training, "SGD", root / "sgd", None),
            # The drop-in call LinearLRScheduler(opt, warmup=4, total=20): its learning rates.
            "scheduler_as_called": run(training, "SGD", root / "swap", (WARMUP, TOTAL))["learning_rates"],
        }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(OUTPUT), help="where to write the record ('-': stdout)")
    args = parser.parse_args()
    record = record_ort()
    if record["onnxruntime_version"] != "1.19.2":
        print(f"ort_reference_run: expected onnxruntime-training 1.19.2, found {record['onnxruntime_version']}",
              file=sys.stderr)
        return 1
    text = json.dumps(record, indent=1) + "\n"
    if args.out == "-":
        sys.stdout.write(text)
    else:
        Path(args.out).write_text(text)
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
