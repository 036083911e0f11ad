"""`onnxtrain train`: train artifacts on a data set, with a progress bar.

With no arguments it runs the built-in job end to end: a small CNN on scikit-learn's
bundled digits (8x8 images, 10 classes; nothing is downloaded) — build the ONNX model,
generate the artifacts, train, save the checkpoint, export the inference model, report the
held-out accuracy and write the loss curve as a PNG.

With ``--artifacts DIR --data FILE.npz`` it trains a user's own artifacts (from
``generate_artifacts`` or ``onnxtrain gen-artifacts``) on the arrays of an .npz file, one
array per user input of the training model, by input name (``--map name=array`` renames).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from onnxtrain._session import InferenceSession, SessionOptions
from onnxtrain.training.api import CheckpointState, LinearLRScheduler, Module, Optimizer


@dataclass
class DataSet:
    """Arrays fed in the training model's input order; the first axis indexes samples."""

    arrays: list[np.ndarray]

    def __len__(self) -> int:
        return len(self.arrays[0])

    def batches(self, size: int, rng: np.random.Generator | None) -> Any:
        order = rng.permutation(len(self)) if rng is not None else np.arange(len(self))
        for start in range(0, len(self), size):
            index = order[start:start + size]
            yield [np.ascontiguousarray(a[index]) for a in self.arrays]


@dataclass
class EpochStats:
    """One epoch's summary: mean training loss, running training accuracy (when the model
    outputs logits), held-out accuracy (when there is a held-out set) and throughput."""

    epoch: int
    loss: float
    accuracy: float | None
    samples_per_second: float
    held_out_accuracy: float | None = None


def _require_examples_extra(what: str, modules: Sequence[str]) -> None:
    """Raises before any work when a package of the `examples` extra that `what` needs is missing."""
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        names = {"sklearn": "scikit-learn"}
        raise RuntimeError(f"{what} needs {', '.join(names.get(m, m) for m in missing)}, which the examples extra "
                           f"installs: pip install 'onnxtrain[examples]'")


def _progress(total: int, description: str) -> Any:
    try:
        from tqdm import tqdm
    except ImportError:  # still train, just without the bar
        return None
    # disable=None: no bar when stderr is not a terminal (CI logs keep the epoch lines only).
    return tqdm(total=total, desc=description, unit="batch", leave=False, dynamic_ncols=True, file=sys.stderr,
                disable=None)


def _accuracy(logits: np.ndarray, labels: np.ndarray) -> float:
    return float(np.mean(np.argmax(logits.reshape(len(labels), -1), axis=1) == labels))


def train(module: Module, optimizer: Optimizer, data: DataSet, epochs: int, batch_size: int, seed: int,
          logits_index: int | None = None, labels_index: int | None = None,
          scheduler: LinearLRScheduler | None = None,
          evaluate: Callable[[], float] | None = None) -> tuple[list[float], list[EpochStats]]:
    """Trains for ``epochs``; returns every step's loss and each epoch's summary. When the
    training model outputs logits (``logits_index``), the running accuracy is reported;
    ``evaluate`` (called after each epoch) gives the held-out accuracy."""
    rng = np.random.default_rng(seed)
    losses: list[float] = []
    history: list[EpochStats] = []
    steps_per_epoch = (len(data) + batch_size - 1) // batch_size
    for epoch in range(1, epochs + 1):
        module.train()
        bar = _progress(steps_per_epoch, f"epoch {epoch}/{epochs}")
        started, seen, correct, epoch_losses = time.perf_counter(), 0, 0.0, []
        for batch in data.batches(batch_size, rng):
            outputs = module(*batch)
            loss = outputs[0] if isinstance(outputs, tuple) else outputs
            optimizer.step()
            if scheduler is not None:
                scheduler.step()
            module.lazy_reset_grad()
            losses.append(float(loss))
            epoch_losses.append(float(loss) * len(batch[0]))
            seen += len(batch[0])
            if logits_index is not None and labels_index is not None:
                correct += _accuracy(outputs[logits_index], batch[labels_index]) * len(batch[0])
            if bar is not None:
                bar.update(1)
                bar.set_postfix(loss=f"{float(loss):.4f}")
        if bar is not None:
            bar.close()
        elapsed = time.perf_counter() - started
        stats = EpochStats(epoch, sum(epoch_losses) / seen, correct / seen if logits_index is not None else None,
                           seen / elapsed, evaluate() if evaluate is not None else None)
        history.append(stats)
        accuracy = f"  accuracy {stats.accuracy:6.2%}" if stats.accuracy is not None else ""
        if stats.held_out_accuracy is not None:
            accuracy += f"  held-out {stats.held_out_accuracy:6.2%}"
        print(f"epoch {epoch:3d}/{epochs}  loss {stats.loss:.4f}{accuracy}  {stats.samples_per_second:,.0f} samples/s",
              flush=True)
    return losses, history


