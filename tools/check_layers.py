#!/usr/bin/env python3
"""Checks that dependencies point one way: the include graph of src/ down the layers of
docs/architecture.md, and no import cycle among the modules of the Python package.

    python tools/check_layers.py            # exit 1 and a list of what points the wrong way

A file may include headers of its own layer and of the layers below it; the public headers
(include/onnxtrain/) are the API every layer may use. The Python bindings use the public API
only, so that Python offers nothing C++ users of find_package(onnxtrain) lack. The layers,
top to bottom:
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LAYERS = ["bindings", "training", "autodiff", "runtime", "passes", "ops", "ir", "core"]
__doc__ += "    " + " > ".join(LAYERS) + "\n"
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.MULTILINE)


def layer_of(path: str) -> str | None:
    first = path.split("/", 1)[0]
    return first if first in LAYERS else None


def upward_includes(src: Path) -> list[str]:
    problems = []
    for file in sorted(src.rglob("*")):
        if file.suffix not in (".h", ".cc"):
            continue
        own = layer_of(str(file.relative_to(src)))
        if own is None:
            continue
        for target in INCLUDE.findall(file.read_text()):
            other = layer_of(target)
            if own == "bindings" and other not in (None, "bindings"):
                problems.append(f"{file.relative_to(REPO)} (bindings) includes {target}, not the public API")
            elif other is not None and LAYERS.index(other) < LAYERS.index(own):
                problems.append(f"{file.relative_to(REPO)} ({own}) includes {target} ({other})")
    return problems


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def python_imports(root: Path) -> dict[str, set[str]]:
    """Per module of the package under `root`, the package's modules it imports — anywhere in
    the file, so that an import deferred into a function does not hide a cycle."""
    modules = {module_name(f, root): f for f in root.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, file in modules.items():
        package = name if file.name == "__init__.py" else name.rpartition(".")[0]
        targets = set()
        for node in ast.walk(ast.parse(file.read_text())):
            if isinstance(node, ast.Import):
                targets.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else []))
                targets.add(base)
                targets.update(f"{base}.{alias.name}" for alias in node.names)
        # A module depends on what it names; a package's own submodules are its parts, not cycles.
        graph[name] = {t for t in targets if t in modules and t != name and not name.startswith(t + ".")}
    return graph


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    cycles, state = [], {}

    def visit(node: str, stack: list[str]) -> None:
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == "open":
                cycles.append(stack[stack.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt, stack)
        stack.pop()
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node, [])
    return cycles


def main() -> int:
    problems = upward_includes(REPO / "src")
    for cycle in import_cycles(python_imports(REPO / "python")):
        problems.append("Python import cycle: " + " -> ".join(cycle))
    for p in problems:
        print(p)
    if problems:
        print(f"{len(problems)} dependencies point the wrong way (layers: {' > '.join(LAYERS)})", file=sys.stderr)
        return 1
    print(f"src/: every include points down the layers ({' > '.join(LAYERS)}); python/: no import cycles")
    return 0


if __name__ == "__main__":
    sys.exit(main())
