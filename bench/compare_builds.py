"""The bench/ tables for two builds of onnxtrain side by side, each row as a ratio.

The builds: a portable one (baseline x86-64-v2 with dispatched kernels) against a
-march=native one of the same commit, or one commit against another (before and after a
change).

The rounds alternate between the builds (A B B A ...), so that a change of the machine's
load hits both; each row's figure is the median over the rounds of that bench's own median,
and beside it the fastest round's. On this 2-vCPU machine a process that runs two threads
lands in a fast or a slow state for its whole life (bert's 2-thread gradient step: 3.1 or
5.2 ms, in either build), so at 2 threads the median of a few rounds compares states, not
builds; the fastest round compares the builds in the same (fast) state. On a machine shared
with other work these figures say little below a few per cent.

    .venv/bin/python bench/compare_builds.py native=build/native/python portable=build/dev/python
    .venv/bin/python bench/compare_builds.py before=build/old/python after=build/dev/python --rounds 2

Each build is NAME=PATH, PATH a PYTHONPATH where its `onnxtrain` package is; the table shows
the second / the first. The benches are this checkout's (bench/, zoo/), run against each build.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NUMBER = re.compile(r"[-+]?\d+(?:\.\d+)?")


def run(bench: list[str], package: Path) -> str:
    env = {**os.environ, "PYTHONPATH": f"{package}{os.pathsep}{ROOT}"}
    done = subprocess.run([sys.executable, *bench], cwd=ROOT, env=env, capture_output=True, text=True, check=True)
    return done.stdout


def cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def first_number(text: str) -> float | None:
    match = NUMBER.match(text.strip())
    return float(match.group()) if match else None


def table_rows(out: str, header_start: str, key) -> dict[str, float]:
    """The "onnxtrain ms" cell of each row of the markdown tables whose header line starts with
    `header_start`, under `key(cells, section)`; section is the last "### ..." line above."""
    rows, header, section = {}, None, ""
    for line in out.splitlines():
        if line.startswith("### "):
            section = line[4:].strip()
        elif line.startswith("|"):
            if line.startswith(header_start):
                header = cells(line)
            elif line.startswith("|---") or header is None or "onnxtrain ms" not in header:
                continue
            else:
                c = cells(line)
                ms = first_number(c[header.index("onnxtrain ms")])
                if ms is not None:
                    rows[key(c, section)] = ms
        elif line.strip():
            header = None
    return rows


BENCHES = [
    # forward_latency.py: (model, exporter, batch, threads)
    (["bench/forward_latency.py", "--exporters", "torchscript", "--repeat", "20", "--rounds", "2"],
     lambda out: table_rows(out, "| model |", lambda c, _: f"forward {c[0]} {c[1]} batch {c[2]} threads {c[3]}")),
    # training_step.py: (model, "threads = N" section), from the table with an "onnxtrain ms" column
    (["bench/training_step.py", "--frameworks", "onnxtrain", "--rounds", "1"],
     lambda out: table_rows(out, "| model |", lambda c, section: f"training step {c[0]} {section}")),
    # gradient_step.py: (model, batch)
    (["bench/gradient_step.py", "--runtimes", "onnxtrain"],
     lambda out: table_rows(out, "| model | batch |", lambda c, _: f"gradient step {c[0]} batch {c[1]}")),
]


def build_argument(text: str) -> tuple[str, Path]:
    name, sep, path = text.partition("=")
    if not sep or not name or not path:
        raise argparse.ArgumentTypeError(f"expected NAME=PATH, got '{text}'")
    return name, Path(path).resolve()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("builds", nargs=2, type=build_argument, metavar="NAME=PATH",
                        help="two builds: a name and the PYTHONPATH of its onnxtrain package")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--benches", nargs="+", choices=[b[0][0].split("/")[1][:-3] for b in BENCHES],
                        help="which benches (default: all)")
    args = parser.parse_args()
    builds = dict(args.builds)
    if len(builds) != 2:
        parser.error("the two builds need different names")
    (first, _), (second, _) = args.builds
    benches = [b for b in BENCHES if not args.benches or b[0][0].split("/")[1][:-3] in args.benches]
    figures: dict[str, dict[str, list[float]]] = {name: {} for name in builds}
    print(f"load average before: {os.getloadavg()[0]:.2f} ({os.cpu_count()} CPUs)", flush=True)
    for r in range(args.rounds):
        order = [first, second] if r % 2 == 0 else [second, first]
        for bench, parse in benches:
            for build in order:
                for key, ms in parse(run(bench, builds[build])).items():
                    figures[build].setdefault(key, []).append(ms)
        print(f"round {r + 1}/{args.rounds} done, load average {os.getloadavg()[0]:.2f}", file=sys.stderr, flush=True)
    print(f"load average after: {os.getloadavg()[0]:.2f}; median over {args.rounds} alternating rounds\n")
    print(f"| row | {first} ms | {second} ms | {second} / {first} | fastest round: {first} ms | {second} ms "
          f"| {second} / {first} |")
    print("|---|---|---|---|---|---|---|")
    ratios: dict[str, list[float]] = {"median": [], "fastest": []}
    for key in figures[first]:
        if key not in figures[second]:
            continue
        a, b = statistics.median(figures[first][key]), statistics.median(figures[second][key])
        fa, fb = min(figures[first][key]), min(figures[second][key])
        ratios["median"].append(b / a)
        ratios["fastest"].append(fb / fa)
        print(f"| {key} | {a:.3f} | {b:.3f} | {b / a:.3f} | {fa:.3f} | {fb:.3f} | {fb / fa:.3f} |")
    for kind, values in ratios.items():
        if values:
            print(f"\n{kind}: geometric mean {second} / {first} {statistics.geometric_mean(values):.3f} over "
                  f"{len(values)} rows; worst {max(values):.3f}")


if __name__ == "__main__":
    main()
