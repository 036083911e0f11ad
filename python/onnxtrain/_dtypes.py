"""Element types numpy has no type of its own for: bfloat16, the float8 formats, int4, uint4
and float4e2m1.

They cross the engine's boundary as their bits with their ONNX type code: a uint16 array for
bfloat16, a uint8 array of one element per byte for the others (ml_dtypes' layout: a 4-bit
value in the low half of its byte). They come out as ml_dtypes arrays, or as those bits when
ml_dtypes is not installed.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

# ONNX TensorProto.DataType code -> ml_dtypes type name.
_ML_DTYPE_NAMES = {
    16: "bfloat16",
    17: "float8_e4m3fn",
    18: "float8_e4m3fnuz",
    19: "float8_e5m2",
    20: "float8_e5m2fnuz",
    21: "uint4",
    22: "int4",
    23: "float4_e2m1fn",
    24: "float8_e8m0fnu",
}
_CODES = {name: code for code, name in _ML_DTYPE_NAMES.items()}


@functools.cache
def ml_dtype(code: int) -> np.dtype | None:
    """The ml_dtypes type of an ONNX type code numpy lacks; None when ml_dtypes is missing or
    numpy has the type itself."""
    name = _ML_DTYPE_NAMES.get(code)
    if name is None:
        return None
    try:
        import ml_dtypes
    except ImportError:
        return None
    return np.dtype(getattr(ml_dtypes, name))


def bits_code(array: np.ndarray) -> int:
    """The ONNX type code of an ml_dtypes array numpy has no type for; 0 otherwise."""
    return 0 if array.dtype.isbuiltin == 1 else _CODES.get(array.dtype.name, 0)


def as_bits(array: np.ndarray, code: int) -> np.ndarray:
    """The bits of an array of the ml_dtypes type of ``code``, as the engine takes them."""
    return array.view(np.uint16 if array.dtype.itemsize == 2 else np.uint8)


def is_bits_for(array: np.ndarray, code: int) -> bool:
    """True when ``array`` may stand as the bits of ONNX type ``code`` (a uint16 array for a
    bfloat16 input, a uint8 one for the float8 and 4-bit types)."""
    if code not in _ML_DTYPE_NAMES:
        return False
    return array.dtype == (np.uint16 if code == 16 else np.uint8)


def from_bits(array: Any, code: int) -> Any:
    """An engine output that holds the bits of ONNX type ``code``, viewed as its ml_dtypes type."""
    dtype = ml_dtype(code)
    return array if dtype is None else array.view(dtype)
