"""Losses with their options, as ``onnxruntime.training.onnxblock.loss`` names them.

Pass one as ``generate_artifacts(..., loss=CrossEntropyLoss(ignore_index=-100))``; each
computes what the ``torch.nn.functional`` loss of the same name and options computes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, Optional

Reduction = Literal["mean", "sum", "none"]
_REDUCTIONS = ("mean", "sum", "none")


def _reduction(value: str) -> str:
    if value not in _REDUCTIONS:
        raise ValueError(f"reduction must be one of {_REDUCTIONS}, got {value!r}")
    return value


def _floats(name: str, values: Optional[Sequence[float]]) -> Optional[list[float]]:
    if values is None:
        return None
    try:
        import numpy as np

        flat = np.asarray(values, dtype=np.float64).reshape(-1)
    except (TypeError, ValueError) as error:
        raise TypeError(f"{name} must be a sequence of numbers") from error
    return [float(v) for v in flat]


class _Loss:
    """Common base: the options ``generate_artifacts`` passes to the C++ core."""

    kind: str = ""

    def __init__(self, reduction: Reduction = "mean") -> None:
        self.reduction: str = _reduction(reduction)

    def _options(self) -> dict:
        return {"loss": self.kind, "reduction": self.reduction}

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={v!r}" for k, v in vars(self).items())
        return f"{type(self).__name__}({fields})"


class MSELoss(_Loss):
    """mean((input - target)^2); label input ``target`` of the input's type and shape."""

    kind = "mse"


class L1Loss(_Loss):
    """mean(|input - target|); label input ``target`` of the input's type and shape."""

    kind = "l1"


class CrossEntropyLoss(_Loss):
    """Softmax cross-entropy over axis 1 of scores [N, C, ...]; label input ``labels``
    (int64 class indices [N, ...]). ``weight``: one weight per class; ``ignore_index``:
    a label value that contributes nothing (not even to the mean's denominator)."""

    kind = "cross_entropy"

    def __init__(
        self,
        weight: Optional[Sequence[float]] = None,
        reduction: Reduction = "mean",
        ignore_index: Optional[int] = None,
    ) -> None:
        super().__init__(reduction)
        self.weight: Optional[list[float]] = _floats("weight", weight)
        if ignore_index is not None and not isinstance(ignore_index, int):
            raise TypeError(f"ignore_index must be an int, got {type(ignore_index).__name__}")
        self.ignore_index: Optional[int] = ignore_index

    def _options(self) -> dict:
        return {**super()._options(), "weight": self.weight, "ignore_index": self.ignore_index}


class BCEWithLogitsLoss(_Loss):
    """Sigmoid + binary cross-entropy in torch's numerically stable form; label input
    ``target`` of the input's type and shape. ``weight`` and ``pos_weight`` are 1-D and
    broadcast against the last axis."""

    kind = "bce_with_logits"

    def __init__(
        self,
        weight: Optional[Sequence[float]] = None,
        reduction: Reduction = "mean",
        pos_weight: Optional[Sequence[float]] = None,
    ) -> None:
        super().__init__(reduction)
        self.weight: Optional[list[float]] = _floats("weight", weight)
        self.pos_weight: Optional[list[float]] = _floats("pos_weight", pos_weight)

    def _options(self) -> dict:
        return {**super()._options(), "weight": self.weight, "pos_weight": self.pos_weight}


__all__ = ["BCEWithLogitsLoss", "CrossEntropyLoss", "L1Loss", "MSELoss"]
