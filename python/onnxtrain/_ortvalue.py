"""OrtValue: onnxtrain's own tensor type, shaped like onnxruntime's, speaking DLPack."""

from __future__ import annotations

from typing import Any

import numpy as np


class OrtValue:
    """A CPU tensor. ``numpy()`` and ``__dlpack__`` share its memory; nothing is copied.

    ``OrtValue.ortvalue_from_numpy(array)`` wraps an array (C-contiguous, else copied once);
    ``torch.from_dlpack(value)`` views it as a torch tensor.
    """

    __slots__ = ("_array",)

    def __init__(self, array: np.ndarray) -> None:
        array = np.ascontiguousarray(array)
        if array.dtype.kind not in "biuf" and array.dtype.name != "bfloat16":
            raise ValueError(f"OrtValue holds numeric tensors; got an array of dtype {array.dtype}")
        self._array = array

    @classmethod
    def ortvalue_from_numpy(cls, array: np.ndarray, device_type: str = "cpu", device_id: int = 0) -> OrtValue:
        """Wraps ``array`` (C-contiguous, else copied once); only the CPU device exists."""
        if device_type != "cpu":
            raise RuntimeError(f"device '{device_type}:{device_id}' is not available: onnxtrain runs on the CPU")
        return cls(np.asarray(array))

    @classmethod
    def from_dlpack(cls, tensor: Any) -> OrtValue:
        """Views any DLPack tensor (torch's, numpy's) without copying."""
        return cls(np.from_dlpack(tensor))

    def numpy(self) -> np.ndarray:
        """The values as a numpy array that shares this tensor's memory."""
        return self._array

    def shape(self) -> list[int]:
        """The dimensions."""
        return list(self._array.shape)

    def element_type(self) -> np.dtype:
        """The numpy dtype of the elements."""
        return self._array.dtype

    def device_name(self) -> str:
        """Where the memory lives: always \"cpu\"."""
        return "cpu"

    def is_tensor(self) -> bool:
        """True: an OrtValue here is always a tensor."""
        return True

    def __dlpack__(self, **kwargs: Any) -> Any:
        return self._array.__dlpack__(**kwargs)

    def __dlpack_device__(self) -> tuple[int, int]:
        return self._array.__dlpack_device__()

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        return self._array if dtype is None else self._array.astype(dtype)

    def __repr__(self) -> str:
        return f"OrtValue(shape={self.shape()}, dtype={self._array.dtype})"
