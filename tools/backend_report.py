#!/usr/bin/env python3
"""Runs ONNX's backend node tests through onnxtrain and writes a Markdown report.

    .venv/bin/python tools/backend_report.py [--out reports/onnx_backend.md]
        [--filter REGEX] [--isolate [--jobs N] [--timeout SECONDS]]

The report holds a summary (applicable, passed, failed, skipped, pass rate), a
per-op table, the kernels whose absence skips tests, every failure with its message
and every skipped test with its reason. Tests run in this process unless --isolate
puts them in worker processes, where a crash or a hang fails one test only.

The runner and the expectation tables live in tests/python/ (onnx_backend_runner.py,
backend_expectations.py), shared with tests/python/test_onnx_backend.py. For
developing without onnxtrain: --standin onnxruntime (or the environment variable
ONNXTRAIN_BACKEND_STANDIN=onnxruntime).
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "python"))

import backend_expectations as expectations  # noqa: E402
import onnx  # noqa: E402
import onnx_backend_runner as backend_runner  # noqa: E402
from onnx_backend_runner import Outcome  # noqa: E402

MESSAGE_LIMIT = 400


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Run ONNX's backend node tests through onnxtrain; write a Markdown report."
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=REPO / "reports" / "onnx_backend.md",
        help="report path (default: reports/onnx_backend.md)",
    )
    parser.add_argument(
        "--filter", metavar="REGEX", help="run only the tests whose name matches (re.search)"
    )
    parser.add_argument(
        "--isolate",
        action="store_true",
        help="run tests in worker processes: a crash or hang fails one test",
    )
    parser.add_argument(
        "--jobs", type=int, default=1, help="worker processes at once (with --isolate; default 1)"
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=120.0,
        help="seconds one test may take (with --isolate; default 120)",
    )
    parser.add_argument(
        "--standin",
        choices=["onnxruntime", "onnxruntime-all-schemas"],
        help="development only: run onnxruntime in place of onnxtrain",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress on stderr")
    return parser.parse_args(argv)


def select_cases(pattern: str | None) -> list[str]:
    names = backend_runner.all_case_names()
    if pattern is None:
        return names
    regex = re.compile(pattern)
    return [name for name in names if regex.search(name)]


class Progress:
    """Prints failures as they happen and a count every 100 tests, on stderr."""

    def __init__(self, total: int, quiet: bool) -> None:
        self.total = total
        self.quiet = quiet
        self.done = 0

    def __call__(self, outcome: Outcome) -> None:
        self.done += 1
        if self.quiet:
            return
        if outcome.status == "failed":
            print(f"FAILED {outcome.name}: {shorten(outcome.reason, 160)}", file=sys.stderr)
        if self.done % 100 == 0 or self.done == self.total:
            print(f"[{self.done}/{self.total}]", file=sys.stderr)


def shorten(text: str, limit: int) -> str:
    """One line, at most `limit` characters."""
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def cell(text: str, limit: int = MESSAGE_LIMIT) -> str:
    """Text fit for a Markdown table cell."""
    return shorten(text, limit).replace("|", "\\|")


def table(header: Sequence[str], rows: Iterable[Sequence[object]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(value) for value in row) + " |" for row in rows]
    return lines


def summary_section(outcomes: Sequence[Outcome], context: dict[str, str]) -> list[str]:
    counts = Counter(outcome.status for outcome in outcomes)
    applicable = counts["passed"] + counts["failed"]
    known = sum(o.status == "failed" and o.name in expectations.KNOWN_FAILURES for o in outcomes)
    rate = f"{counts['passed'] / applicable:.1%}" if applicable else "n/a"
    random_passes = sum(
        o.status == "passed" and backend_runner.random_check_description(o.name) is not None
        for o in outcomes
    )
    # Tensor-typed: every test whose inputs and outputs are tensors of a type onnxtrain has
    # (not strings, maps, sequences or optionals). Sequences and optionals are counted apart.
    containers = [o for o in outcomes if backend_runner.container_values(backend_runner.load_model(o.name).graph)]
    container_names = {o.name for o in containers}
    tensor_outcomes = [
        o for o in outcomes
        if o.name not in container_names
        and not (o.status == "skipped" and ("not a tensor" in o.reason or "unsupported dtype: STRING" in o.reason))
    ]
    tensor_typed = len(tensor_outcomes)
    tensor_passed = sum(o.status == "passed" for o in tensor_outcomes)
    tensor_applicable = sum(o.status in ("passed", "failed") for o in tensor_outcomes)
    overall = f"{tensor_passed / tensor_typed:.1%}" if tensor_typed else "n/a"
    of_applicable = f"{tensor_passed / tensor_applicable:.1%}" if tensor_applicable else "n/a"
    container_passed = sum(o.status == "passed" for o in containers)
    lines = ["## Summary", ""]
    lines += table(
        ["", ""],
        [
            *context.items(),
            ("node tests run", len(outcomes)),
            ("applicable", applicable),
            ("passed", f"{counts['passed']} ({random_passes} of them random outputs checked by property)"),
            ("failed", f"{counts['failed']} ({known} of them in KNOWN_FAILURES)"),
            ("skipped", counts["skipped"]),
            (
                "pass rate (passed / applicable)",
                f"{rate} (required: {expectations.MIN_PASS_RATE:.0%})",
            ),
            ("tensor-typed tests (no sequence, optional, map or string values)", tensor_typed),
            ("tensor-typed tests passed", tensor_passed),
            ("overall pass rate (passed / tensor-typed)", overall),
            ("tensor-typed pass rate of those whose ops have a kernel", f"{of_applicable} of {tensor_applicable}"),
            ("sequence- or optional-typed tests (passed / run)", f"{container_passed} / {len(containers)}"),
        ],
    )
    return lines


def per_op_section(outcomes: Sequence[Outcome]) -> list[str]:
    counts: dict[str, Counter[str]] = defaultdict(Counter)
    for outcome in outcomes:
        counts[outcome.op][outcome.status] += 1
    rows = [(op, c["passed"], c["failed"], c["skipped"]) for op, c in sorted(counts.items())]
    lines = [
        "## Per op",
        "",
        "A test counts under the op it tests (an *_expanded test "
        "under the op whose function body it is).",
        "",
    ]
    return lines + table(["op", "passed", "failed", "skipped"], rows)


def missing_kernels_section(outcomes: Sequence[Outcome]) -> list[str]:
    blocked = Counter(op for outcome in outcomes for op in outcome.missing_ops)
    if not blocked:
        return []
    rows = sorted(blocked.items(), key=lambda item: (-item[1], item[0]))
    note = "Kernels (op-opset) that skipped tests need; a test may need several, or be skipped"
    lines = ["## Missing kernels", "", note + " for another reason too.", ""]
    return lines + table(["kernel", "skipped tests that need it"], rows)


def failures_section(outcomes: Sequence[Outcome]) -> list[str]:
    failed = [o for o in outcomes if o.status == "failed"]
    rows = [
        (
            o.name,
            o.op,
            cell(expectations.KNOWN_FAILURES.get(o.name, "**no: unexpected**")),
            cell(o.reason),
        )
        for o in failed
    ]
    lines = [f"## Failures ({len(failed)})", ""]
    return lines + (table(["test", "op", "known failure?", "message"], rows) if rows else ["None."])


def unexpected_passes_section(outcomes: Sequence[Outcome]) -> list[str]:
    passes = [
        o.name for o in outcomes if o.status == "passed" and o.name in expectations.KNOWN_FAILURES
    ]
    if not passes:
        return []
    lines = ["## Passing, but listed in KNOWN_FAILURES (remove them)", ""]
    return lines + [f"- {name}" for name in passes]


def random_section(outcomes: Sequence[Outcome]) -> list[str]:
    checked = [o for o in outcomes if backend_runner.random_check_description(o.name) is not None]
    if not checked:
        return []
    lines = [
        f"## Random outputs, checked by property ({len(checked)})",
        "",
        "ONNX does not specify the random generator, so these tests' expected values cannot "
        "be reproduced; their outputs are checked for dtype, shape and the properties below "
        "instead. They count as passed when those hold: a pass by property, not by value.",
        "",
    ]
    rows = [(o.name, o.status, cell(backend_runner.random_check_description(o.name) or "")) for o in checked]
    return lines + table(["test", "status", "checked"], rows)


def skipped_section(outcomes: Sequence[Outcome]) -> list[str]:
    skipped = [o for o in outcomes if o.status == "skipped"]
    lines = [f"## Skipped ({len(skipped)})", ""]
    rows = [(o.name, o.op, cell(o.reason)) for o in skipped]
    return lines + (table(["test", "op", "reason"], rows) if rows else ["None."])


def render_report(outcomes: Sequence[Outcome], context: dict[str, str]) -> str:
    sections = [
        ["# ONNX backend node tests"],
        summary_section(outcomes, context),
        per_op_section(outcomes),
        missing_kernels_section(outcomes),
        failures_section(outcomes),
        unexpected_passes_section(outcomes),
        random_section(outcomes),
        skipped_section(outcomes),
    ]
    return "\n".join("\n".join(section) + "\n" for section in sections if section)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.standin:
        os.environ[backend_runner.STANDIN_ENV] = args.standin  # workers inherit it
    names = select_cases(args.filter)
    if not names:
        print(f"no node test matches {args.filter!r}", file=sys.stderr)
        return 2
    backend = backend_runner.load_backend()
    start = time.perf_counter()
    with backend_runner.BackendTestRunner(
        backend, isolate=args.isolate, jobs=args.jobs, timeout_s=args.timeout
    ) as runner:
        outcomes = runner.outcomes(names, progress=Progress(len(names), args.quiet))
    seconds = time.perf_counter() - start
    mode = f"isolated, {args.jobs} worker(s)" if args.isolate else "in process"
    context = {
        "backend": backend_runner.backend_label(backend),
        "onnx (test data)": onnx.__version__,
        "filter": f"`{args.filter}`" if args.filter else "(all)",
        "run": f"{mode}, {seconds:.1f} s",
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(render_report(outcomes, context))
    passed = sum(o.status == "passed" for o in outcomes)
    failed = sum(o.status == "failed" for o in outcomes)
    print(
        f"{passed} passed, {failed} failed, {len(outcomes) - passed - failed} skipped "
        f"in {seconds:.1f} s; report: {args.out}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
