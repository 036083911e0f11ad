"""CheckpointState: parameters, optimizer state and properties, saved as one safetensors file.

The file is readable by any safetensors reader: ``safetensors.numpy.load_file(path)`` gives
``{parameter_name: array}`` (plus ``optimizer/<parameter>/<moment>`` entries when the optimizer
state was saved), so ``torch_module.load_state_dict(safetensors.torch.load_file(path))``
works for a model exported from that module.
"""

from __future__ import annotations

import numbers
import os
from typing import Any, Iterator, Union, cast

import numpy as np

from onnxtrain import _C
from onnxtrain._logging import logger
from onnxtrain import _dtypes
from onnxtrain._session import _path

PropertyValue = Union[int, float, str]


def _from_core(array: Any, dtype_code: int) -> np.ndarray:
    """Types numpy lacks (bfloat16, float8, 4-bit) leave the core as bits; show them as
    ml_dtypes arrays when it is installed."""
    return _dtypes.from_bits(array, dtype_code)


def _to_core(name: str, value: Any) -> np.ndarray:
    array = np.asarray(value, order="C")
    code = _dtypes.bits_code(array)
    if code:
        return _dtypes.as_bits(array, code)
    if array.dtype.kind not in "biuf":
        raise ValueError(f"parameter '{name}': expected a numeric array, got dtype {array.dtype}")
    return array


class Parameter:
    """One parameter of a CheckpointState: ``name``, ``data`` (read/write), ``grad``, ``requires_grad``.

    ``data`` and ``grad`` are copies: they do not change when training updates the state.
    """

    def __init__(self, state: _C.CheckpointState, name: str) -> None:
        self._state = state
        self._name = name

    @property
    def name(self) -> str:
        """The parameter's name (the initializer's, in the models)."""
        return self._name

    @property
    def data(self) -> np.ndarray:
        """A copy of the parameter's values."""
        return _from_core(self._state.parameter_data(self._name), self._state.parameter_dtype(self._name))

    @data.setter
    def data(self, value: np.ndarray) -> None:
        """Copies ``value`` in; its shape and dtype must be the parameter's (else ValueError)."""
        self._state.set_parameter_data(self._name, _to_core(self._name, value))

    @property
    def grad(self) -> np.ndarray | None:
        """A copy of the gradient last computed for this parameter, or None before any."""
        grad = self._state.parameter_grad(self._name)
        return None if grad is None else _from_core(grad, self._state.parameter_dtype(self._name))

    @property
    def requires_grad(self) -> bool:
        """True for a trained parameter, False for a frozen one."""
        return self._state.parameter_requires_grad(self._name)

    def __repr__(self) -> str:
        return f"Parameter(name={self._name!r}, requires_grad={self.requires_grad})"


class Parameters:
    """The parameters of a CheckpointState, by name; iterating yields ``(name, Parameter)``."""

    def __init__(self, state: _C.CheckpointState) -> None:
        self._state = state

    def __getitem__(self, name: str) -> Parameter:
        if name not in self:
            raise KeyError(f"the checkpoint has no parameter {name!r}")
        return Parameter(self._state, name)

    def __setitem__(self, name: str, value: np.ndarray) -> None:
        """Copies ``value`` into parameter ``name``; shape and dtype must match (else ValueError)."""
        self[name].data = value

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self._state.has_parameter(name)

    def __iter__(self) -> Iterator[tuple[str, Parameter]]:
        for name in self._state.parameter_names():
            yield name, Parameter(self._state, name)

    def __len__(self) -> int:
        return len(self._state.parameter_names())

    def __repr__(self) -> str:
        return f"Parameters({[name for name, _ in self]})"


