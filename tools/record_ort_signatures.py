"""Records the public Python signatures of onnxruntime-training 1.19.2's training API (the
anchor onnxtrain's defaults must equal) into tests/python/training/ort_1_19_2_signatures.json.

Run it in onnxruntime-training's own virtualenv (scripts/setup_ort_training.sh makes it; it
cannot share a venv with the onnxruntime that onnxtrain's tests use)::

    ~/.cache/onnxtrain/ort-training-1.19.2/bin/python tools/record_ort_signatures.py

tests/python/training/test_ort_signatures.py compares onnxtrain against the file.
"""

from __future__ import annotations

import argparse
import enum
import importlib
import inspect
import json
import sys
from pathlib import Path
from typing import Any

# The modules whose public names make up the API that ORT users write against.
MODULES = [
    "onnxruntime.training.artifacts",
    "onnxruntime.training.api",
    "onnxruntime.training.onnxblock",
    "onnxruntime.training.onnxblock.blocks",
    "onnxruntime.training.onnxblock.loss",
    "onnxruntime.training.onnxblock.optim",
]
OUTPUT = Path(__file__).resolve().parents[1] / "tests/python/training/ort_1_19_2_signatures.json"


def _default(value: Any) -> dict[str, Any]:
    """A default as JSON: its value when JSON holds it exactly, and its repr always."""
    entry: dict[str, Any] = {"repr": repr(value)}
    if isinstance(value, tuple):
        value = list(value)
    try:
        if json.loads(json.dumps(value)) == value:
            entry["value"] = value
    except (TypeError, ValueError):
        pass
    return entry


def _signature(function: Any) -> list[dict[str, Any]]:
    parameters = []
    for parameter in inspect.signature(function).parameters.values():
        entry: dict[str, Any] = {"name": parameter.name, "kind": parameter.kind.name}
        if parameter.default is not inspect.Parameter.empty:
            entry["default"] = _default(parameter.default)
        parameters.append(entry)
    return parameters


def _is_ours(obj: Any) -> bool:
    return getattr(obj, "__module__", "").startswith("onnxruntime.training")


def _class_entry(cls: type) -> dict[str, Any]:
    if issubclass(cls, enum.Enum):
        return {"type": "enum", "members": {m.name: m.value for m in cls}}
    methods: dict[str, Any] = {}
    for name in sorted(dir(cls)):
        if name.startswith("_") and name not in ("__init__", "__call__"):
            continue
        # The class (or an onnxruntime base) must define it: object's own methods are no API.
        owner = next((k for k in cls.__mro__ if name in vars(k)), None)
        if owner is None or owner is object or not _is_ours(owner):
            continue
        raw = inspect.getattr_static(cls, name)
        if isinstance(raw, property):
            methods[name] = {"type": "property"}
        elif isinstance(raw, (classmethod, staticmethod)):
            methods[name] = {"type": type(raw).__name__, "parameters": _signature(getattr(cls, name))}
        elif inspect.isfunction(raw):
            methods[name] = {"type": "method", "parameters": _signature(raw)}
    return {"type": "class", "bases": [b.__name__ for b in cls.__bases__], "methods": methods}


def record() -> dict[str, Any]:
    import onnxruntime

    entries: dict[str, Any] = {}
    for module_name in MODULES:
        module = importlib.import_module(module_name)
        names = getattr(module, "__all__", None) or [n for n in vars(module) if not n.startswith("_")]
        for name in sorted(names):
            obj = getattr(module, name)
            if inspect.ismodule(obj) or not _is_ours(obj):
                continue
            if inspect.isclass(obj):
                entries[f"{module_name}.{name}"] = _class_entry(obj)
            elif inspect.isfunction(obj):
                entries[f"{module_name}.{name}"] = {"type": "function", "parameters": _signature(obj)}
    return {"onnxruntime_version": onnxruntime.__version__, "python": sys.version.split()[0], "api": entries}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUTPUT)
    args = parser.parse_args()
    table = record()
    if table["onnxruntime_version"] != "1.19.2":
        print(f"record_ort_signatures: expected onnxruntime-training 1.19.2, found {table['onnxruntime_version']}",
              file=sys.stderr)
        return 1
    args.out.write_text(json.dumps(table, indent=1, sort_keys=True) + "\n")
    print(f"wrote {args.out}: {len(table['api'])} classes and functions")
    return 0


if __name__ == "__main__":
    sys.exit(main())
