"""``Block``, the unit onnxblock graphs are built from, and small blocks of one ONNX op each.

A block's ``build`` appends nodes to ``self.base`` (the model of the enclosing
``onnxblock.base()`` context) and returns the name(s) of its output(s); calling a block runs
``build`` and, for the outermost call, checks the model with ``onnx.checker``::

    with onnxblock.base(model):
        loss = blocks.ReduceMean(keepdims=False)(blocks.Abs()("output"))
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from typing import Any, Optional, Union

import numpy as np
import onnx
from onnx import numpy_helper

from onnxtrain.training.onnxblock import _graph_utils
from onnxtrain.training.onnxblock import model_accessor as _accessor


class Block(abc.ABC):
    """Base of every block. Subclasses implement ``build(*args)``; ``self.base`` is the model
    under construction while it runs."""

    def __init__(self, temp_file_name: str = "temp.onnx") -> None:
        # temp_file_name: onnxruntime-training's blocks saved large models there; onnxtrain
        # keeps its temporary files in a private folder, so the name is accepted and unused.
        # The model under construction while the block builds; None before its first call, as
        # in onnxruntime (typed as the model: build() only runs with it set).
        self.base: onnx.ModelProto = None  # type: ignore[assignment]
        self.temp_file_name = temp_file_name

    @abc.abstractmethod
    def build(self, *args: Any, **kwargs: Any) -> Any:
        """Appends this block's nodes to ``self.base``; returns its output name(s)."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        accessor = _accessor.current()
        self.base = accessor.model
        accessor.depth += 1
        try:
            output = self.build(*args, **kwargs)
        finally:
            accessor.depth -= 1
        if accessor.depth == 0:
            accessor.check()
        return output

    def infer_shapes_on_base(self) -> onnx.ModelProto:
        """The base model with the types and shapes ONNX shape inference finds (by path for a
        model whose data stays on disk). The base itself is left as it is."""
        return _accessor.current().infer_shapes()

    # Helpers for subclasses.
    def _inputs(self, names: Sequence[str]) -> None:
        _graph_utils.require_values(self.base, names, type(self).__name__)

    def _elem_type(self, name: str) -> int:
        found = _graph_utils.tensor_type(self.infer_shapes_on_base(), name, type(self).__name__)
        return found.tensor_type.elem_type


class _OpBlock(Block):
    """One node of ``op_type`` on the inputs given to the call."""

    op_type = ""
    arity = 1

    def __init__(self, **attributes: Any) -> None:
        super().__init__()
        self._attributes = attributes

    def build(self, *input_names: str) -> str:
        if len(input_names) != self.arity:
            raise TypeError(f"{type(self).__name__} takes {self.arity} input name(s), got {len(input_names)}")
        self._inputs(input_names)
        return _graph_utils.add_node(self.base, self.op_type, input_names, **self._attributes)


class Add(_OpBlock):
    """input1 + input2 (numpy broadcasting)."""

    op_type, arity = "Add", 2


class Sub(_OpBlock):
    """input1 - input2."""

    op_type, arity = "Sub", 2


class Mul(_OpBlock):
    """input1 * input2."""

    op_type, arity = "Mul", 2


class Div(_OpBlock):
    """input1 / input2."""

    op_type, arity = "Div", 2


class MatMul(_OpBlock):
    """input1 @ input2."""

    op_type, arity = "MatMul", 2


class Neg(_OpBlock):
    """-input."""

    op_type = "Neg"


class Abs(_OpBlock):
    """|input|."""

    op_type = "Abs"


class Sigmoid(_OpBlock):
    """1 / (1 + exp(-input))."""

    op_type = "Sigmoid"


class Log(_OpBlock):
    """The natural logarithm of the input."""

    op_type = "Log"


class Exp(_OpBlock):
    """exp(input)."""

    op_type = "Exp"


class Sqrt(_OpBlock):
    """The square root of the input."""

    op_type = "Sqrt"


class Relu(_OpBlock):
    """max(input, 0)."""

    op_type = "Relu"


class Softplus(_OpBlock):
    """log(1 + exp(input))."""

    op_type = "Softplus"


class Identity(_OpBlock):
    """The input, as a new value (an ONNX Identity node)."""

    op_type = "Identity"


