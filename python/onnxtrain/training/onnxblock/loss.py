"""Loss blocks, named and parametrized as in ``onnxruntime.training.onnxblock.loss``; each
computes what the ``torch.nn.functional`` loss of the same name and options computes.

As blocks: ``MSELoss()(output_name, target_name="target")`` appends the loss to the base
model, adds the graph input ``target_name`` (typed like the output; class-index losses take
int64 ``labels``) and returns the loss's name. Stack them in a custom ``Block`` or pass one
as ``generate_artifacts(..., loss=CrossEntropyLoss(ignore_index=-100))``.

Every loss is built by onnxtrain's C++ loss builder (``_C.build_loss_model``), the one
``generate_artifacts`` uses: a block passes its options and merges the nodes and the label
input it returns into the base. In ``generate_artifacts`` the four builtin losses (MSE, L1,
BCEWithLogits and CrossEntropy without label smoothing) go to that builder directly (see
``_options``), as ``LossType`` does; the others are called as blocks, as any custom block.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Literal, Optional

import numpy as np
import onnx

from onnxtrain import _C
from onnxtrain.training.onnxblock import _graph_utils
from onnxtrain.training.onnxblock import model_accessor as _accessor
from onnxtrain.training.onnxblock.blocks import Block

Reduction = Literal["mean", "sum", "none"]
_REDUCTIONS = ("mean", "sum", "none")


def _reduction(value: str, allowed: Sequence[str] = _REDUCTIONS) -> str:
    if value not in allowed:
        raise ValueError(f"reduction must be one of {tuple(allowed)}, got {value!r}")
    return value


def _floats(name: str, values: Optional[Sequence[float]]) -> Optional[list[float]]:
    if values is None:
        return None
    try:
        flat = np.asarray(values, dtype=np.float64).reshape(-1)
    except (TypeError, ValueError) as error:
        raise TypeError(f"{name} must be a sequence of numbers") from error
    return [float(v) for v in flat]


def _optional_int(name: str, value: Optional[int]) -> Optional[int]:
    if value is not None and (not isinstance(value, (int, np.integer)) or isinstance(value, bool)):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    return None if value is None else int(value)


def _build_loss_model(accessor: _accessor.ModelAccessor, input_name: str, options: dict) -> tuple[bytes, str, str]:
    """``_C.build_loss_model`` on the model under construction (by path when its data is on
    disk or too large to serialize)."""
    model = accessor.model
    if accessor.has_path or model.ByteSize() > _accessor._PROTOBUF_LIMIT:
        with accessor.saved() as path:
            return _C.build_loss_model(path, input_name, options)
    return _C.build_loss_model(model.SerializeToString(), input_name, options, os.getcwd())


class _Loss(Block):
    """Common base: the reduction, the C++ options and the call of the C++ loss builder."""

    kind: str = ""  # the C++ loss builder's name for this loss
    _builtin = False  # generate_artifacts hands it to the C++ builder directly

    def __init__(self, reduction: str = "mean", allowed: Sequence[str] = _REDUCTIONS) -> None:
        super().__init__()
        self.reduction: str = _reduction(reduction, allowed)

    def _loss_options(self) -> dict:
        """This loss's options, as the C++ loss builder reads them."""
        return {"loss": self.kind, "reduction": self.reduction}

    def _options(self) -> Optional[dict]:
        """The options generate_artifacts passes to the C++ loss builder for a builtin loss,
        or None when generate_artifacts calls the block (as any custom block)."""
        return self._loss_options() if self._builtin else None

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={v!r}" for k, v in vars(self).items()
                           if not k.startswith("_") and k not in ("base", "temp_file_name"))
        return f"{type(self).__name__}({fields})"

    def _append(self, input_name: str, label_name: str) -> str:
        """Appends this loss of ``input_name`` to the base, with the label input
        ``label_name``; returns the loss output's name. A label an earlier loss block added
        with the same type is shared."""
        who = type(self).__name__
        if not isinstance(label_name, str) or not label_name:
            raise TypeError(f"{who}: the target name must be a non-empty str, got {label_name!r}")
        _graph_utils.require_values(self.base, [input_name], who)
        accessor = _accessor.current()
        earlier = accessor.targets.get(label_name)
        if earlier is None and label_name in _graph_utils.value_names(self.base.graph):
            raise self._clash(label_name, earlier_loss=False)
        options = {**self._loss_options(), "label_name": label_name,
                   "label_taken": "error" if earlier is None else "share",
                   "loss_output_name": f"onnxblock::{who}::output", "loss_output_taken": "fresh"}
        data, output, label_name = _build_loss_model(accessor, input_name, options)
        loss = onnx.load_model_from_string(data)
        [label] = [i for i in loss.graph.input if i.name == label_name]
        if earlier is not None and earlier.type != label.type:
            raise self._clash(label_name, earlier_loss=True)
        self.base.graph.node.extend(loss.graph.node)
        if earlier is None:
            self.base.graph.input.append(label)
            accessor.targets[label_name] = label
        return output

    def _clash(self, name: str, earlier_loss: bool) -> ValueError:
        who = type(self).__name__
        return ValueError(f"{who}: the target name '{name}' clashes with a value the model has already"
                          + (" (the target of another loss, of another type)" if earlier_loss else "")
                          + f"; pass another name, e.g. {who}()(..., target_name='{name}_{who.lower()}')")


