"""InferenceSession and its helpers, shaped like onnxruntime's."""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from onnxtrain import _C

# ONNX TensorProto.DataType codes -> the names onnxruntime reports ("tensor(float)").
_TYPE_NAMES = {
    1: "float", 2: "uint8", 3: "int8", 4: "uint16", 5: "int16", 6: "int32", 7: "int64",
    8: "string", 9: "bool", 10: "float16", 11: "double", 12: "uint32", 13: "uint64", 16: "bfloat16",
}
_BFLOAT16 = 16


@dataclass(frozen=True)
class NodeArg:
    """A graph input or output: its name, shape (ints, symbolic names or None) and type."""

    name: str
    shape: list[int | str | None] | None
    type: str


class SessionOptions:
    """Options for an InferenceSession. ``intra_op_num_threads`` = 0 uses every core."""

    def __init__(self) -> None:
        self.intra_op_num_threads: int = 0


_NUMERIC_KINDS = frozenset("biuf")  # bool, int, uint, float (float16 included)


@functools.cache
def _bfloat16_dtype() -> np.dtype | None:
    try:
        import ml_dtypes
    except ImportError:
        return None
    return np.dtype(ml_dtypes.bfloat16)


def _node_args(entries: Iterable[dict[str, Any]]) -> list[NodeArg]:
    return [
        NodeArg(e["name"], e["shape"], f"tensor({_TYPE_NAMES.get(e['dtype'], 'undefined')})") for e in entries
    ]


def _as_input_array(name: str, value: Any, expected_dtype: int | None) -> tuple[np.ndarray, bool]:
    """A C-contiguous array for the engine, and whether it holds bfloat16 bits (numpy has no
    bfloat16: ml_dtypes arrays, or uint16 arrays fed to a bfloat16 input, travel as uint16)."""
    # Each run converts every feed: take the common case (a C-contiguous numeric ndarray)
    # with as few checks as possible.
    if type(value) is np.ndarray and value.flags.c_contiguous:
        array = value
    else:
        array = np.asarray(value, order="C")
    kind = array.dtype.kind
    if kind in _NUMERIC_KINDS:
        return array, kind == "u" and expected_dtype == _BFLOAT16 and array.dtype == np.uint16
    if array.dtype.name == "bfloat16":
        return array.view(np.uint16), True
    if array.dtype == object or array.dtype.kind in "USV":
        raise ValueError(f"input '{name}': onnxtrain takes numeric arrays, got dtype {array.dtype}")
    return array, expected_dtype == _BFLOAT16 and array.dtype == np.uint16


class InferenceSession:
    """Loads an ONNX model (a path or the serialized bytes) and runs it."""

    def __init__(
        self,
        path_or_bytes: str | bytes | os.PathLike[str],
        sess_options: SessionOptions | None = None,
        providers: Sequence[str] | None = None,
        **_: Any,
    ) -> None:
        if providers and any(p not in ("CPUExecutionProvider", "cpu") for p in providers):
            raise ValueError(f"onnxtrain runs on the CPU only for now; got providers {list(providers)}")
        threads = sess_options.intra_op_num_threads if sess_options else 0
        model = path_or_bytes if isinstance(path_or_bytes, bytes) else os.fspath(path_or_bytes)
        self._session = _C.InferenceSession(model, threads)
        self._inputs = _node_args(self._session.inputs())
        self._outputs = _node_args(self._session.outputs())
        self._input_dtypes = {e["name"]: e["dtype"] for e in self._session.inputs()}
        self._output_dtypes = {e["name"]: e["dtype"] for e in self._session.outputs()}

    def get_inputs(self) -> list[NodeArg]:
        return list(self._inputs)

    def get_outputs(self) -> list[NodeArg]:
        return list(self._outputs)

    def get_providers(self) -> list[str]:
        return ["CPUExecutionProvider"]

    def run(
        self, output_names: Sequence[str] | None, input_feed: Mapping[str, Any], run_options: Any = None
    ) -> list[np.ndarray]:
        """Runs the model; ``output_names`` None means every output, in graph order."""
        names = list(output_names) if output_names else []  # empty: every output
        feeds: dict[str, np.ndarray] = {}
        bfloat16_inputs: list[str] = []
        for name, value in input_feed.items():
            # The common case first, in few steps: a small model runs in microseconds.
            if type(value) is np.ndarray and value.dtype.kind in "fib" and value.flags.c_contiguous:
                feeds[name] = value
                continue
            feeds[name], is_bfloat16 = _as_input_array(name, value, self._input_dtypes.get(name))
            if is_bfloat16:
                bfloat16_inputs.append(name)
        results, bfloat16_outputs = self._session.run(names, feeds, bfloat16_inputs)
        bfloat16 = _bfloat16_dtype() if bfloat16_outputs else None
        if bfloat16 is not None:
            for i in bfloat16_outputs:
                results[i] = results[i].view(bfloat16)
        return results


def supported_ops() -> list[tuple[str, str, int, int]]:
    """(domain, op_type, since_version, until_version) of every registered kernel."""
    return [tuple(op) for op in _C.supported_ops()]