class Softmax(_OpBlock):
    """Softmax over ``axis`` (default: the last)."""

    op_type = "Softmax"

    def __init__(self, axis: int = -1) -> None:
        super().__init__(axis=int(axis))


class LogSoftmax(_OpBlock):
    """log(Softmax) over ``axis`` (default: the last)."""

    op_type = "LogSoftmax"

    def __init__(self, axis: int = -1) -> None:
        super().__init__(axis=int(axis))


class Cast(_OpBlock):
    """The input converted to ``to`` (an ``onnx.TensorProto`` element type)."""

    op_type = "Cast"

    def __init__(self, to: int) -> None:
        super().__init__(to=int(to))


class Pow(Block):
    """``Pow(exponent)(x)``: x ** exponent (a constant of x's type), as onnxruntime's block;
    ``Pow()(x, y)``: x ** y."""

    def __init__(self, exponent: Optional[float] = None) -> None:
        super().__init__()
        self._exponent = exponent

    def build(self, input_name: str, exponent_name: Optional[str] = None) -> str:
        if (self._exponent is None) == (exponent_name is None):
            raise TypeError("Pow: give the exponent either to the constructor (Pow(2.0)(x)) or as the second input "
                            "(Pow()(x, y)), not both or neither")
        self._inputs([input_name] if exponent_name is None else [input_name, exponent_name])
        if exponent_name is None:
            exponent_name = _graph_utils.add_constant(self.base, self._exponent, self._elem_type(input_name))
        return _graph_utils.add_node(self.base, "Pow", [input_name, exponent_name])


class Constant(Block):
    """A constant value (``Constant(0.4)()``): a float is float32, an int int64, an array keeps
    its type unless ``dtype`` (an ``onnx.TensorProto`` element type) says otherwise. The first
    parameter keeps onnxruntime-training's name, ``value_float``, though any value is taken."""

    def __init__(self, value_float: Any, dtype: Optional[int] = None) -> None:
        super().__init__()
        self._value = value_float
        self._dtype = dtype

    def build(self) -> str:
        return _graph_utils.add_constant(self.base, self._value, self._dtype)


class _Reduce(Block):
    op_type = ""
    axes_input_since = 18  # the opset from which the axes are an input, not an attribute

    def __init__(self, keepdims: bool = True, axes: Optional[Sequence[int]] = None) -> None:
        super().__init__()
        self._keepdims = int(bool(keepdims))
        self._axes = None if axes is None else [int(a) for a in axes]

    def build(self, input_name: str) -> str:
        self._inputs([input_name])
        if self._axes is None:
            return _graph_utils.add_node(self.base, self.op_type, [input_name], keepdims=self._keepdims)
        if _graph_utils.opset(self.base) >= self.axes_input_since:
            axes = _graph_utils.add_constant(self.base, self._axes, onnx.TensorProto.INT64)
            return _graph_utils.add_node(self.base, self.op_type, [input_name, axes], keepdims=self._keepdims)
        return _graph_utils.add_node(self.base, self.op_type, [input_name], keepdims=self._keepdims, axes=self._axes)


class ReduceMean(_Reduce):
    """The mean over ``axes`` (default: all); ``keepdims`` keeps them as size 1."""

    op_type = "ReduceMean"


class ReduceSum(_Reduce):
    """The sum over ``axes`` (default: all); ``keepdims`` keeps them as size 1."""

    op_type = "ReduceSum"
    axes_input_since = 13


class Clip(Block):
    """The input clipped to [clip_min, clip_max] (None: unbounded on that side)."""

    def __init__(self, clip_min: Optional[float] = None, clip_max: Optional[float] = None) -> None:
        super().__init__()
        self._min = clip_min
        self._max = clip_max

    def build(self, input_name: str) -> str:
        self._inputs([input_name])
        if self._min is None and self._max is None:
            return _graph_utils.add_node(self.base, "Clip", [input_name])
        elem_type = self._elem_type(input_name)
        bounds = ["" if bound is None else _graph_utils.add_constant(self.base, bound, elem_type)
                  for bound in (self._min, self._max)]
        while bounds[-1] == "":
            bounds.pop()
        return _graph_utils.add_node(self.base, "Clip", [input_name, *bounds])


