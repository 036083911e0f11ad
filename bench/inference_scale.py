"""Inference at realistic model sizes: onnxtrain against onnxruntime, forward time, achieved
GFLOP/s and peak memory.

The models (``scale_models.py``, eval mode, TorchScript exports at fixed shapes, opset 17):
the MLP 1024-4096-4096-1000 at batch 16 and 1; ResNet-18 (1000 classes, 224x224) at batch 1;
ResNet-50 (224x224) at batch 1 and 8; the GPT decoder (d 512, 4 layers, T 256) and the BERT
encoder (d 768, 6 layers, T 128, the first token classified) at batch 1 and 8. onnxruntime
keeps its default graph optimizations (what users get); both run ``--threads`` intra-op threads.

The parent exports each model and its input once; every measurement then runs in a fresh
process of one runtime (``--warmup`` untimed forwards, then ``--repeat`` timed ones), so its
peak RSS (VmHWM) is that runtime's alone and the onnxtrain process never imports torch or
onnxruntime. ``--rounds`` interleaved rounds over every (case, runtime) follow each other;
the tables show the median of the rounds' medians ("ms"), the fastest round's ("min ms"),
the achieved GFLOP/s (the matmul and convolution FLOPs counted from the shapes, over the
median) against a GEMM peak measured first (a float32 MatMul, ``--gemm-size`` cubed, constant
weight, in onnxtrain, whose MatMul runs on oneDNN, at the same thread count: its best run),
and the peak RSS (+ its growth over the peak right after the runtime's import). Both
runtimes' outputs of the same input are compared. The load average before and after goes
with it: the 2 cores are shared.

``--contention N`` measures every case a second time next to N busy processes
(``contention.py``) and prints each runtime's slowdown (contended / quiet, of the medians and
of the means).

    PYTHONPATH=build/<dir>/python .venv/bin/python bench/inference_scale.py [--rounds 3] [--models mlp,bert]
    PYTHONPATH=build/<dir>/python .venv/bin/python bench/inference_scale.py --models gpt --batch 1 --seq-len 64
    PYTHONPATH=build/<dir>/python .venv/bin/python bench/inference_scale.py --contention 1
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from contention import Competitors
from scale_models import INFERENCE, Spec, build_module, export, forward_flops, make_batches, resized, write_gemm
from training_step import (format_memory, format_ms, git_revision, growth_mb, median_of, onnxtrain_location,
                           peak_rss_mb, run_child, uptime)

FRAMEWORKS = ("onnxtrain", "onnxruntime")
GEMM_REPEAT = 5

Results = dict[tuple[Spec, str], list[dict | str]]


# ---- measurement, in the child process of one runtime ----


def open_session(runtime: str, path: Path, threads: int) -> tuple[Any, float]:
    """(the runtime's session of `path`, the peak RSS in MiB right after the runtime's import)."""
    if runtime == "onnxtrain":
        import onnxtrain

        baseline = peak_rss_mb()
        options = onnxtrain.SessionOptions()
        options.intra_op_num_threads = threads
        return onnxtrain.InferenceSession(str(path), sess_options=options), baseline
    import onnxruntime

    baseline = peak_rss_mb()
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    return onnxruntime.InferenceSession(str(path), sess_options=options, providers=["CPUExecutionProvider"]), baseline


def measure_forward(runtime: str, folder: Path, threads: int, warmup: int, repeat: int) -> None:
    """Prints the forward times of folder/model.onnx on folder/feeds.npz and the memory, as
    JSON; keeps the first output in folder/<runtime>.npy."""
    session, baseline = open_session(runtime, folder / "model.onnx", threads)
    feeds = dict(np.load(folder / "feeds.npz"))
    for _ in range(warmup):
        session.run(None, feeds)
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        outputs = session.run(None, feeds)
        times.append((time.perf_counter() - start) * 1e3)
    if runtime == "onnxtrain":
        assert not {"torch", "onnxruntime"} & set(sys.modules), "the onnxtrain measurement must load neither"
    result = {"forward_ms": statistics.median(times), "mean_ms": statistics.fmean(times), "min_ms": min(times),
              "baseline_mb": baseline, "peak_mb": peak_rss_mb()}
    np.save(folder / f"{runtime}.npy", outputs[0])
    print(json.dumps(result))


def run_forward_child(runtime: str, folder: Path, threads: int, warmup: int, repeat: int) -> dict | str:
    """One measurement in a fresh process (training_step's plumbing, this script's --child)."""
    return run_child(runtime, folder, threads, argparse.Namespace(warmup=warmup, steps=repeat), script=__file__)


# ---- the GEMM peak and the rates against it, shared with training_scale.py ----


def gemm_peak(threads: int, size: int, work: Path) -> tuple[float | None, str]:
    """(GFLOP/s of onnxtrain's best MatMul run, size cubed, in a fresh process, or None; the line saying so)."""
    write_gemm(work / "gemm", size)
    done = run_forward_child("onnxtrain", work / "gemm", threads, 2, GEMM_REPEAT)
    if isinstance(done, str):
        return None, f"GEMM peak: n/a (onnxtrain's MatMul {done})"
    peak, median = (2.0 * size**3 / (done[key] * 1e6) for key in ("min_ms", "forward_ms"))
    return peak, (f"GEMM peak: {peak:.1f} GFLOP/s (onnxtrain float32 MatMul {size}x{size}x{size}, constant "
                  f"weight, {threads} thread(s): best of {GEMM_REPEAT} runs; their median {median:.1f} GFLOP/s)")


def format_rate(flops: float, ms: float, peak: float | None) -> str:
    """GFLOP/s at `ms` per `flops`, and its share of the GEMM peak."""
    rate = flops / (ms * 1e6)
    return f"{rate:.1f} ({100 * rate / peak:.0f}%)" if peak else f"{rate:.1f}"


# ---- the parent: prepare, run the children, print the tables ----


def case_folder(work: Path, spec: Spec) -> Path:
    return work / spec.label().replace(" ", "-")


def prepare(cases: list[Spec], work: Path) -> None:
    """Exports each case's eval model and writes its input into its folder."""
    for spec in cases:
        folder = case_folder(work, spec)
        folder.mkdir(parents=True, exist_ok=True)
        x = make_batches(spec, 1)[0][0]
        export(build_module(spec, train=False), spec, x, folder / "model.onnx")
        np.savez(folder / "feeds.npz", **{spec.input_name(): x})


def runs(results: Results, spec: Spec, runtime: str) -> list[dict]:
    return [r for r in results[spec, runtime] if isinstance(r, dict)]


def time_cell(results: Results, spec: Spec, runtime: str, fastest: bool = False) -> str:
    done = runs(results, spec, runtime)
    if not done:
        failed = [r for r in results[spec, runtime] if isinstance(r, str)]
        return failed[0] if failed else "n/a"
    return format_ms(min(r["forward_ms"] for r in done) if fastest else median_of(done, "forward_ms"))


def ratio_cell(ours: list[dict], theirs: list[dict], key: str) -> str:
    return f"{median_of(ours, key) / median_of(theirs, key):.2f}" if ours and theirs else "n/a"


def memory_ratio_cell(ours: list[dict], theirs: list[dict]) -> str:
    """Our peak / theirs (+ our growth over the post-import peak / theirs)."""
    if not ours or not theirs:
        return "n/a"
    return f"{ratio_cell(ours, theirs, 'peak_mb')} (+{growth_mb(ours) / max(growth_mb(theirs), 1e-9):.2f})"


def print_table(header: list[str], rows: list[list[str]]) -> None:
    print("| " + " | ".join(header) + " |\n|" + "---|" * len(header))
    for cells in rows:
        print("| " + " | ".join(cells) + " |")


def print_time_table(cases: list[Spec], frameworks: list[str], results: Results) -> None:
    both = set(FRAMEWORKS) <= set(frameworks)
    header = ["case", "GFLOP"] + [f"{f} ms" for f in frameworks]
    header += ["onnxtrain / onnxruntime"] if both else []
    rows = []
    for spec in cases:
        cells = [spec.label(), f"{forward_flops(spec) / 1e9:.3g}"] + [time_cell(results, spec, f) for f in frameworks]
        if both:
            cells.append(ratio_cell(runs(results, spec, "onnxtrain"), runs(results, spec, "onnxruntime"), "forward_ms"))
        rows.append(cells + [time_cell(results, spec, f, fastest=True) for f in frameworks])
    print_table(header + [f"{f} min ms" for f in frameworks], rows)
    print("\nms: median forward time (the median of the rounds' medians); onnxtrain / onnxruntime: "
          "below 1 is faster; min ms: the fastest round's median.\n")


def print_rate_table(cases: list[Spec], frameworks: list[str], results: Results, peak: float | None) -> None:
    both = set(FRAMEWORKS) <= set(frameworks)
    header = ["case"] + [f"{f} GFLOP/s (% of peak)" for f in frameworks] + [f"{f} MB" for f in frameworks]
    rows = []
    for spec in cases:
        done = {f: runs(results, spec, f) for f in frameworks}
        cells = [spec.label()]
        cells += [format_rate(forward_flops(spec), median_of(done[f], "forward_ms"), peak) if done[f] else "n/a"
                  for f in frameworks]
        cells += [format_memory(done[f]) if done[f] else "n/a" for f in frameworks]
        if both:
            cells.append(memory_ratio_cell(done["onnxtrain"], done["onnxruntime"]))
        rows.append(cells)
    print_table(header + (["memory onnxtrain / onnxruntime"] if both else []), rows)
    print("\nGFLOP/s: the matmul and convolution FLOPs of one forward over its median time (% of the GEMM peak). "
          "MB: peak RSS of the process (+ its growth over the peak right after the runtime's import).")


def print_contention_table(cases: list[Spec], frameworks: list[str], competitors: int,
                           quiet: Results, contended: Results) -> None:
    """Forward times next to `competitors` busy processes, and the slowdown against the quiet runs."""
    def slowdown(spec: Spec, runtime: str, key: str) -> float | None:
        busy, calm = runs(contended, spec, runtime), runs(quiet, spec, runtime)
        return median_of(busy, key) / median_of(calm, key) if busy and calm else None

    both = set(FRAMEWORKS) <= set(frameworks)
    print(f"\n### next to {competitors} busy process(es)\n")
    header = ["case"] + [f"{f} ms (slowdown)" for f in frameworks]
    rows = []
    for spec in cases:
        cells = [spec.label()]
        for runtime in frameworks:
            busy = runs(contended, spec, runtime)
            median, mean = slowdown(spec, runtime, "forward_ms"), slowdown(spec, runtime, "mean_ms")
            cells.append(f"{format_ms(median_of(busy, 'forward_ms'))} / {format_ms(median_of(busy, 'mean_ms'))} "
                         f"({median:.2f}× / {mean:.2f}×)" if median and mean else "n/a")
        if both:
            ours, theirs = slowdown(spec, "onnxtrain", "mean_ms"), slowdown(spec, "onnxruntime", "mean_ms")
            cells.append(f"{ours / theirs:.2f}" if ours and theirs else "n/a")
        rows.append(cells)
    print_table(header + (["onnxtrain slowdown / onnxruntime's"] if both else []), rows)
    print("\nms: median / mean forward time with the competitors running; slowdown: against the same runtime's "
          "quiet runs of the same rounds (median / mean). The last column compares the mean slowdowns.")


def print_output_check(cases: list[Spec], work: Path) -> None:
    """The largest difference between the runtimes' outputs, against the largest output."""
    print("\noutputs, onnxtrain against onnxruntime (same model, same input):")
    for spec in cases:
        files = [case_folder(work, spec) / f"{runtime}.npy" for runtime in FRAMEWORKS]
        if all(f.exists() for f in files):
            ours, theirs = (np.load(f) for f in files)
            print(f"  {spec.label()}: max |difference| {np.abs(ours - theirs).max():.3g}, "
                  f"max |output| {np.abs(theirs).max():.3g}")


def print_spread(cases: list[Spec], frameworks: list[str], results: Results) -> None:
    print("\nms per round (the table shows their median):")
    for spec in cases:
        for runtime in frameworks:
            if done := runs(results, spec, runtime):
                print(f"  {spec.label()} {runtime}: " + ", ".join(format_ms(r["forward_ms"]) for r in done))


def parse_arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=2, help="intra-op threads of both runtimes")
    parser.add_argument("--models", default=",".join(INFERENCE), help="comma-separated: " + ",".join(INFERENCE))
    parser.add_argument("--frameworks", default=",".join(FRAMEWORKS), help="comma-separated: " + ",".join(FRAMEWORKS))
    parser.add_argument("--batch", type=int, help="one batch size for every model (default: each model's own)")
    parser.add_argument("--seq-len", type=int, help="sequence length of gpt and bert (default: 256 and 128)")
    parser.add_argument("--repeat", "--steps", dest="repeat", type=int, default=20,
                        help="timed forwards per process")
    parser.add_argument("--warmup", type=int, default=3, help="untimed forwards first")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved repeats; the table shows their median")
    parser.add_argument("--gemm-size", type=int, default=2048, help="the GEMM peak's matrix side")
    parser.add_argument("--work", type=Path, help="folder for the exported models (default: temporary)")
    parser.add_argument("--contention", type=int, default=0, metavar="N",
                        help="also measure each case next to N busy processes (started and stopped by the bench)")
    parser.add_argument("--child", nargs=2, metavar=("RUNTIME", "FOLDER"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.models = [m for m in args.models.split(",") if m]
    args.frameworks = [f for f in args.frameworks.split(",") if f]
    for name in args.models + args.frameworks:
        if name not in (*INFERENCE, *FRAMEWORKS):
            parser.error(f"unknown model or framework '{name}'; models: {tuple(INFERENCE)}, frameworks: {FRAMEWORKS}")
    return args


def measure_all(cases: list[Spec], args: argparse.Namespace, work: Path) -> tuple[Results, Results]:
    """The rounds: every case in every runtime, quiet and (with --contention) contended."""
    quiet: Results = {(spec, f): [] for spec in cases for f in args.frameworks}
    contended: Results = {key: [] for key in quiet}
    for _ in range(args.rounds):
        for spec in cases:
            for runtime in args.frameworks:
                measure = functools.partial(run_forward_child, runtime, case_folder(work, spec), args.threads,
                                            args.warmup, args.repeat)
                quiet[spec, runtime].append(measure())
                if args.contention:
                    with Competitors(args.contention):
                        contended[spec, runtime].append(measure())
    return quiet, contended


def main(argv: list[str] | None = None) -> int:
    args = parse_arguments(argv)
    if args.child:
        measure_forward(args.child[0], Path(args.child[1]), args.threads, args.warmup, args.repeat)
        return 0
    cases = list(dict.fromkeys(resized(spec, args.batch, args.seq_len) for m in args.models for spec in INFERENCE[m]))
    with tempfile.TemporaryDirectory(prefix="inference_scale.") as temporary:
        work = args.work or Path(temporary)
        prepare(cases, work)
        load_before = uptime()
        peak, peak_line = gemm_peak(args.threads, args.gemm_size, work)
        quiet, contended = measure_all(cases, args, work)
        load_after = uptime()
        print(f"inference at scale: {args.repeat} timed forwards after {args.warmup} warm-up per process, "
              f"median of {args.rounds} interleaved round(s), {args.threads} thread(s)")
        print(f"onnxtrain from {onnxtrain_location()}, tree {git_revision()}")
        print(f"before: {load_before}\nafter:  {load_after}\n{peak_line}\n")
        print_time_table(cases, args.frameworks, quiet)
        print_rate_table(cases, args.frameworks, quiet, peak)
        if args.contention:
            print_contention_table(cases, args.frameworks, args.contention, quiet, contended)
        print_output_check(cases, work)
        print_spread(cases, args.frameworks, quiet)
    return 0


if __name__ == "__main__":
    sys.exit(main())