def smoothed(values: Sequence[float], weight: float = 0.95) -> list[float]:
    """An exponential moving average of ``values``, bias-corrected so that the first points
    are not pulled towards 0 (TensorBoard's smoothing)."""
    average, result = 0.0, []
    for step, value in enumerate(values, start=1):
        average = weight * average + (1 - weight) * value
        result.append(average / (1 - weight**step))
    return result


def plot_losses(losses: Sequence[float], path: Path, title: str,
                held_out_accuracy: Sequence[float] | None = None, steps_per_epoch: int | None = None) -> None:
    """The loss curve: every step's loss, lightly, with a smoothed line over it; with
    ``held_out_accuracy`` (one per epoch), the accuracy on a second axis at each epoch's end."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(7, 4))
    steps = np.arange(1, len(losses) + 1)
    axes.plot(steps, losses, color="tab:blue", linewidth=0.6, alpha=0.3, label="loss per step")
    axes.plot(steps, smoothed(losses), color="tab:blue", linewidth=1.8, label="loss, smoothed")
    axes.set_xlabel("step")
    axes.set_ylabel("training loss")
    axes.set_yscale("log")
    axes.set_title(title)
    axes.grid(True, alpha=0.3)
    handles, labels = axes.get_legend_handles_labels()
    if held_out_accuracy:
        per_epoch = steps_per_epoch or max(1, len(losses) // len(held_out_accuracy))
        second = axes.twinx()
        second.plot(per_epoch * np.arange(1, len(held_out_accuracy) + 1), np.asarray(held_out_accuracy) * 100,
                    color="tab:orange", marker="o", markersize=3, linewidth=1.2, label="held-out accuracy")
        second.set_ylabel("held-out accuracy (%)")
        second.set_ylim(0, 100)
        more_handles, more_labels = second.get_legend_handles_labels()
        handles, labels = handles + more_handles, labels + more_labels
    axes.legend(handles, labels, loc="center right", fontsize="small")
    figure.tight_layout()
    temporary = path.with_name(path.name + ".tmp.png")
    figure.savefig(temporary, dpi=120)
    plt.close(figure)
    os.replace(temporary, path)


# The built-in job ---------------------------------------------------------------------


def digits_cnn(seed: int) -> Any:
    """A small CNN for 1x8x8 images as an ONNX model (opset 17, dynamic batch), with
    PyTorch's default initialization (Kaiming-uniform weights, uniform biases)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)

    def uniform(shape: tuple[int, ...], fan_in: int) -> np.ndarray:
        bound = 1.0 / np.sqrt(fan_in)
        return rng.uniform(-bound, bound, shape).astype(np.float32)

    weights = {
        "conv1.weight": uniform((16, 1, 3, 3), 9), "conv1.bias": uniform((16,), 9),
        "conv2.weight": uniform((32, 16, 3, 3), 144), "conv2.bias": uniform((32,), 144),
        "fc1.weight": uniform((64, 128), 128), "fc1.bias": uniform((64,), 128),
        "fc2.weight": uniform((10, 64), 64), "fc2.bias": uniform((10,), 64),
    }
    conv: dict[str, Any] = {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}
    pool: dict[str, Any] = {"kernel_shape": [2, 2], "strides": [2, 2]}
    nodes = [
        helper.make_node("Conv", ["image", "conv1.weight", "conv1.bias"], ["c1"], name="conv1", **conv),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("MaxPool", ["r1"], ["p1"], name="pool1", **pool),
        helper.make_node("Conv", ["p1", "conv2.weight", "conv2.bias"], ["c2"], name="conv2", **conv),
        helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
        helper.make_node("MaxPool", ["r2"], ["p2"], name="pool2", **pool),
        helper.make_node("Flatten", ["p2"], ["flat"], name="flatten", axis=1),
        helper.make_node("Gemm", ["flat", "fc1.weight", "fc1.bias"], ["h"], name="fc1", transB=1),
        helper.make_node("Relu", ["h"], ["r3"], name="relu3"),
        helper.make_node("Gemm", ["r3", "fc2.weight", "fc2.bias"], ["logits"], name="fc2", transB=1),
    ]
    graph = helper.make_graph(
        nodes, "digits_cnn",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, ["batch", 1, 8, 8])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 10])],
        [numpy_helper.from_array(v, k) for k, v in weights.items()])
    # IR version 8 goes with opset 17 (helper.make_model would stamp the newest, which older
    # runtimes refuse).
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="onnxtrain",
                              ir_version=8)
    onnx.checker.check_model(model)
    return model


