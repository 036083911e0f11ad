"""onnxtrain.InferenceSession against onnxruntime on the reference models.

Every case of ``zoo/`` (5 models x {TorchScript, dynamo} x {eval, train})
runs in onnxruntime's CPU provider and in onnxtrain on the same random inputs, at two
batch (and sequence) sizes; every output must agree to rtol=1e-4, atol=1e-5.

Exports are cached (see ``zoo/``); the first run exports all cases (about a
minute on two cores). The tests skip only when ``import onnxtrain`` fails, or fail instead
with ``ONNXTRAIN_REQUIRE=1``.
"""

from __future__ import annotations

import functools
import os
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import onnxruntime
import pytest

try:  # tests/python as a package
    from .models import get_case, list_cases
except ImportError:  # tests/python as a plain directory, under any pytest import mode
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from zoo import get_case, list_cases

try:
    import onnxtrain as _onnxtrain

    _IMPORT_ERROR: str | None = None
except ImportError as e:
    _onnxtrain = None
    _IMPORT_ERROR = f"{type(e).__name__}: {e}"

RTOL, ATOL = 1e-4, 1e-5
#: (batch, sequence length); the sequence length only matters for gpt2 and bert. Batch 1
#: and a sequence length other than the traced one (16) exercise the dynamic axes.
SHAPES = [(1, 16), (3, 9)]


def _onnxtrain_module() -> ModuleType:
    """The onnxtrain module; skips the test when it cannot be imported (fails instead
    when ``ONNXTRAIN_REQUIRE=1``)."""
    if _onnxtrain is not None:
        return _onnxtrain
    message = f"onnxtrain is not importable ({_IMPORT_ERROR}); build and install it first"
    if os.environ.get("ONNXTRAIN_REQUIRE") == "1":
        pytest.fail(message)
    pytest.skip(message)


@functools.lru_cache(maxsize=None)
def _ort_session(case_id: str) -> onnxruntime.InferenceSession:
    path = get_case(case_id).onnx_path
    return onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])


@functools.lru_cache(maxsize=None)
def _our_session(case_id: str) -> Any:
    return _onnxtrain_module().InferenceSession(str(get_case(case_id).onnx_path))


@pytest.mark.parametrize("case_id", list_cases())
def test_inputs_match_onnxruntime(case_id: str) -> None:
    """``get_inputs()`` names, element types and ranks agree with onnxruntime's."""
    _onnxtrain_module()
    ours = _our_session(case_id).get_inputs()
    theirs = _ort_session(case_id).get_inputs()
    assert [i.name for i in ours] == [i.name for i in theirs]
    assert [i.type for i in ours] == [i.type for i in theirs]
    assert [len(i.shape) for i in ours] == [len(i.shape) for i in theirs]


@pytest.mark.parametrize("batch,seq_len", SHAPES, ids=[f"b{b}s{s}" for b, s in SHAPES])
@pytest.mark.parametrize("case_id", list_cases())
def test_outputs_match_onnxruntime(case_id: str, batch: int, seq_len: int) -> None:
    """Every output of ``sess.run(None, feeds)`` equals onnxruntime's."""
    _onnxtrain_module()
    feeds = get_case(case_id).make_inputs(batch, seed=batch * 1000 + seq_len, seq_len=seq_len)
    ort_session = _ort_session(case_id)
    expected = ort_session.run(None, feeds)
    actual = _our_session(case_id).run(None, feeds)

    names = [o.name for o in ort_session.get_outputs()]
    assert len(actual) == len(expected), f"{case_id}: {len(actual)} outputs, expected {names}"
    for name, ours, theirs in zip(names, actual, expected):
        ours = np.asarray(ours)
        where = f"{case_id}, output {name!r}, batch {batch}, seq_len {seq_len}"
        assert ours.dtype == theirs.dtype, f"{where}: dtype {ours.dtype}, expected {theirs.dtype}"
        assert ours.shape == theirs.shape, f"{where}: shape {ours.shape}, expected {theirs.shape}"
        np.testing.assert_allclose(ours, theirs, rtol=RTOL, atol=ATOL, err_msg=where)