class Properties:
    """User properties of a CheckpointState: int, float or str values, saved with the checkpoint.

    Iterating yields ``(name, value)``.
    """

    def __init__(self, state: _C.CheckpointState) -> None:
        self._state = state

    def __getitem__(self, name: str) -> PropertyValue:
        if name not in self:
            raise KeyError(f"the checkpoint has no property {name!r}")
        return cast(PropertyValue, self._state.get_property(name))

    def __setitem__(self, name: str, value: PropertyValue) -> None:
        if not isinstance(name, str):
            raise TypeError(f"property names are str, not {type(name).__name__}")
        # numpy scalars are welcome; the core takes exactly int, float or str (else TypeError).
        if not isinstance(value, (int, float, str)):
            if isinstance(value, numbers.Integral):
                value = int(value)
            elif isinstance(value, numbers.Real):
                value = float(value)
        self._state.set_property(name, value)

    def __delitem__(self, name: str) -> None:
        if name not in self:
            raise KeyError(f"the checkpoint has no property {name!r}")
        self._state.remove_property(name)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self._state.has_property(name)

    def __iter__(self) -> Iterator[tuple[str, PropertyValue]]:
        for name in self._state.property_names():
            yield name, cast(PropertyValue, self._state.get_property(name))

    def __len__(self) -> int:
        return len(self._state.property_names())

    def __repr__(self) -> str:
        return f"Properties({dict(self)})"


class CheckpointState:
    """The training state: parameters, gradients, optimizer state and user properties.

    Create it with ``CheckpointState.load_checkpoint(path)``.
    """

    def __init__(self, state: _C.CheckpointState) -> None:
        if not isinstance(state, _C.CheckpointState):
            raise TypeError(f"CheckpointState wraps an onnxtrain._C.CheckpointState, not {type(state).__name__}")
        self._state = state

    @classmethod
    def load_checkpoint(cls, checkpoint_uri: str | os.PathLike[str], verify: bool = True) -> CheckpointState:
        """Loads a checkpoint (full or nominal), any safetensors file, or a checkpoint that
        onnxruntime-training wrote (its ODTC flatbuffer, recognised by its file identifier).

        A truncated or corrupt file raises RuntimeError naming the file and the tensor. With
        ``verify`` (the default) each tensor's bytes are checked against the CRC-32C saved
        with it, so a flipped bit in the data is found too; ``verify=False`` skips that.
        """
        state = cls(_C.load_checkpoint(_path("load_checkpoint: checkpoint_uri", checkpoint_uri), bool(verify)))
        logger.info("loaded checkpoint %s: %d parameters", os.fspath(checkpoint_uri), len(state.parameters))
        return state

    @classmethod
    def save_checkpoint(
        cls,
        state: CheckpointState,
        checkpoint_uri: str | os.PathLike[str],
        include_optimizer_state: bool = False,
        format: str = "onnxtrain",
        *,
        external_data: bool | None = None,
    ) -> None:
        """Saves parameters and properties (and the optimizer state when asked) atomically.

        A process killed while saving leaves the previous file at ``checkpoint_uri`` intact.
        ``format="ort"`` writes the ODTC flatbuffer that onnxruntime-training 1.19.2 loads;
        the default is onnxtrain's safetensors file. In ORT's format the tensors go to the
        external data file ``<checkpoint_uri>.data`` when ORT would put them there: the state
        was loaded from such a checkpoint, or holds 1800 MiB or more (one flatbuffer holds
        at most 2 GB). ``external_data=True`` writes them there in any case; ``False`` only
        when the size asks for it.
        """
        if not isinstance(state, CheckpointState):
            raise TypeError(f"save_checkpoint takes a CheckpointState, not {type(state).__name__}")
        if external_data is not None and format != "ort":
            raise ValueError("save_checkpoint: external_data applies to format='ort' only")
        had_external_data = state._state.has_external_data
        if external_data is not None:
            state._state.has_external_data = bool(external_data)
        try:
            _C.save_checkpoint(state._state, _path("save_checkpoint: checkpoint_uri", checkpoint_uri),
                               include_optimizer_state, format)
        finally:
            state._state.has_external_data = had_external_data
        logger.info("saved checkpoint %s (%s format)%s", os.fspath(checkpoint_uri), format,
                    " with the optimizer state" if include_optimizer_state else "")

    @property
    def parameters(self) -> Parameters:
        """The parameters by name: ``in``, ``[name]``, ``[name] = array``, iteration, ``len``."""
        return Parameters(self._state)

    @property
    def properties(self) -> Properties:
        """User properties (int, float or str) saved with the checkpoint."""
        return Properties(self._state)

    def __repr__(self) -> str:
        return f"CheckpointState(parameters={len(self.parameters)}, properties={len(self.properties)})"