def digits_job(out: Path, epochs: int, batch_size: int, lr: float, seed: int, threads: int) -> dict[str, Any]:
    _require_examples_extra("the digits demo", ["sklearn", "matplotlib"])
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    from onnxtrain.training import artifacts
    from onnxtrain.training.onnxblock import optim

    out.mkdir(parents=True, exist_ok=True)
    digits = load_digits()
    images = (digits.images / 16.0).astype(np.float32).reshape(-1, 1, 8, 8)
    labels = digits.target.astype(np.int64)
    x_train, x_test, y_train, y_test = train_test_split(images, labels, test_size=0.2, random_state=seed,
                                                        stratify=labels)
    print(f"digits: {len(x_train)} training and {len(x_test)} held-out images of 8x8, 10 classes", flush=True)

    model = digits_cnn(seed)
    trainable = [i.name for i in model.graph.initializer]
    artifacts.generate_artifacts(model, requires_grad=trainable, loss=artifacts.LossType.CrossEntropyLoss,
                                 optimizer=optim.AdamW(weight_decay=1e-4), artifact_directory=out,
                                 additional_output_names=["logits"])
    print(f"artifacts: {out}/training_model.onnx, eval_model.onnx, optimizer_model.onnx, checkpoint", flush=True)

    options = SessionOptions()
    options.intra_op_num_threads = threads
    state = CheckpointState.load_checkpoint(out / "checkpoint")
    module = Module(out / "training_model.onnx", state, out / "eval_model.onnx", session_options=options)
    optimizer = Optimizer(out / "optimizer_model.onnx", module)
    data = DataSet([x_train, y_train])
    steps_per_epoch = (len(data) + batch_size - 1) // batch_size
    total_steps = epochs * steps_per_epoch
    scheduler = LinearLRScheduler(optimizer, warmup_step_count=total_steps // 20, total_step_count=total_steps,
                                  initial_lr=lr)

    def held_out() -> float:
        module.eval()
        _, test_logits = module(x_test, y_test)
        return _accuracy(test_logits, y_test)

    losses, history = train(module, optimizer, data, epochs, batch_size, seed, logits_index=1, labels_index=1,
                            scheduler=scheduler, evaluate=held_out)

    CheckpointState.save_checkpoint(state, out / "checkpoint", include_optimizer_state=True)
    module.export_model_for_inferencing(out / "inference.onnx", ["logits"])
    session = InferenceSession(out / "inference.onnx", options)
    logits = session.run(None, {"image": x_test})[0]
    accuracy = _accuracy(logits, y_test)
    per_epoch = [h.held_out_accuracy for h in history if h.held_out_accuracy is not None]
    plot_losses(losses, out / "loss_curve.png", "digits CNN, onnxtrain", per_epoch, steps_per_epoch)
    summary = {
        "held_out_accuracy": accuracy,
        "final_epoch_loss": history[-1].loss,
        "steps": len(losses),
        "steps_per_epoch": steps_per_epoch,
        "samples_per_second": float(np.median([h.samples_per_second for h in history])),
        "epochs": [{"epoch": h.epoch, "training_loss": h.loss, "training_accuracy": h.accuracy,
                    "held_out_accuracy": h.held_out_accuracy} for h in history],
        "step_losses": losses,
        "step_losses_smoothed": smoothed(losses),
        "checkpoint": str(out / "checkpoint"),
        "inference_model": str(out / "inference.onnx"),
        "loss_curve": str(out / "loss_curve.png"),
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(f"held-out accuracy: {accuracy:.2%} on {len(y_test)} images", flush=True)
    print(f"wrote {out}/checkpoint, {out}/inference.onnx, {out}/loss_curve.png, {out}/summary.json", flush=True)
    return summary


# A user's own artifacts ----------------------------------------------------------------


def _load_npz(path: Path, names: Sequence[str], renames: dict[str, str]) -> DataSet:
    if not path.exists():
        raise FileNotFoundError(f"data set {path} does not exist")
    with np.load(path) as archive:
        arrays = []
        for name in names:
            key = renames.get(name, name)
            if key not in archive.files:
                raise ValueError(f"{path}: no array '{key}' for the training model's input '{name}' "
                                 f"(arrays: {', '.join(archive.files)}; rename with --map {name}=ARRAY)")
            arrays.append(np.ascontiguousarray(archive[key]))
    counts = {len(a) for a in arrays}
    if len(counts) != 1:
        raise ValueError(f"{path}: the arrays hold different numbers of samples: "
                         + ", ".join(f"{n}={len(a)}" for n, a in zip(names, arrays)))
    return DataSet(arrays)


def user_job(args: argparse.Namespace) -> None:
    if args.loss_curve:
        _require_examples_extra("--loss-curve", ["matplotlib"])
    folder = Path(args.artifacts)
    prefix = args.prefix
    options = SessionOptions()
    options.intra_op_num_threads = args.threads
    checkpoint = Path(args.checkpoint) if args.checkpoint else folder / f"{prefix}checkpoint"
    state = CheckpointState.load_checkpoint(checkpoint)
    module = Module(folder / f"{prefix}training_model.onnx", state, session_options=options)
    optimizer = Optimizer(folder / f"{prefix}optimizer_model.onnx", module)
    if args.lr is not None:
        optimizer.set_learning_rate(args.lr)
    renames = dict(item.split("=", 1) for item in args.map)
    data = _load_npz(Path(args.data), module.input_names(), renames)
    print(f"{args.data}: {len(data)} samples for inputs {', '.join(module.input_names())}", flush=True)
    losses, _ = train(module, optimizer, data, args.epochs, args.batch_size, args.seed)
    out = Path(args.out) if args.out else checkpoint
    CheckpointState.save_checkpoint(state, out, include_optimizer_state=True)
    print(f"saved {out}", flush=True)
    if args.loss_curve:
        plot_losses(losses, Path(args.loss_curve), f"{folder.name}, onnxtrain")
        print(f"wrote {args.loss_curve}", flush=True)


def _count(least: int):
    """An argparse type: an int of at least `least` (epochs, batch size, threads)."""
    def parse(text: str) -> int:
        value = int(text)
        if value < least:
            raise argparse.ArgumentTypeError(f"must be an integer >= {least}, got {text}")
        return value
    parse.__name__ = f"int >= {least}"
    return parse


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="onnxtrain train",
        description="Train artifacts on an .npz data set; with no --artifacts, train the built-in digits CNN.")
    parser.add_argument("--artifacts", help="folder with training_model.onnx, optimizer_model.onnx, checkpoint")
    parser.add_argument("--data", help=".npz file: one array per training-model input (by input name)")
    parser.add_argument("--map", action="append", default=[], metavar="INPUT=ARRAY", help="feed INPUT from ARRAY")
    parser.add_argument("--prefix", default="", help="the artifacts' file-name prefix")
    parser.add_argument("--checkpoint", help="checkpoint to start from (default: the artifacts' checkpoint)")
    parser.add_argument("--out", help="where to write (default: the checkpoint / ./onnxtrain-digits for the demo)")
    parser.add_argument("--epochs", type=_count(1), default=None)
    parser.add_argument("--batch-size", type=_count(1), default=32)
    parser.add_argument("--lr", type=float, default=None, help="learning rate (default: the checkpoint's)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=_count(0), default=0, help="intra-op threads (0: every core)")
    parser.add_argument("--loss-curve", help="write the loss curve to this PNG")
    args = parser.parse_args(argv)
    try:
        if args.artifacts is None:
            if args.data is not None:
                parser.error("--data needs --artifacts")
            digits_job(Path(args.out or "onnxtrain-digits"), args.epochs or 15, args.batch_size, args.lr or 3e-3,
                       args.seed, args.threads)
        else:
            if args.data is None:
                parser.error("--artifacts needs --data")
            args.epochs = args.epochs or 1
            user_job(args)
    except (ValueError, RuntimeError, FileNotFoundError, KeyError) as error:
        print(f"onnxtrain train: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
