"""How the training step scales with sequence length and batch: onnxtrain against PyTorch on
the GPT decoder and the BERT encoder of training_scale.py (scale_models.py), their step time
and peak memory as curves (a PNG) and a table.

Two sweeps per model: the sequence length at one batch (``--seq-lens`` at ``--batch``), and
the batch at one length (``--batches`` at ``--seq-len``). Every point is a model of its own
(exported at fixed shapes, its artifacts generated), measured as training_scale.py measures:
each framework in a fresh process, ``--rounds`` interleaved rounds, the median of
``--steps`` steps after ``--warmup`` per process, peak RSS from VmHWM. The table gives both
frameworks' times, PyTorch's time over onnxtrain's (above 1: onnxtrain is faster) and both
peaks; the PNG plots time and peak memory against the swept size, one panel per model and
sweep.

    PYTHONPATH=build/<dir>/python .venv/bin/python bench/scaling.py [--models gpt,bert] [--out reports/scaling]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from scale_models import TRAINING, resized
from training_scale import prepare
from training_step import format_ms, median_of, run_child, uptime

FRAMEWORKS = ("onnxtrain", "torch")
SCRIPT = str(Path(__file__).resolve().parent / "training_scale.py")  # its --child measures a point


def sweep_points(args: argparse.Namespace) -> list[tuple[str, str, int, int]]:
    """(model, swept size "seq" or "batch", batch, seq_len) of every point."""
    points = []
    for model in args.models:
        points += [(model, "seq", args.batch, t) for t in args.seq_lens]
        points += [(model, "batch", b, args.seq_len) for b in args.batches]
    return points


def measure(points: list[tuple[str, str, int, int]], args: argparse.Namespace, work: Path) -> dict:
    """Per (model, batch, seq_len): per framework, the results of its rounds (a point both
    sweeps share is measured once)."""
    unique = sorted({(m, b, t) for m, _, b, t in points})
    specs = {f"{m}_b{b}_t{t}": resized(TRAINING[m], b, t) for m, b, t in unique}
    prepare(specs, list(FRAMEWORKS), work)
    results: dict = {key: {f: [] for f in FRAMEWORKS} for key in unique}
    for _ in range(args.rounds):
        for m, b, t in unique:
            for framework in FRAMEWORKS:
                outcome = run_child(framework, work / f"{m}_b{b}_t{t}", args.threads, args, script=SCRIPT)
                if isinstance(outcome, str):
                    raise SystemExit(f"{m} batch {b} T {t}, {framework}: {outcome}")
                results[m, b, t][framework].append(outcome)
    return results


def print_table(points: list[tuple[str, str, int, int]], results: dict) -> list[str]:
    lines = ["| model | sweep | batch | T | onnxtrain ms | PyTorch ms | PyTorch / onnxtrain | onnxtrain MB | PyTorch MB |",
             "|---|---|---|---|---|---|---|---|---|"]
    for m, swept, b, t in points:
        runs = results[m, b, t]
        ours, theirs = median_of(runs["onnxtrain"], "step_ms"), median_of(runs["torch"], "step_ms")
        lines.append(f"| {m} | {swept} | {b} | {t} | {format_ms(ours)} | {format_ms(theirs)} | {theirs / ours:.2f} | "
                     f"{median_of(runs['onnxtrain'], 'peak_mb'):.0f} | {median_of(runs['torch'], 'peak_mb'):.0f} |")
    print("\n".join(lines))
    return lines


def plot(points: list[tuple[str, str, int, int]], results: dict, models: list[str], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(2, 2 * len(models), figsize=(5 * 2 * len(models), 8), squeeze=False)
    for column, (model, swept) in enumerate((m, s) for m in models for s in ("seq", "batch")):
        chosen = [(b, t) for m, s, b, t in points if m == model and s == swept]
        sizes = [t if swept == "seq" else b for b, t in chosen]
        for row, (key, unit) in enumerate((("step_ms", "step ms"), ("peak_mb", "peak RSS MB"))):
            ax = axes[row][column]
            for framework, title in (("onnxtrain", "onnxtrain"), ("torch", "PyTorch")):
                ax.plot(sizes, [median_of(results[model, b, t][framework], key) for b, t in chosen], marker="o",
                        label=title)
            ax.set_xscale("log", base=2)
            ax.set_xlabel("sequence length" if swept == "seq" else "batch")
            ax.set_ylabel(unit)
            fixed = f"batch {chosen[0][0]}" if swept == "seq" else f"T {chosen[0][1]}"
            ax.set_title(f"{model}, {fixed}")
            ax.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=100)


def parse_arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="gpt,bert", help="comma-separated: gpt,bert")
    parser.add_argument("--seq-lens", default="64,128,256,512", help="the sequence lengths of the first sweep")
    parser.add_argument("--batch", type=int, default=8, help="the batch of the sequence-length sweep")
    parser.add_argument("--batches", default="1,4,8,16,32", help="the batches of the second sweep")
    parser.add_argument("--seq-len", type=int, default=128, help="the sequence length of the batch sweep")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--steps", type=int, default=5, help="timed steps per measurement")
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=2, help="interleaved repeats; the table shows their median")
    parser.add_argument("--out", type=Path, default=Path("scaling"), help="writes OUT.png and OUT.md")
    parser.add_argument("--work", type=Path, help="folder for the exported models and artifacts (default: temporary)")
    args = parser.parse_args(argv)
    args.models = [m for m in args.models.split(",") if m]
    for model in args.models:
        if model not in ("gpt", "bert"):
            parser.error(f"unknown model '{model}': gpt or bert")
    args.seq_lens = [int(v) for v in args.seq_lens.split(",") if v]
    args.batches = [int(v) for v in args.batches.split(",") if v]
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_arguments(argv)
    points = sweep_points(args)
    with tempfile.TemporaryDirectory(prefix="scaling.") as temporary:
        work = args.work or Path(temporary)
        before = uptime()
        results = measure(points, args, work)
        after = uptime()
    header = [f"training step vs sequence length and batch, {args.threads} thread(s), median of {args.rounds} "
              f"round(s) of {args.steps} steps", f"before: {before}", f"after:  {after}", ""]
    print("\n".join(header))
    lines = print_table(points, results)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".md").write_text("\n".join(header + lines) + "\n")
    plot(points, results, args.models, args.out.with_suffix(".png"))
    print(f"wrote {args.out.with_suffix('.png')} and {args.out.with_suffix('.md')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
