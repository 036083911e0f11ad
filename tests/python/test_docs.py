"""Every ```python block of README.md and docs/*.md runs as written, every ```cpp block
compiles against include/ (g++ -fsyntax-only), and every relative link of those pages points
at a file of the repository.

A page's blocks run in order, in one namespace, in a fresh current directory, so a page can
build its example step by step (make a model, generate artifacts, train). A block that must
not run is marked on the line above its fence with ``<!-- docs-test: skip (why) -->``.
"""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SKIP = re.compile(r"<!--\s*docs-test:\s*skip\s*\((.+?)\)\s*-->")
FENCE = re.compile(r"^```(\w*)\s*$")
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
# Pages other engineers write at the same time; linked already, checked once they exist.
# TODO(lead): remove each entry once its page is merged.
def python_blocks(page: Path) -> list[tuple[int, str, str | None]]:
    """(first line number, code, skip reason or None) of each ```python block."""
    blocks, lines = [], page.read_text().splitlines()
    index = 0
    while index < len(lines):
        match = FENCE.match(lines[index])
        if not match or not match.group(1):
            index += 1
            continue
        language, start = match.group(1), index + 1
        end = start
        while end < len(lines) and lines[end].strip() != "```":
            end += 1
        if language == "python":
            skip = SKIP.search(lines[index - 1]) if index else None
            blocks.append((start + 1, "\n".join(lines[start:end]) + "\n", skip.group(1) if skip else None))
        index = end + 1
    return blocks


PAGES_WITH_CODE = [p for p in PAGES if python_blocks(p)]


@pytest.mark.parametrize("page", PAGES_WITH_CODE, ids=[p.name for p in PAGES_WITH_CODE])
def test_every_python_snippet_runs(page: Path, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": f"docs_{page.stem}"}
    ran = 0
    for line, code, skip in python_blocks(page):
        if skip:
            continue
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the snippets' warnings are the pages' business
            try:
                exec(compile(code, f"{page.name}:{line}", "exec"), namespace)
            except Exception as error:
                raise AssertionError(f"{page.relative_to(ROOT)}, the block at line {line} fails: "
                                     f"{type(error).__name__}: {error}") from error
        ran += 1
    assert ran, f"{page.name}: every block is skipped"


def test_skips_are_few() -> None:
    skipped = [(p.name, line) for p in PAGES for line, _, skip in python_blocks(p) if skip]
    total = sum(len(python_blocks(p)) for p in PAGES)
    assert len(skipped) <= max(2, total // 10), skipped


@pytest.mark.parametrize("page", PAGES, ids=[p.name for p in PAGES])
def test_links_point_into_the_repository(page: Path) -> None:
    for target in LINK.findall(page.read_text()):
        if re.match(r"^[a-z]+://|^mailto:|^#", target):
            continue
        path = (page.parent / target.split("#")[0]).resolve()
        assert path.is_relative_to(ROOT), f"{page.name} links outside the repository: {target}"
        assert path.exists(), f"{page.name} links to a missing file: {target}"


def cpp_blocks(page: Path) -> list[tuple[int, str]]:
    """(first line number, code) of each ```cpp block."""
    blocks, lines, index = [], page.read_text().splitlines(), 0
    while index < len(lines):
        if lines[index].strip() != "```cpp":
            index += 1
            continue
        end = index + 1
        while end < len(lines) and lines[end].strip() != "```":
            end += 1
        blocks.append((index + 2, "\n".join(lines[index + 1:end]) + "\n"))
        index = end + 1
    return blocks


# Fragments (no main) use these as if the surrounding program had them.
CPP_FRAGMENT_NAMES = "onnxtrain::Tensor images, input_tensor;"
CPP_BLOCKS = [(p, line, code) for p in PAGES for line, code in cpp_blocks(p)]


@pytest.mark.parametrize("page,line,code", CPP_BLOCKS, ids=[f"{p.name}:{line}" for p, line, _ in CPP_BLOCKS])
def test_every_cpp_snippet_compiles(page: Path, line: int, code: str, tmp_path) -> None:
    import shutil
    import subprocess

    compiler = shutil.which("g++") or shutil.which("c++")
    if compiler is None:
        pytest.skip("no C++ compiler")
    if "int main(" not in code:
        includes = [text for text in code.splitlines() if text.startswith("#include")]
        body = [text for text in code.splitlines() if not text.startswith("#include")]
        code = "\n".join(["#include <onnxtrain/tensor.h>", "#include <cstdio>", *includes,
                          "void snippet() {", CPP_FRAGMENT_NAMES, *body, "}"]) + "\n"
    source = tmp_path / "snippet.cc"
    source.write_text(code)
    result = subprocess.run([compiler, "-std=c++20", "-fsyntax-only", "-I", str(ROOT / "include"), str(source)],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, f"{page.name}:{line} does not compile:\n{result.stderr[-3000:]}"


def _mypy() -> list[str] | None:
    """How to run mypy: this interpreter's, or the Python named by ONNXTRAIN_MYPY_PYTHON."""
    import importlib.util
    import os
    import sys

    if importlib.util.find_spec("mypy") is not None:
        return [sys.executable, "-m", "mypy"]
    other = os.environ.get("ONNXTRAIN_MYPY_PYTHON")
    return [other, "-m", "mypy"] if other else None


def test_the_python_snippets_type_check(tmp_path) -> None:
    """The pages' examples are what users type: mypy (with --check-untyped-defs) finds nothing
    wrong in them against the package's annotations and _C.pyi."""
    import subprocess

    import onnxtrain

    mypy = _mypy()
    if mypy is None:
        pytest.skip("mypy is not installed (pip install mypy, or set ONNXTRAIN_MYPY_PYTHON)")
    files = []
    for page in PAGES_WITH_CODE:
        path = tmp_path / f"{page.stem.lower()}_snippets.py"
        path.write_text("\n".join(code for _, code, skip in python_blocks(page) if not skip))
        files.append(str(path))
    package_root = str(Path(onnxtrain.__file__).resolve().parents[1])
    result = subprocess.run([*mypy, "--ignore-missing-imports", "--follow-imports=silent", "--check-untyped-defs",
                             "--no-incremental", *files], capture_output=True, text=True, timeout=600,
                            env={"MYPYPATH": package_root, "PATH": "/usr/bin:/bin"}, cwd=tmp_path)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    # The package itself, as mypy sees it when the examples import it.
    result = subprocess.run([*mypy, "--ignore-missing-imports", "--no-incremental", "-p", "onnxtrain"],
                            capture_output=True, text=True, timeout=600, env={"MYPYPATH": package_root,
                                                                              "PATH": "/usr/bin:/bin"},
                            cwd=tmp_path)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
