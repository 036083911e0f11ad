"""Replays the fuzzers' regression corpus (tests/fuzz/regressions) through the Python API, each
input in a child process: a model must load and run or raise an onnxtrain error, a checkpoint
must load or raise one, a fuzz_graph case (model and feeds) must pass the harness's check again
(no unclean error, no mismatch with onnxruntime); a signal or another exception fails the test.
A few fuzzer inputs also go through the fuzz_graph harness itself (without atheris)."""

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
    "fuzz_graph": f"""
import sys
sys.path.insert(0, {str(Path(__file__).resolve().parents[1] / "fuzz")!r})
import fuzz_graph
from pathlib import Path
result = fuzz_graph.replay(Path(sys.argv[1]))
assert result["status"] not in fuzz_graph.FINDINGS, result
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


def test_the_graph_harness_runs_fuzzer_inputs(tmp_path):
    # What one atheris execution does, for a few byte strings of both modes (the byte at
    # offset 4 picks the mode), in a child process like the replays above.
    code = f"""
import sys, numpy as np
sys.path.insert(0, {str(CORPUS.parent)!r})
import fuzz_graph
harness = fuzz_graph.Harness(None)
rng = np.random.default_rng(7)
statuses = []
for i in range(40):
    data = bytearray(rng.integers(0, 256, size=int(rng.choice([4, 64, 512])), dtype=np.uint8).tobytes())
    if len(data) > 4:
        data[4] = i % 2
    statuses.append(harness(bytes(data))["status"])
print(" ".join(statuses))
"""
    package_root = str(Path(onnxtrain.__file__).resolve().parent.parent)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([package_root, os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    statuses = done.stdout.split()
    assert len(statuses) == 40 and statuses.count("ok") >= 5, statuses  # cases really ran on both
