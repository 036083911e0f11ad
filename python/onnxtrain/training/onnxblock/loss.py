"""Loss blocks, named and parametrized as in ``onnxruntime.training.onnxblock.loss``; each
computes what the ``torch.nn.functional`` loss of the same name and options computes.

As blocks: ``MSELoss()(output_name, target_name="target")`` appends the loss to the base
model, adds the graph input ``target_name`` (typed like the output; class-index losses take
int64 ``labels``) and returns the loss's name. Stack them in a custom ``Block`` or pass one
as ``generate_artifacts(..., loss=CrossEntropyLoss(ignore_index=-100))``.

In ``generate_artifacts`` the four builtin losses (MSE, L1, BCEWithLogits and
CrossEntropy without label smoothing) are added by the C++ loss builder, the same that
``LossType`` uses (see ``_options``); the others, and any custom block, are built here in
Python with standard ONNX ops. Either way the gradients come from onnxtrain's C++ builder.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal, Optional

import numpy as np
import onnx

from onnxtrain.training.onnxblock import _graph_utils
from onnxtrain.training.onnxblock import model_accessor as _accessor
from onnxtrain.training.onnxblock.blocks import Block

Reduction = Literal["mean", "sum", "none"]
_REDUCTIONS = ("mean", "sum", "none")
_FLOATING = {onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE, onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16}


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


class _Loss(Block):
    """Common base: the reduction, the label input and the C++ options."""

    kind: str = ""  # the C++ builder's name for this loss; "" when it has none

    def __init__(self, reduction: str = "mean", allowed: Sequence[str] = _REDUCTIONS) -> None:
        super().__init__()
        self.reduction: str = _reduction(reduction, allowed)

    def _options(self) -> Optional[dict]:
        """The options generate_artifacts passes to the C++ loss builder, or None when that
        builder does not have this loss (then the block is built in Python)."""
        if not self.kind:
            return None
        return {"loss": self.kind, "reduction": self.reduction}

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={v!r}" for k, v in vars(self).items()
                           if not k.startswith("_") and k not in ("base", "temp_file_name"))
        return f"{type(self).__name__}({fields})"

    # Graph helpers.
    def _node(self, op_type: str, *inputs: str, **attributes) -> str:
        return _graph_utils.add_node(self.base, op_type, inputs, **attributes)

    def _constant(self, value, elem_type: int) -> str:
        return _graph_utils.add_constant(self.base, value, elem_type)

    def _input_type(self, input_name: str) -> onnx.TypeProto:
        who = type(self).__name__
        _graph_utils.require_values(self.base, [input_name], who)
        found = _graph_utils.tensor_type(self.infer_shapes_on_base(), input_name, who)
        if found.tensor_type.elem_type not in _FLOATING:
            raise ValueError(f"{who}: its input '{input_name}' holds "
                             f"{onnx.helper.tensor_dtype_to_string(found.tensor_type.elem_type)} values; expected a "
                             "floating-point output")
        return found

    def _add_label(self, name: str, input_type: onnx.TypeProto, elem_type: Optional[int] = None,
                   drop_axis: Optional[int] = None) -> str:
        """Adds the graph input ``name``, typed like the loss input (or ``elem_type`` with axis
        ``drop_axis`` removed, for class indices). Dimension names are not copied: exporters
        name output axes freely, and a label must not be tied to an unrelated input axis."""
        who = type(self).__name__
        if not isinstance(name, str) or not name:
            raise TypeError(f"{who}: the target name must be a non-empty str, got {name!r}")
        label = onnx.ValueInfoProto(name=name)
        tensor = label.type.tensor_type
        tensor.elem_type = elem_type or input_type.tensor_type.elem_type
        if input_type.tensor_type.HasField("shape"):
            tensor.shape.SetInParent()
            for axis, dim in enumerate(input_type.tensor_type.shape.dim):
                if axis == drop_axis:
                    continue
                added = tensor.shape.dim.add()
                if dim.HasField("dim_value"):
                    added.dim_value = dim.dim_value
        accessor = _accessor.current()
        if name in _graph_utils.value_names(self.base.graph):
            earlier = accessor.targets.get(name)
            if earlier is not None and earlier.type == label.type:
                return name  # the same target of an earlier loss block: shared
            raise ValueError(f"{who}: the target name '{name}' clashes with a value the model has already"
                             + (" (the target of another loss, of another type)" if earlier is not None else "")
                             + f"; pass another name, e.g. {who}()(..., target_name='{name}_{who.lower()}')")
        self.base.graph.input.append(label)
        accessor.targets[name] = label
        return name

    def _reduce(self, elements: str) -> str:
        if self.reduction == "mean":
            return self._node("ReduceMean", elements, keepdims=0)
        if self.reduction == "sum":
            return self._node("ReduceSum", elements, keepdims=0)
        return elements

    def _static_or_shape_dim(self, name: str, type_proto: onnx.TypeProto, axis: int) -> str:
        """Dimension ``axis`` of ``name`` as a scalar of its element type."""
        elem_type = type_proto.tensor_type.elem_type
        size = _graph_utils.static_dim(type_proto, axis)
        if size is not None:
            return self._constant(float(size), elem_type)
        shape = self._node("Shape", name)
        dynamic = self._node("Gather", shape, self._constant(axis, onnx.TensorProto.INT64), axis=0)
        return self._node("Cast", dynamic, to=elem_type)


class MSELoss(_Loss):
    """mean((input - target)^2); label input ``target`` of the input's type and shape."""

    kind = "mse"

    def build(self, loss_input_name: str, target_name: str = "target") -> str:
        input_type = self._input_type(loss_input_name)
        target = self._add_label(target_name, input_type)
        difference = self._node("Sub", loss_input_name, target)
        return self._reduce(self._node("Mul", difference, difference))


