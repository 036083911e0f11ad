"""Replays the fuzzers' regression corpus (tests/fuzz/regressions) through the Python API, each
input in a child process: a model must load and run or raise an onnxtrain error, a checkpoint
must load or raise one; a signal or another exception fails the test."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import onnxtrain

CORPUS = Path(__file__).resolve().parents[1] / "fuzz" / "regressions"

REPLAY = {
    "fuzz_model": """
import sys, numpy as np, onnxtrain
try:
    session = onnxtrain.InferenceSession(open(sys.argv[1], "rb").read())
    feeds = {}
    for i in session.get_inputs():
        shape = [d if isinstance(d, int) and d >= 0 else 2 for d in (i.shape or [])]
        name = i.type[len("tensor("):-1]
        dtype = {"float": "float32", "double": "float64", "bfloat16": "uint16"}.get(name, name)
        feeds[i.name] = np.ones([min(d, 64) for d in shape], dtype=dtype if dtype in np.sctypeDict else "float32")
    session.run(None, feeds)
except (RuntimeError, ValueError, NotImplementedError):
    pass
""",
    "fuzz_checkpoint": """
import sys
from onnxtrain.training.api import CheckpointState
for verify in (True, False):
    try:
        CheckpointState.load_checkpoint(sys.argv[1], verify=verify)
    except (RuntimeError, ValueError):
        pass
""",
}


def corpus() -> list[tuple[str, Path]]:
    return [(target, path) for target in REPLAY for path in sorted((CORPUS / target).glob("*"))
            if not path.name.startswith(".")]


def test_the_corpus_folders_exist():
    for target in REPLAY:
        assert (CORPUS / target).is_dir(), f"missing {CORPUS / target}"


@pytest.mark.parametrize("target, path", corpus(), ids=lambda v: v.name if isinstance(v, Path) else v)
def test_regression_input(target, path):
    package_root = str(Path(onnxtrain.__file__).resolve().parent.parent)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([package_root, os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run([sys.executable, "-c", REPLAY[target], str(path)], capture_output=True, text=True,
                          timeout=300, env=env)
    assert done.returncode == 0, f"{path}: exit {done.returncode}\n{done.stderr[-3000:]}"
