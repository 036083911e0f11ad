"""InferenceSession and its helpers, shaped like onnxruntime's."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from onnxtrain import _C, _dtypes
from onnxtrain._logging import logger

# ONNX TensorProto.DataType codes -> the names onnxruntime reports ("tensor(float)").
_TYPE_NAMES = {
    1: "float", 2: "uint8", 3: "int8", 4: "uint16", 5: "int16", 6: "int32", 7: "int64",
    8: "string", 9: "bool", 10: "float16", 11: "double", 12: "uint32", 13: "uint64", 16: "bfloat16",
    17: "float8e4m3fn", 18: "float8e4m3fnuz", 19: "float8e5m2", 20: "float8e5m2fnuz", 21: "uint4", 22: "int4",
    23: "float4e2m1", 24: "float8e8m0",
}


@dataclass(frozen=True)
class NodeArg:
    """A graph input or output: its name, shape (ints, symbolic names or None) and type."""

    name: str
    shape: list[int | str | None] | None
    type: str


# onnxruntime's SessionOptions attributes that onnxtrain does not implement: setting one is an
# error that says so (rather than a silent no-op that changes nothing the user asked for).
_ONNXRUNTIME_ONLY = frozenset({
    "inter_op_num_threads", "execution_mode", "execution_order", "enable_cpu_mem_arena", "enable_mem_pattern",
    "enable_mem_reuse", "log_severity_level", "log_verbosity_level", "logid", "use_deterministic_compute",
})

#: Which graph rewrites run when a model loads, with onnxruntime's names and values:
#: ``ORT_DISABLE_ALL`` runs none beyond what the engine needs, ``ORT_ENABLE_BASIC`` folds
#: (BatchNorm into Conv), ``ORT_ENABLE_EXTENDED`` and ``ORT_ENABLE_ALL`` (the default) fuse too.
GraphOptimizationLevel = _C.GraphOptimizationLevel


class SessionOptions:
    """Options for an InferenceSession or a training Module, shaped like onnxruntime's.

    Attributes:
        intra_op_num_threads: threads for the work inside one op; 0 (the default) uses every
            core. A session never changes the process's OpenMP or torch thread settings.
        graph_optimization_level: a ``GraphOptimizationLevel`` (default ``ORT_ENABLE_ALL``).
        optimized_model_filepath: when set, the model as it runs (after the rewrites) is saved
            there when it loads, for inspection.
        enable_profiling: time every kernel; ``InferenceSession.end_profiling()`` writes the
            profile as Chrome-trace JSON (chrome://tracing, Perfetto) and returns its path.
        profile_file_prefix: the profile's file name starts so (default "onnxtrain_profile").

    Setting any other attribute raises AttributeError: onnxruntime's options that onnxtrain
    does not implement are named as such, other names as unknown.
    """

    intra_op_num_threads: int
    graph_optimization_level: Any
    optimized_model_filepath: str
    enable_profiling: bool
    profile_file_prefix: str

    # name -> (default, check); the check returns the value to store or raises.
    _OPTIONS: dict[str, tuple[Any, Any]] = {
        "intra_op_num_threads": (0, lambda value: _non_negative_int("intra_op_num_threads", value)),
        "graph_optimization_level": (GraphOptimizationLevel.ORT_ENABLE_ALL, lambda value: _level(value)),
        "optimized_model_filepath": ("", lambda value: _path("SessionOptions.optimized_model_filepath", value)),
        "enable_profiling": (False, lambda value: _bool("enable_profiling", value)),
        "profile_file_prefix": ("onnxtrain_profile", lambda value: _path("SessionOptions.profile_file_prefix", value)),
    }

    def __init__(self) -> None:
        for name, (default, _) in self._OPTIONS.items():
            object.__setattr__(self, name, default)

    def __setattr__(self, name: str, value: Any) -> None:
        option = self._OPTIONS.get(name)
        if option is None:
            known = ", ".join(sorted(self._OPTIONS))
            if name in _ONNXRUNTIME_ONLY:
                raise AttributeError(f"SessionOptions.{name} is an onnxruntime option that onnxtrain does not "
                                     f"implement; onnxtrain's options: {known}")
            raise AttributeError(f"SessionOptions has no option {name!r}; its options: {known}")
        object.__setattr__(self, name, option[1](value))

    def __repr__(self) -> str:
        values = ", ".join(f"{name}={getattr(self, name)!r}" for name in self._OPTIONS)
        return f"SessionOptions({values})"

    def _native(self) -> Any:
        native = _C.NativeSessionOptions()
        for name in self._OPTIONS:
            setattr(native, name, getattr(self, name))
        return native


def _native_options(options: SessionOptions | None) -> Any:
    return (options or SessionOptions())._native()


def _level(value: Any) -> Any:
    if isinstance(value, GraphOptimizationLevel):
        return value
    levels = {level.value: level for level in GraphOptimizationLevel.__members__.values()}
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool) and int(value) in levels:
        return levels[int(value)]
    raise TypeError(f"SessionOptions.graph_optimization_level must be a GraphOptimizationLevel "
                    f"({', '.join(GraphOptimizationLevel.__members__)}), got {value!r}")


def _bool(name: str, value: Any) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"SessionOptions.{name} must be a bool, got {type(value).__name__}")
    return bool(value)


def _non_negative_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"SessionOptions.{name} must be an int, got {type(value).__name__}")
    if value < 0:
        raise ValueError(f"SessionOptions.{name} must be >= 0 (0: every core), got {value}")
    return int(value)


def _path(argument: str, value: Any) -> str:
    """``os.fspath(value)``, or a TypeError naming the argument."""
    if not isinstance(value, (str, os.PathLike)):
        raise TypeError(f"{argument} must be a path (str or os.PathLike), got {type(value).__name__}")
    return os.fspath(value)


_NUMERIC_KINDS = frozenset("biuf")  # bool, int, uint, float (float16 included)


_SEQUENCE = -1  # the engine's dtype code of a sequence of tensors


def _type_name(entry: dict[str, Any]) -> str:
    """onnxruntime's spelling of a value's type: "tensor(float)", "seq(tensor(int64))",
    "optional(tensor(float))"."""
    if entry["dtype"] == _SEQUENCE:
        name = f"seq(tensor({_TYPE_NAMES.get(entry['element_dtype'], 'undefined')}))"
    else:
        name = f"tensor({_TYPE_NAMES.get(entry['dtype'], 'undefined')})"
    return f"optional({name})" if entry["optional"] else name


def _node_args(entries: Iterable[dict[str, Any]]) -> list[NodeArg]:
    return [NodeArg(e["name"], e["shape"], _type_name(e)) for e in entries]


def _as_input_array(name: str, value: Any, expected_dtype: int | None) -> tuple[np.ndarray, int]:
    """A C-contiguous array for the engine, and the ONNX type code of the bits it holds when
    its type is one numpy lacks (0 otherwise): ml_dtypes arrays (bfloat16, float8, 4-bit), or
    unsigned arrays of the right width fed to an input of such a type, travel as bits."""
    # Each run converts every feed: take the common case (a C-contiguous numeric ndarray)
    # with as few checks as possible.
    if type(value) is np.ndarray and value.flags.c_contiguous:
        array = value
    else:
        array = np.asarray(value, order="C")
    code = _dtypes.bits_code(array)
    if code:
        return _dtypes.as_bits(array, code), code
    if array.dtype.kind in _NUMERIC_KINDS:
        return array, expected_dtype if expected_dtype and _dtypes.is_bits_for(array, expected_dtype) else 0
    raise ValueError(f"input '{name}': onnxtrain takes numeric arrays, got dtype {array.dtype}")


def _provider_names(providers: Sequence[Any] | None) -> list[str]:
    """Provider names from onnxruntime's forms: "name" or ("name", {options})."""
    names = []
    for provider in providers or []:
        names.append(provider[0] if isinstance(provider, tuple) and provider else provider)
    return names


class InferenceSession:
    """Loads an ONNX model (a path or the serialized bytes) and runs it, as
    ``onnxruntime.InferenceSession`` does.

    Args:
        path_or_bytes: the model file, or the serialized model.
        sess_options: a ``SessionOptions`` (threads).
        providers: onnxruntime's execution providers; onnxtrain has the CPU one only
            ("CPUExecutionProvider"), and any other is an error.
        provider_options: options per provider; onnxtrain's CPU provider takes none.

    Raises:
        ValueError: a provider other than the CPU's, or provider options.
        RuntimeError: the model cannot be read or uses something onnxtrain cannot run.
        TypeError: an unknown keyword argument (onnxruntime's others are not implemented).
    """

    def __init__(
        self,
        path_or_bytes: str | bytes | os.PathLike[str],
        sess_options: SessionOptions | None = None,
        providers: Sequence[Any] | None = None,
        provider_options: Sequence[dict[str, Any]] | None = None,
    ) -> None:
        names = _provider_names(providers)
        if any(p not in ("CPUExecutionProvider", "cpu") for p in names):
            raise ValueError(f"onnxtrain runs on the CPU only for now; got providers {names}")
        if provider_options and any(provider_options):
            raise ValueError(f"onnxtrain's CPU provider takes no options; got {list(provider_options)}")
        if sess_options is not None and not isinstance(sess_options, SessionOptions):
            raise TypeError(f"sess_options must be an onnxtrain.SessionOptions, got {type(sess_options).__name__}")
        if isinstance(path_or_bytes, bytes):
            model: str | bytes = path_or_bytes
        elif isinstance(path_or_bytes, (str, os.PathLike)):
            model = os.fspath(path_or_bytes)
        else:
            raise TypeError("InferenceSession: path_or_bytes must be a model's path (str or os.PathLike) or its bytes, "
                            f"got {type(path_or_bytes).__name__}")
        self._session = _C.InferenceSession(model, _native_options(sess_options))
        logger.info("loaded %s: %d inputs, %d outputs",
                    f"a model of {len(model)} bytes" if isinstance(model, bytes) else model,
                    len(self._session.inputs()), len(self._session.outputs()))
        self._inputs = _node_args(self._session.inputs())
        self._outputs = _node_args(self._session.outputs())
        self._input_dtypes = {e["name"]: e["dtype"] for e in self._session.inputs()}
        self._sequence_inputs = {e["name"]: e["element_dtype"] for e in self._session.inputs() if e["dtype"] == _SEQUENCE}
        self._optional_inputs = {e["name"] for e in self._session.inputs() if e["optional"]}
        self._output_dtypes = {e["name"]: e["dtype"] for e in self._session.outputs()}

    def get_inputs(self) -> list[NodeArg]:
        """The model's inputs (initializers excluded), in graph order."""
        return list(self._inputs)

    def get_outputs(self) -> list[NodeArg]:
        """The model's outputs, in graph order."""
        return list(self._outputs)

    def get_providers(self) -> list[str]:
        """The execution providers in use: always ``["CPUExecutionProvider"]``."""
        return ["CPUExecutionProvider"]

    def end_profiling(self) -> str:
        """With ``SessionOptions.enable_profiling``: writes the per-node profile of the runs so far
        (Chrome-trace JSON, as onnxruntime writes it), returns the file's path and starts a new
        profile. Without profiling: ""."""
        return self._session.end_profiling()

    def run(
        self, output_names: Sequence[str] | None, input_feed: Mapping[str, Any], run_options: Any = None
    ) -> list[np.ndarray]:
        """Runs the model; ``output_names`` None means every output, in graph order.

        ``input_feed`` maps input names to arrays (numpy, or anything ``numpy.asarray`` takes;
        bfloat16, float8, int4, uint4 and float4e2m1 as ml_dtypes arrays or their bits; outputs of
        those types come back as ml_dtypes arrays). A sequence input (``seq(tensor(...))``)
        takes a list of arrays and a sequence output comes back as one; an optional input
        takes None for no value, and an optional output without one comes back as None.
        ``run_options`` is accepted
        for onnxruntime's signature and must be None.
        """
        if run_options is not None:
            raise ValueError("onnxtrain has no RunOptions; pass run_options=None")
        if isinstance(output_names, str):
            raise TypeError(f"run: output_names must be a list of names (or None), not a str: [{output_names!r}]?")
        if not isinstance(input_feed, Mapping):
            raise TypeError(f"run: input_feed must map input names to arrays, got {type(input_feed).__name__}")
        names = list(output_names) if output_names else []  # empty: every output
        feeds: dict[str, np.ndarray] = {}
        typed_inputs: dict[str, int] = {}
        for name, value in input_feed.items():
            # The common case first, in few steps: a small model runs in microseconds.
            if (type(value) is np.ndarray and value.dtype.kind in "fib" and value.dtype.isbuiltin == 1
                    and value.flags.c_contiguous):
                feeds[name] = value
                continue
            if value is None and name in self._optional_inputs:
                feeds[name] = None  # an optional without a value
                continue
            if name in self._sequence_inputs and isinstance(value, (list, tuple)):
                feeds[name], code = self._sequence_feed(name, value)
            else:
                feeds[name], code = _as_input_array(name, value, self._input_dtypes.get(name))
            if code:
                typed_inputs[name] = code
        results, typed_outputs = self._session.run(names, feeds, typed_inputs)
        for i, code in typed_outputs:
            if isinstance(results[i], list):
                results[i] = [_dtypes.from_bits(r, code) for r in results[i]]
            else:
                results[i] = _dtypes.from_bits(results[i], code)
        return results

    def _sequence_feed(self, name: str, value: Sequence[Any]) -> tuple[list[np.ndarray], int]:
        """The arrays of a sequence input (a list or tuple), and the ONNX code of the bits they
        hold (as _as_input_array), the same for every element."""
        arrays, codes = [], set()
        for k, element in enumerate(value):
            array, code = _as_input_array(f"{name}[{k}]", element, self._sequence_inputs[name])
            arrays.append(array)
            codes.add(code)
        if len(codes) > 1:
            raise ValueError(f"input '{name}': the elements of a sequence must have one element type")
        return arrays, codes.pop() if codes else 0


def supported_ops() -> list[tuple[str, str, int, int]]:
    """(domain, op_type, since_version, until_version) of every registered kernel."""
    return [tuple(op) for op in _C.supported_ops()]