class L1Loss(_Loss):
    """mean(|input - target|); label input ``target`` of the input's type and shape."""

    kind = "l1"

    def build(self, loss_input_name: str, target_name: str = "target") -> str:
        input_type = self._input_type(loss_input_name)
        target = self._add_label(target_name, input_type)
        return self._reduce(self._node("Abs", self._node("Sub", loss_input_name, target)))


class HuberLoss(_Loss):
    """torch's huber_loss: 0.5 d^2 where |d| < delta, else delta (|d| - 0.5 delta), with
    d = input - target; label input ``target``."""

    def __init__(self, reduction: Reduction = "mean", delta: float = 1.0) -> None:
        super().__init__(reduction)
        if not delta > 0:
            raise ValueError(f"HuberLoss: delta must be positive, got {delta}")
        self.delta: float = float(delta)

    def _elements(self, loss_input_name: str, target_name: str, threshold: float) -> tuple[str, int]:
        input_type = self._input_type(loss_input_name)
        elem_type = input_type.tensor_type.elem_type
        target = self._add_label(target_name, input_type)
        magnitude = self._node("Abs", self._node("Sub", loss_input_name, target))
        # With q = min(|d|, t): 0.5 q^2 + t (|d| - q) is both branches, with their gradients.
        delta = self._constant(threshold, elem_type)
        quadratic = self._node("Min", magnitude, delta)
        square = self._node("Mul", self._constant(0.5, elem_type), self._node("Mul", quadratic, quadratic))
        linear = self._node("Mul", delta, self._node("Sub", magnitude, quadratic))
        return self._node("Add", square, linear), elem_type

    def build(self, loss_input_name: str, target_name: str = "target") -> str:
        return self._reduce(self._elements(loss_input_name, target_name, self.delta)[0])


class SmoothL1Loss(HuberLoss):
    """torch's smooth_l1_loss: 0.5 d^2 / beta where |d| < beta, else |d| - 0.5 beta (beta = 0:
    L1); label input ``target``."""

    def __init__(self, reduction: Reduction = "mean", beta: float = 1.0) -> None:
        _Loss.__init__(self, reduction)
        if not beta >= 0:
            raise ValueError(f"SmoothL1Loss: beta must not be negative, got {beta}")
        self.beta: float = float(beta)

    def build(self, loss_input_name: str, target_name: str = "target") -> str:
        if self.beta == 0:  # torch: plain L1
            input_type = self._input_type(loss_input_name)
            target = self._add_label(target_name, input_type)
            return self._reduce(self._node("Abs", self._node("Sub", loss_input_name, target)))
        elements, elem_type = self._elements(loss_input_name, target_name, self.beta)
        return self._reduce(self._node("Div", elements, self._constant(self.beta, elem_type)))


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
        return {**(super()._options() or {}), "weight": self.weight, "pos_weight": self.pos_weight}

    def build(self, loss_input_name: str, target_name: str = "target") -> str:
        input_type = self._input_type(loss_input_name)
        elem_type = input_type.tensor_type.elem_type
        target = self._add_label(target_name, input_type)
        one = self._constant(1.0, elem_type)
        # (1 - t) x + (1 + (pos_weight - 1) t) softplus(-x); softplus's gradient is exact at 0.
        softplus = self._node("Softplus", self._node("Neg", loss_input_name))
        if self.pos_weight is not None:
            scale = self._node("Mul", target, self._constant(np.asarray(self.pos_weight) - 1.0, elem_type))
            softplus = self._node("Mul", self._node("Add", scale, one), softplus)
        linear = self._node("Mul", self._node("Sub", one, target), loss_input_name)
        elements = self._node("Add", linear, softplus)
        if self.weight is not None:
            elements = self._node("Mul", elements, self._constant(self.weight, elem_type))
        return self._reduce(elements)


