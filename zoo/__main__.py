"""Export every case (cached) and print the op inventory as markdown.

Usage, from the repository root::

    .venv/bin/python -m zoo [--models mlp cnn ...] [--force] > /tmp/op_inventory.txt
"""

from __future__ import annotations

import argparse
import time
from collections import Counter, defaultdict

import onnx

from zoo import EXPORTERS, MODELS, MODES, export_case, get_case, list_cases, parse_case_id, read_metadata
from zoo.inventory import OpKey, attribute_variants, model_ops, training_nodes

_SHORT = {"torchscript": "ts", "dynamo": "dy", "eval": "eval", "train": "train"}
_ALL_VARIANTS = len(EXPORTERS) * len(MODES)


def _users_text(case_ids: list[str]) -> str:
    """Compact list of cases: ``gpt2`` when all of a model's variants use the op,
    else ``gpt2[ts-train,dy-eval]``."""
    by_model: dict[str, list[str]] = defaultdict(list)
    for cid in case_ids:
        model, exporter, mode = parse_case_id(cid)
        by_model[model].append(f"{_SHORT[exporter]}-{_SHORT[mode]}")
    parts = []
    for model in MODELS:
        variants = by_model.get(model)
        if not variants:
            continue
        parts.append(model if len(variants) == _ALL_VARIANTS else f"{model}[{','.join(variants)}]")
    return ", ".join(parts)


def _print_union(per_case: dict[str, set[OpKey]]) -> None:
    users: dict[tuple[str, str], dict[int, list[str]]] = defaultdict(lambda: defaultdict(list))
    for cid, ops in per_case.items():
        for domain, op_type, opset in ops:
            users[(domain, op_type)][opset].append(cid)
    print(f"## Union over {len(per_case)} cases: {len(users)} distinct (domain, op)\n")
    print("Opset = the model's import for the op's domain (TorchScript exports: 17, dynamo: 18).\n")
    print("| domain | op | opsets | used by (ts = TorchScript, dy = dynamo) |")
    print("|---|---|---|---|")
    for (domain, op_type), by_opset in sorted(users.items()):
        opsets = ", ".join(str(o) for o in sorted(by_opset))
        cases = sorted({c for cs in by_opset.values() for c in cs}, key=list(per_case).index)
        print(f"| {domain or 'ai.onnx'} | {op_type} | {opsets} | {_users_text(cases)} |")
    print()


def _print_attributes(per_case: dict[str, set[OpKey]], limit: int = 12) -> None:
    variants: dict[str, Counter[str]] = defaultdict(Counter)
    for cid in per_case:
        for op_type, seen in attribute_variants(get_case(cid).onnx_path).items():
            variants[op_type].update(seen)
    print("## Attribute variants per op (distinct attribute sets; in = inputs present; "
          "count = cases)\n")
    for op_type in sorted(variants):
        print(f"- **{op_type}**")
        for text, count in variants[op_type].most_common(limit):
            print(f"  - `{text}` ({count})")
        if len(variants[op_type]) > limit:
            print(f"  - ... {len(variants[op_type]) - limit} more")
    print()


def _signature(path: str) -> str:
    model = onnx.load(path, load_external_data=False)

    def describe(v: onnx.ValueInfoProto) -> str:
        t = v.type.tensor_type
        dims = [d.dim_param or str(d.dim_value) for d in t.shape.dim]
        return f"{v.name}: {onnx.TensorProto.DataType.Name(t.elem_type).lower()}[{', '.join(dims)}]"

    ins = ", ".join(describe(v) for v in model.graph.input)
    outs = ", ".join(describe(v) for v in model.graph.output)
    return (f"{len(model.graph.node)} nodes, {len(model.graph.initializer)} initializers, "
            f"{len(model.functions)} functions; inputs {ins}; outputs {outs}")


def _print_cases(per_case: dict[str, set[OpKey]]) -> None:
    print("## Per case\n")
    for cid, ops in per_case.items():
        meta = read_metadata(cid) or {}
        path = str(get_case(cid).onnx_path)
        print(f"### {cid}\n")
        print(f"- file: {path}")
        print(f"- export {meta.get('export_seconds', '?')} s; max |onnxruntime - torch| = "
              f"{meta.get('max_abs_diff_vs_torch', float('nan')):.2e}")
        print(f"- graph: {_signature(path)}")
        for w in meta.get("workarounds", []):
            print(f"- workaround: {w}")
        listed = ", ".join(f"{op_type}-{opset}" if not domain else f"{domain}::{op_type}-{opset}"
                           for domain, op_type, opset in sorted(ops, key=lambda k: (k[0], k[1])))
        print(f"- ops ({len(ops)}): {listed}")
        for line, count in Counter(training_nodes(path)).items():
            print(f"- {count} x {line}")
        print()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="*", default=list(MODELS), choices=MODELS)
    parser.add_argument("--force", action="store_true", help="re-export even when cached")
    args = parser.parse_args()

    cases = list_cases(args.models)
    print("# onnxtrain reference models: op inventory\n")
    start = time.perf_counter()
    failures: dict[str, str] = {}
    for cid in cases:
        try:
            export_case(cid, force=args.force)
        except Exception as e:  # report every case, then the failures
            failures[cid] = f"{type(e).__name__}: {e}"
    print(f"All cases ready in {time.perf_counter() - start:.1f} s "
          f"({'re-exported' if args.force else 'cached where possible'}).\n")

    per_case = {cid: model_ops(get_case(cid).onnx_path) for cid in cases if cid not in failures}
    _print_union(per_case)
    _print_attributes(per_case)
    _print_cases(per_case)
    if failures:
        print("## Export failures\n")
        for cid, why in failures.items():
            print(f"- {cid}: {why[:3000]}")


if __name__ == "__main__":
    main()