class MSELoss(_Loss):
    """mean((input - target)^2); label input ``target`` of the input's type and shape."""

    kind = "mse"
    _builtin = True

    def build(self, loss_input_name: str, target_name: str = "target") -> str:
        return self._append(loss_input_name, target_name)


class L1Loss(_Loss):
    """mean(|input - target|); label input ``target`` of the input's type and shape."""

    kind = "l1"
    _builtin = True

    def build(self, loss_input_name: str, target_name: str = "target") -> str:
        return self._append(loss_input_name, target_name)


class HuberLoss(_Loss):
    """torch's huber_loss: 0.5 d^2 where |d| < delta, else delta (|d| - 0.5 delta), with
    d = input - target; label input ``target``."""

    kind = "huber"

    def __init__(self, reduction: Reduction = "mean", delta: float = 1.0) -> None:
        super().__init__(reduction)
        if not delta > 0:
            raise ValueError(f"HuberLoss: delta must be positive, got {delta}")
        self.delta: float = float(delta)

    def _loss_options(self) -> dict:
        return {**super()._loss_options(), "delta": self.delta}

    def build(self, loss_input_name: str, target_name: str = "target") -> str:
        return self._append(loss_input_name, target_name)


class SmoothL1Loss(HuberLoss):
    """torch's smooth_l1_loss: 0.5 d^2 / beta where |d| < beta, else |d| - 0.5 beta (beta = 0:
    L1); label input ``target``."""

    kind = "smooth_l1"

    def __init__(self, reduction: Reduction = "mean", beta: float = 1.0) -> None:
        _Loss.__init__(self, reduction)
        if not beta >= 0:
            raise ValueError(f"SmoothL1Loss: beta must not be negative, got {beta}")
        self.beta: float = float(beta)

    def _loss_options(self) -> dict:
        return {**_Loss._loss_options(self), "beta": self.beta}


class BCEWithLogitsLoss(_Loss):
    """Sigmoid + binary cross-entropy in torch's numerically stable form; label input
    ``target`` of the input's type and shape. ``weight`` and ``pos_weight`` are 1-D and
    broadcast against the last axis."""

    kind = "bce_with_logits"
    _builtin = True

    def __init__(
        self,
        weight: Optional[Sequence[float]] = None,
        reduction: Reduction = "mean",
        pos_weight: Optional[Sequence[float]] = None,
    ) -> None:
        super().__init__(reduction)
        self.weight: Optional[list[float]] = _floats("weight", weight)
        self.pos_weight: Optional[list[float]] = _floats("pos_weight", pos_weight)

    def _loss_options(self) -> dict:
        return {**super()._loss_options(), "weight": self.weight, "pos_weight": self.pos_weight}

    def build(self, loss_input_name: str, target_name: str = "target") -> str:
        return self._append(loss_input_name, target_name)