class _ClassIndexLoss(_Loss):
    """Losses over class scores [N, C, d...] with int64 class indices [N, d...]."""

    def __init__(self, weight: Optional[Sequence[float]], reduction: Reduction,
                 ignore_index: Optional[int]) -> None:
        super().__init__(reduction)
        self.weight: Optional[list[float]] = _floats("weight", weight)
        self.ignore_index: Optional[int] = _optional_int("ignore_index", ignore_index)

    def _scores_and_labels(self, scores_name: str, labels_name: str) -> tuple[onnx.TypeProto, str]:
        who = type(self).__name__
        if _graph_utils.opset(self.base) < 13:
            raise ValueError(f"{who} needs opset 13 or later in the base model, which imports opset "
                             f"{_graph_utils.opset(self.base)}")
        scores_type = self._input_type(scores_name)
        scores_rank = _graph_utils.rank(scores_type)
        if scores_rank is not None and scores_rank < 2:
            raise ValueError(f"{who}: the scores '{scores_name}' have rank {scores_rank}; expected "
                             "[batch, classes, ...] (rank 2 or more)")
        classes = _graph_utils.static_dim(scores_type, 1)
        if self.weight is not None and classes is not None and classes != len(self.weight):
            raise ValueError(f"{who}: {len(self.weight)} class weights for the {classes} classes of '{scores_name}'")
        labels = self._add_label(labels_name, scores_type, onnx.TensorProto.INT64, drop_axis=1)
        return scores_type, labels

    def _attributes(self) -> dict:
        attributes: dict[str, Any] = {"reduction": self.reduction}
        if self.ignore_index is not None:
            attributes["ignore_index"] = self.ignore_index
        return attributes

    def _weight_input(self, elem_type: int) -> list[str]:
        return [] if self.weight is None else [self._constant(self.weight, elem_type)]


class NLLLoss(_ClassIndexLoss):
    """torch's nll_loss of log-probabilities [N, C, d...]; label input ``labels`` (int64 class
    indices [N, d...]). ``weight``: one per class; ``ignore_index``: a label that contributes
    nothing (not even to the mean's denominator)."""

    def __init__(self, weight: Optional[Sequence[float]] = None, reduction: Reduction = "mean",
                 ignore_index: Optional[int] = None) -> None:
        super().__init__(weight, reduction, ignore_index)

    def build(self, loss_input_name: str, labels_name: str = "labels") -> str:
        scores_type, labels = self._scores_and_labels(loss_input_name, labels_name)
        weight = self._weight_input(scores_type.tensor_type.elem_type)
        return self._node("NegativeLogLikelihoodLoss", loss_input_name, labels, *weight, **self._attributes())


