#!/usr/bin/env python3
"""Checks src/ for the One Definition Rule's quiet failure: a class or struct defined at
namespace scope, outside an anonymous namespace, in two source files. The linker accepts
that (inline member functions are merged silently) and one file then runs the other's code.
File-local helpers belong in an anonymous namespace; shared ones in one header.

    python tools/check_odr.py        # exit 1 and the duplicated definitions, if any
"""

from __future__ import annotations

import re
import sys
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# `struct Name {`, `class Name final : Base {` ... at the start of a line (namespace scope is
# not indented in this tree's style).
DEFINITION = re.compile(r"^(?:struct|class)\s+([A-Za-z_]\w*)(?:\s+final)?\s*(?::[^;{]*)?\{", re.MULTILINE)
NAMESPACE = re.compile(r"^namespace\s*([\w:]*)\s*\{", re.MULTILINE)


def strip_comments_and_strings(text: str) -> str:
    text = re.sub(r'R"\((?:.|\n)*?\)"', '""', text)  # raw strings (the function library's texts)
    text = re.sub(r"//[^\n]*", "", text)
    text = re.sub(r"/\*(?:.|\n)*?\*/", "", text)
    return re.sub(r'"(?:\\.|[^"\\\n])*"', '""', text)


def namespace_scope_definitions(text: str) -> list[tuple[str, str]]:
    """(namespace path, name) of the types defined at namespace scope outside anonymous
    namespaces, by following the braces."""
    text = strip_comments_and_strings(text)
    found = []
    stack: list[str | None] = []  # per open brace: a namespace name ("" = anonymous), or None
    i = 0
    while i < len(text):
        line_start = i == 0 or text[i - 1] == "\n"
        if line_start:
            ns = NAMESPACE.match(text, i)
            if ns:
                stack.append(ns.group(1))
                i = ns.end()
                continue
            definition = DEFINITION.match(text, i)
            if definition and all(s is not None for s in stack) and "" not in stack:
                found.append(("::".join(s for s in stack if s), definition.group(1)))
        if text[i] == "{":
            stack.append(None)
        elif text[i] == "}" and stack:
            stack.pop()
        i += 1
    return found


def duplicated(src: Path) -> dict[tuple[str, str], list[str]]:
    where: dict[tuple[str, str], list[str]] = defaultdict(list)
    for file in sorted(src.rglob("*.cc")):
        for key in set(namespace_scope_definitions(file.read_text())):
            where[key].append(str(file.relative_to(REPO)))
    return {key: files for key, files in where.items() if len(files) > 1}


def main() -> int:
    problems = duplicated(REPO / "src")
    for (namespace, name), files in sorted(problems.items()):
        print(f"{namespace}::{name} is defined in {', '.join(files)}")
    if problems:
        print(f"{len(problems)} types defined in several source files (ODR)", file=sys.stderr)
        return 1
    print("src/: no type is defined at namespace scope in two source files")
    return 0


if __name__ == "__main__":
    sys.exit(main())