class _ClassIndexLoss(_Loss):
    """Losses over class scores [N, C, d...] with int64 class indices [N, d...]."""

    def __init__(self, weight: Optional[Sequence[float]], reduction: Reduction,
                 ignore_index: Optional[int]) -> None:
        super().__init__(reduction)
        self.weight: Optional[list[float]] = _floats("weight", weight)
        self.ignore_index: Optional[int] = _optional_int("ignore_index", ignore_index)

    def _loss_options(self) -> dict:
        return {**super()._loss_options(), "weight": self.weight, "ignore_index": self.ignore_index}


class NLLLoss(_ClassIndexLoss):
    """torch's nll_loss of log-probabilities [N, C, d...]; label input ``labels`` (int64 class
    indices [N, d...]). ``weight``: one per class; ``ignore_index``: a label that contributes
    nothing (not even to the mean's denominator)."""

    kind = "nll"

    def __init__(self, weight: Optional[Sequence[float]] = None, reduction: Reduction = "mean",
                 ignore_index: Optional[int] = None) -> None:
        super().__init__(weight, reduction, ignore_index)

    def build(self, loss_input_name: str, labels_name: str = "labels") -> str:
        return self._append(loss_input_name, labels_name)


class CrossEntropyLoss(_ClassIndexLoss):
    """Softmax cross-entropy over axis 1 of scores [N, C, ...]; label input ``labels``
    (int64 class indices [N, ...]). ``weight``: one weight per class; ``ignore_index``:
    a label value that contributes nothing (not even to the mean's denominator);
    ``label_smoothing``: torch's, mixing the one-hot target with the uniform distribution."""

    kind = "cross_entropy"
    _builtin = True

    def __init__(
        self,
        weight: Optional[Sequence[float]] = None,
        reduction: Reduction = "mean",
        ignore_index: Optional[int] = None,
        label_smoothing: float = 0.0,
    ) -> None:
        super().__init__(weight, reduction, ignore_index)
        if not 0.0 <= label_smoothing <= 1.0:
            raise ValueError(f"CrossEntropyLoss: label_smoothing must lie in [0, 1], got {label_smoothing}")
        self.label_smoothing: float = float(label_smoothing)

    def _loss_options(self) -> dict:
        return {**super()._loss_options(), "label_smoothing": self.label_smoothing}

    def _options(self) -> Optional[dict]:
        if self.label_smoothing:
            return None  # generate_artifacts calls the block, as it always has for label smoothing
        return super()._options()

    def build(self, scores_input_name: str, labels_name: str = "labels") -> str:
        return self._append(scores_input_name, labels_name)


class KLDivLoss(_Loss):
    """torch's kl_div of log-probabilities: target (log target - input), or with
    ``log_target`` exp(target) (target - input); label input ``target``. ``reduction``
    "batchmean" divides the sum by the batch size (axis 0), "mean" by the element count."""

    kind = "kl_div"

    def __init__(self, reduction: Literal["mean", "batchmean", "sum", "none"] = "mean",
                 log_target: bool = False) -> None:
        super().__init__(reduction, ("mean", "batchmean", "sum", "none"))
        self.log_target: bool = bool(log_target)

    def _loss_options(self) -> dict:
        return {**super()._loss_options(), "log_target": self.log_target}

    def build(self, loss_input_name: str, target_name: str = "target") -> str:
        return self._append(loss_input_name, target_name)


__all__ = [
    "BCEWithLogitsLoss", "CrossEntropyLoss", "HuberLoss", "KLDivLoss", "L1Loss", "MSELoss", "NLLLoss", "SmoothL1Loss",
]