class CrossEntropyLoss(_ClassIndexLoss):
    """Softmax cross-entropy over axis 1 of scores [N, C, ...]; label input ``labels``
    (int64 class indices [N, ...]). ``weight``: one weight per class; ``ignore_index``:
    a label value that contributes nothing (not even to the mean's denominator);
    ``label_smoothing``: torch's, mixing the one-hot target with the uniform distribution."""

    kind = "cross_entropy"

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

    def _options(self) -> Optional[dict]:
        if self.label_smoothing:
            return None  # the C++ builder has no label smoothing: built in Python
        return {**(super()._options() or {}), "weight": self.weight, "ignore_index": self.ignore_index}

    def build(self, scores_input_name: str, labels_name: str = "labels") -> str:
        scores_type, labels = self._scores_and_labels(scores_input_name, labels_name)
        elem_type = scores_type.tensor_type.elem_type
        weight = self._weight_input(elem_type)
        if not self.label_smoothing:
            return self._node("SoftmaxCrossEntropyLoss", scores_input_name, labels, *weight, **self._attributes())
        return self._smoothed(scores_input_name, scores_type, labels, weight)

    def _smoothed(self, scores: str, scores_type: onnx.TypeProto, labels: str, weight: list[str]) -> str:
        """(1 - e) nll + e / C * smooth, smooth = -sum_c w_c log p_c per element, masked and
        reduced with nll's denominator, as torch's cross_entropy does."""
        elem_type = scores_type.tensor_type.elem_type
        log_probabilities = self._node("LogSoftmax", scores, axis=1)
        nll = self._node("NegativeLogLikelihoodLoss", log_probabilities, labels, *weight, **self._attributes())
        weighted = log_probabilities
        if weight:
            scores_rank = _graph_utils.rank(scores_type)
            if scores_rank is None:
                raise ValueError(f"CrossEntropyLoss: the rank of the scores '{scores}' is unknown; label smoothing "
                                 "with class weights needs it")
            assert self.weight is not None  # weight is the class weights' input, which they feed
            shape = [1, len(self.weight)] + [1] * (scores_rank - 2)
            per_class = self._constant(np.asarray(self.weight).reshape(shape), elem_type)
            weighted = self._node("Mul", log_probabilities, per_class)
        axes = self._constant([1], onnx.TensorProto.INT64)
        smooth = self._node("Neg", self._node("ReduceSum", weighted, axes, keepdims=0))  # [N, d...]
        zero = self._constant(0.0, elem_type)
        valid = None
        if self.ignore_index is not None:
            ignored = self._node("Equal", labels, self._constant(self.ignore_index, onnx.TensorProto.INT64))
            valid = self._node("Not", ignored)
            smooth = self._node("Where", valid, smooth, zero)
        if self.reduction == "sum":
            smooth = self._node("ReduceSum", smooth, keepdims=0)
        elif self.reduction == "mean":
            smooth = self._node("Div", self._node("ReduceSum", smooth, keepdims=0), self._denominator(labels, valid,
                                                                                                     elem_type))
        classes = self._static_or_shape_dim(scores, scores_type, 1)
        share = self._node("Div", self._constant(self.label_smoothing, elem_type), classes)
        return self._node("Add", self._node("Mul", self._constant(1.0 - self.label_smoothing, elem_type), nll),
                          self._node("Mul", smooth, share))

    def _denominator(self, labels: str, valid: Optional[str], elem_type: int) -> str:
        """nll's mean denominator: the summed weights of the counted labels (or their count)."""
        if self.weight is not None:
            index = labels if valid is None else self._node("Where", valid, labels,
                                                            self._constant(0, onnx.TensorProto.INT64))
            weights = self._node("Gather", self._constant(self.weight, elem_type), index, axis=0)
            if valid is not None:
                weights = self._node("Where", valid, weights, self._constant(0.0, elem_type))
            return self._node("ReduceSum", weights, keepdims=0)
        counted = self._node("Cast", valid, to=elem_type) if valid is not None else self._node(
            "ConstantOfShape", self._node("Shape", labels),
            value=onnx.helper.make_tensor("one", elem_type, [1], [1]))
        return self._node("ReduceSum", counted, keepdims=0)


class KLDivLoss(_Loss):
    """torch's kl_div of log-probabilities: target (log target - input), or with
    ``log_target`` exp(target) (target - input); label input ``target``. ``reduction``
    "batchmean" divides the sum by the batch size (axis 0), "mean" by the element count."""

    def __init__(self, reduction: Literal["mean", "batchmean", "sum", "none"] = "mean",
                 log_target: bool = False) -> None:
        super().__init__(reduction, ("mean", "batchmean", "sum", "none"))
        self.log_target: bool = bool(log_target)

    def build(self, loss_input_name: str, target_name: str = "target") -> str:
        input_type = self._input_type(loss_input_name)
        elem_type = input_type.tensor_type.elem_type
        target = self._add_label(target_name, input_type)
        if self.log_target:
            elements = self._node("Mul", self._node("Exp", target), self._node("Sub", target, loss_input_name))
        else:
            # xlogy(t, t) - t x, with 0 log 0 = 0: log(1) where t = 0 (t < 0 is no distribution).
            positive = self._node("Greater", target, self._constant(0.0, elem_type))
            safe = self._node("Where", positive, target, self._constant(1.0, elem_type))
            elements = self._node("Mul", target, self._node("Sub", self._node("Log", safe), loss_input_name))
        if self.reduction != "batchmean":
            return self._reduce(elements)
        total = self._node("ReduceSum", elements, keepdims=0)
        return self._node("Div", total, self._static_or_shape_dim(loss_input_name, input_type, 0))


__all__ = [
    "BCEWithLogitsLoss", "CrossEntropyLoss", "HuberLoss", "KLDivLoss", "L1Loss", "MSELoss", "NLLLoss", "SmoothL1Loss",
]