class PassThrough(Block):
    """Its inputs, unchanged (no node): for a model whose output already is the loss. One
    name gives one name back, several a tuple."""

    def build(self, *input_names: str) -> Union[str, tuple[str, ...]]:
        if not input_names:
            raise TypeError("PassThrough takes at least one input name")
        self._inputs(input_names)
        return input_names[0] if len(input_names) == 1 else tuple(input_names)


class SequenceConstruct(Block):
    """A tensor sequence of its inputs (ONNX SequenceConstruct)."""

    def build(self, *input_names: str) -> str:
        if not input_names:
            raise TypeError("SequenceConstruct takes at least one input name")
        self._inputs(input_names)
        return _graph_utils.add_node(self.base, "SequenceConstruct", input_names)


class ReduceAllL2(Block):
    """The L2 norm of all its inputs together, ``sqrt(sum of every element squared)``, a scalar.

    onnxruntime-training's block emits the Microsoft op ``com.microsoft::ReduceAllL2``; this
    one is built from standard ONNX ops (ReduceSumSquare, Sum, Sqrt), so any runtime runs it.
    The sum runs in float32, or in float64 when every input is float64.
    """

    def build(self, *input_names: str) -> str:
        if not input_names:
            raise TypeError("ReduceAllL2 takes at least one input name")
        self._inputs(input_names)
        inferred = self.infer_shapes_on_base()
        types = [_graph_utils.tensor_type(inferred, n, "ReduceAllL2").tensor_type.elem_type for n in input_names]
        double = onnx.TensorProto.DOUBLE
        dtype = double if all(t == double for t in types) else onnx.TensorProto.FLOAT
        square_sums = []
        for name, elem_type in zip(input_names, types):
            if elem_type != dtype:
                name = _graph_utils.add_node(self.base, "Cast", [name], to=dtype)
            square_sums.append(_graph_utils.add_node(self.base, "ReduceSumSquare", [name], keepdims=0))
        total = square_sums[0] if len(square_sums) == 1 else _graph_utils.add_node(self.base, "Sum", square_sums)
        return _graph_utils.add_node(self.base, "Sqrt", [total])


class Linear(Block):
    """A fully connected layer, ``alpha * x @ weight + beta * bias`` (one ONNX Gemm), that adds
    its parameters to the base as initializers: ``weight`` [in_features, out_features] and,
    with ``bias``, ``bias`` [out_features] (named ``linear.weight::N``, ``linear.bias::N``).

    The input is 2-D [batch, in_features]. The parameters start as torch.nn.Linear's, uniform
    in ±1/sqrt(in_features) (onnxruntime-training draws them from a standard normal, which
    makes wide layers start with large outputs). ``rng`` (keyword only): a
    ``numpy.random.Generator`` for reproducible values.
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True, alpha: float = 1.0,
                 beta: float = 1.0, *, rng: Optional[np.random.Generator] = None) -> None:
        super().__init__()
        if int(in_features) <= 0 or int(out_features) <= 0:
            raise ValueError(f"Linear: in_features and out_features must be > 0, got {in_features}, {out_features}")
        self._in_features = int(in_features)
        self._out_features = int(out_features)
        self._bias = bool(bias)
        self._alpha = float(alpha)
        self._beta = float(beta)
        self._rng = rng if rng is not None else np.random.default_rng()

    def build(self, linear_input_name: str) -> str:
        self._inputs([linear_input_name])
        bound = 1.0 / np.sqrt(self._in_features)
        shapes: dict[str, tuple[int, ...]] = {"weight": (self._in_features, self._out_features)}
        if self._bias:
            shapes["bias"] = (self._out_features,)
        inputs = [linear_input_name]
        for role, shape in shapes.items():
            name = _graph_utils.unique_name(self.base, f"linear.{role}")
            values = self._rng.uniform(-bound, bound, shape).astype(np.float32)
            self.base.graph.initializer.append(numpy_helper.from_array(values, name))
            inputs.append(name)
        return _graph_utils.add_node(self.base, "Gemm", inputs, alpha=self._alpha, beta=self._beta)


__all__ = [
    "Abs", "Add", "Block", "Cast", "Clip", "Constant", "Div", "Exp", "Identity", "Linear", "Log", "LogSoftmax",
    "MatMul", "Mul", "Neg", "PassThrough", "Pow", "ReduceAllL2", "ReduceMean", "ReduceSum", "Relu",
    "SequenceConstruct", "Sigmoid", "Softmax", "Softplus", "Sqrt", "Sub",
]
