"""Export every case (cached) and print the op inventory.

Usage, from the repository root::

    .venv/bin/python -m tests.python.models [--models mlp cnn ...] [--force]
"""

from __future__ import annotations

import argparse
import time
from collections import defaultdict

from . import (MODELS, OpKey, export_case, get_case, list_cases, model_ops, read_metadata,
               training_nodes)


def _format_op(op: OpKey) -> str:
    domain, op_type, opset = op
    return f"{domain or 'ai.onnx'}::{op_type}-{opset}"


def _print_union(per_case: dict[str, set[OpKey]]) -> None:
    users: dict[OpKey, list[str]] = defaultdict(list)
    for cid, ops in per_case.items():
        for op in ops:
            users[op].append(cid)
    print(f"## Union over {len(per_case)} cases: {len(users)} distinct (domain, op, opset)\n")
    print("| domain | op | opset | #cases | cases (if not all) |")
    print("|---|---|---|---|---|")
    for op in sorted(users, key=lambda k: (k[0], k[1], k[2])):
        cases = users[op]
        listed = "" if len(cases) == len(per_case) else ", ".join(cases)
        print(f"| {op[0] or 'ai.onnx'} | {op[1]} | {op[2]} | {len(cases)} | {listed} |")
    print()


def _print_cases(per_case: dict[str, set[OpKey]]) -> None:
    print("## Per case\n")
    for cid, ops in per_case.items():
        meta = read_metadata(cid) or {}
        path = get_case(cid).onnx_path
        print(f"### {cid}  (export {meta.get('export_seconds', '?')} s, "
              f"max |ORT - torch| = {meta.get('max_abs_diff_vs_torch', float('nan')):.2e})")
        print(f"file: {path}")
        for w in meta.get("workarounds", []):
            print(f"workaround: {w}")
        names = sorted({op[1] for op in ops})
        print(f"ops ({len(names)}): {', '.join(_format_op(op) for op in sorted(ops, key=lambda k: k[1]))}")
        for line in training_nodes(path):
            print(f"  {line}")
        print()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="*", default=list(MODELS), choices=MODELS)
    parser.add_argument("--force", action="store_true", help="re-export even when cached")
    args = parser.parse_args()

    cases = list_cases(args.models)
    start = time.perf_counter()
    failures: dict[str, str] = {}
    for cid in cases:
        t = time.perf_counter()
        try:
            export_case(cid, force=args.force)
        except Exception as e:  # report every case, then the failures
            failures[cid] = f"{type(e).__name__}: {e}"
        print(f"# {cid}: ready in {time.perf_counter() - t:.1f} s", flush=True)
    print(f"# all cases ready in {time.perf_counter() - start:.1f} s\n")

    per_case = {cid: model_ops(get_case(cid).onnx_path) for cid in cases if cid not in failures}
    _print_union(per_case)
    _print_cases(per_case)
    if failures:
        print("## Export failures\n")
        for cid, why in failures.items():
            print(f"- {cid}: {why[:2000]}")


if __name__ == "__main__":
    main()
