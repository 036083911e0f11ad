"""Differential fuzzer at the Python boundary: random valid ONNX graphs, onnxtrain vs onnxruntime.

Each case is a graph of a few to a few dozen nodes drawn from ops onnxtrain has kernels for, with
random shapes (size-0 and size-1 dimensions, broadcasting), attributes within the spec and
float32/float64/int64/bool values where the op allows them. Every graph passes
`onnx.checker.check_model(full_check=True)` and strict shape inference before it is run.

The cases run in a worker process (restarted after a crash), so a segfault or an abort is
caught and the case saved. Reported, and saved as `model.onnx` + `inputs.npz` (+ `report.json`)
under `--out`:
  crash      the worker died (signal or exit) or hung while onnxtrain ran the case;
  error      onnxtrain raised where onnxruntime ran the case;
  mismatch   output dtype, shape or values differ beyond the tolerance, and onnx.reference
             sides with onnxruntime (or cannot run the case).
Mismatches where onnx.reference sides with onnxtrain are onnxruntime's deviations from the spec;
the known ones (KNOWN_ORT_DEVIATIONS) are filtered, others are listed as `ort_deviation`.

    python tools/graph_fuzz.py --seed 0 --cases 200 --out build/graph_fuzz
    python tools/graph_fuzz.py --seed 7 --seconds 300

Deterministic by --seed: case i of seed s is always the same graph and inputs.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 18

# Tolerances per output dtype: (rtol, atol). Integers and booleans must match exactly.
TOLERANCE = {np.float32: (1e-4, 1e-5), np.float64: (1e-9, 1e-12), np.float16: (5e-3, 5e-3)}

# Where onnxruntime 1.23 deviates from the ONNX spec and onnxtrain follows it. The generator
# marks a graph that runs into one (in its metadata); a mismatch in such a graph is filtered
# as `known_ort_deviation` unless onnx.reference sides with onnxruntime. Each was checked on
# the node alone against onnx.reference (tools/graph_fuzz.py --locate prints all three).
KNOWN_ORT_DEVIATIONS = {
    # ORT's ReduceMax/ReduceMin skip NaN; the spec, numpy and torch propagate it.
    "reduce_max_nan": "ReduceMax/ReduceMin skip NaN",
    # Gemm with K=0: ORT returns C unscaled by beta; the spec gives alpha*A@B + beta*C = beta*C.
    "gemm_k0": "Gemm with an empty inner dimension returns C without beta",
    # MatMul with K=0: ORT leaves the output uninitialized (values like 3.1e-41); the sum of
    # nothing is 0, as onnx.reference and numpy give.
    "matmul_k0": "MatMul with an empty inner dimension leaves the output uninitialized",
    # A reduction (Reduce*, ArgMax/ArgMin) of a tensor with a size-0 dimension: ORT returns the
    # input's shape unreduced (ReduceMean of [6,0,3,6] over axis -1 gives [6,0,3,6]), or with
    # noop_with_empty_axes=1 and empty axes reduces everything to a scalar.
    "reduce_empty": "reductions of a tensor with a size-0 dimension have the wrong shape",
    # noop_with_empty_axes=1 and no axes: the spec says "no reduction is applied, but other
    # operations will be performed. For example, ReduceSumSquare acts as a vanilla Square";
    # ORT copies the input for every op of rank >= 1 (ReduceL2 gives x, not |x|), and
    # onnx.reference reduces everything when the axes input is empty.
    "reduce_noop": "noop_with_empty_axes with no axes copies the input",
    # Pad (constant) with negative pads: ORT's output holds uninitialized values.
    "pad_negative": "Pad with negative pads gives uninitialized values",
    # MaxPool/GlobalMaxPool over NaN: ORT drops NaN in some windows (float64, dilated, global
    # paths) and onnx.reference after a window's first element; onnxtrain gives NaN, as torch.
    "maxpool_nan": "MaxPool drops NaN in some windows",
    # AveragePool, ceil_mode=1, count_include_pad=1, a last window overhanging the padded input:
    # ORT divides by the whole kernel size; the spec (and onnx.reference) by the part inside
    # the padded input.
    "avgpool_ceil_overhang": "AveragePool ceil_mode overhang divides by the full kernel",
    # ReduceLogSum/ReduceLogSumExp of integers (tests/fuzz/fuzz_graph.py's schema cases): the
    # spec allows int32/int64 and says nothing of rounding. ORT takes exp and log in the integer
    # type and casts log(0) = -inf or NaN to INT_MIN (undefined behaviour in C++); onnxtrain
    # computes in double and truncates, saturating, NaN as 0. onnx.reference returns float64.
    "int_log_reduce": "integer ReduceLogSum/ReduceLogSumExp round differently",
    # An integer output whose real value is NaN or out of the type's range (Pow of a negative
    # int32 base to a fractional float exponent): the conversion is undefined behaviour in C++;
    # onnxruntime (and numpy, so onnx.reference) give x86's "integer indefinite" INT_MIN,
    # onnxtrain saturates (NaN to 0). Recognised by its values: every differing element is the
    # type's minimum in onnxruntime's output.
    "int_from_nan": "integers from NaN or out-of-range real results: INT_MIN in onnxruntime",
    # Cast of a float outside the integer type's range (float16 -2.07 to uint8): undefined in C++
    # and in the spec; onnxruntime and numpy wrap (254), onnxtrain saturates (0).
    "cast_out_of_range": "Cast of floats outside the integer type's range wraps in onnxruntime",
    # Softplus of a large x (float64 above ~709): onnxruntime and onnx.reference compute
    # log(exp(x) + 1) and give inf; onnxtrain's stable form gives x + log1p(exp(-x)), the value.
    "softplus_overflow": "Softplus of a large input overflows to inf in onnxruntime",
    # A symmetric (periodic=0) window of size 1: the spec's formula divides 0 by N - 1 = 0, and
    # onnxruntime and onnx.reference give NaN; onnxtrain gives 1, as numpy and scipy do.
    "window_size_1": "a symmetric window of size 1 is NaN in onnxruntime",
    # BatchNormalization of an input with zero channels ([4, 0]): onnxruntime 1.23 aborts the
    # process; onnxtrain returns the empty output. Marked graphs run in onnxtrain alone.
    "batchnorm_no_channels": "BatchNormalization with zero channels aborts onnxruntime",
    # ReduceLogSumExp over values whose maximum is infinite ([-inf], [inf, 1]): onnxruntime and
    # onnx.reference subtract the maximum (inf - inf = NaN) and give NaN; onnxtrain gives
    # -inf or inf, the value, as torch.logsumexp and scipy.special.logsumexp do.
    "logsumexp_infinite_max": "ReduceLogSumExp of values whose maximum is infinite is NaN in onnxruntime",
}
# The ops in which a known deviation shows (those not placed by the generator's own checks).
KNOWN_DEVIATION_OPS = {"int_log_reduce": {"ReduceLogSum", "ReduceLogSumExp"}}

# Ops whose float64 results are compared at float32's tolerance: HardSwish's function body
# passes alpha = 1/6 as a float attribute (a float32); onnxruntime and onnx.reference compute
# float64 with it, onnxtrain with 1/6 exactly (7e-8 apart).
SINGLE_PRECISION_OPS = {"HardSwish"}

ELEM = {np.float32: TensorProto.FLOAT, np.float64: TensorProto.DOUBLE, np.int64: TensorProto.INT64,
        np.bool_: TensorProto.BOOL}
FLOATS = (np.float32, np.float64)


@dataclass
class Value:
    name: str
    dtype: type
    shape: tuple[int, ...]
    exact: bool  # computed without rounding (graph inputs, initializers, integer paths)
    single: bool = False  # float32 somewhere on its way: compared with float32's tolerance


@dataclass
class Graph:
    rng: np.random.Generator
    values: list[Value] = field(default_factory=list)
    nodes: list[onnx.NodeProto] = field(default_factory=list)
    inputs: list[Value] = field(default_factory=list)
    initializers: list[onnx.TensorProto] = field(default_factory=list)
    feeds: dict[str, np.ndarray] = field(default_factory=dict)
    used: set[str] = field(default_factory=set)
    counter: int = 0
    known: set[str] = field(default_factory=set)  # KNOWN_ORT_DEVIATIONS this graph runs into

    def fresh(self, prefix: str) -> str:
        self.counter += 1
        return f"{prefix}{self.counter}"

    def random_array(self, dtype: type, shape: tuple[int, ...]) -> np.ndarray:
        if dtype in FLOATS:
            return self.rng.uniform(-3, 3, size=shape).astype(dtype)
        if dtype is np.bool_:
            return self.rng.random(size=shape) < 0.5
        return self.rng.integers(-5, 6, size=shape).astype(np.int64)

    def new_input(self, dtype: type, shape: tuple[int, ...]) -> Value:
        """A graph input (fed) or, one time in three, an initializer."""
        name = self.fresh("in")
        array = self.random_array(dtype, shape)
        value = Value(name, dtype, tuple(shape), True, dtype is np.float32)
        if self.rng.random() < 0.33:
            self.initializers.append(numpy_helper.from_array(array, name))
        else:
            self.inputs.append(value)
            self.feeds[name] = array
        self.values.append(value)
        return value

    def const(self, array: np.ndarray) -> str:
        """An initializer holding an op's operand (axes, shape, pads...)."""
        name = self.fresh("c")
        self.initializers.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def pick(self, dtypes=None, min_rank=0, max_rank=8, exact=False) -> Value | None:
        choices = [v for v in self.values if (dtypes is None or v.dtype in dtypes) and
                   min_rank <= len(v.shape) <= max_rank and (v.exact or not exact)]
        if not choices:
            return None
        # Prefer recent values, so graphs grow deep rather than wide.
        weights = np.arange(1, len(choices) + 1, dtype=np.float64) ** 2
        return choices[self.rng.choice(len(choices), p=weights / weights.sum())]

    def add(self, op: str, inputs: list[str], dtype: type, shape, exact=False, **attrs) -> Value:
        single = dtype is np.float32 or any(v.single for v in self.values if v.name in inputs)
        out = Value(self.fresh("v"), dtype, tuple(int(d) for d in shape), exact, single)
        self.nodes.append(helper.make_node(op, inputs, [out.name], **attrs))
        self.used.update(inputs)
        self.values.append(out)
        return out

    def random_shape(self, rank: int | None = None) -> tuple[int, ...]:
        rank = int(self.rng.integers(0, 5)) if rank is None else rank
        sizes = [0, 1, 1, 2, 3, 4, 5, 7]
        shape = [int(self.rng.choice(sizes)) for _ in range(rank)]
        if 0 in shape and self.rng.random() < 0.7:  # size 0 now and then, not in every tensor
            shape = [d if d else 2 for d in shape]
        return tuple(shape)


# --- op generators: each adds one node (and the operands it needs) or returns None ---------------

UNARY_FLOAT = ["Relu", "Sigmoid", "Tanh", "Exp", "Log", "Abs", "Neg", "Sqrt", "Floor", "Ceil", "Reciprocal",
               "Erf", "Softplus", "Softsign", "Sin", "Cos", "Identity", "Round", "Sign", "HardSwish"]
UNARY_INT = ["Abs", "Neg", "Identity", "Sign"]


def gen_unary(g: Graph):
    x = g.pick()
    if x is None or x.dtype is np.bool_:
        return None
    ops = UNARY_FLOAT if x.dtype in FLOATS else UNARY_INT
    op = str(g.rng.choice(ops))
    if op in ("Floor", "Ceil", "Round", "Sign") and x.dtype in FLOATS and not x.exact:
        return None  # a jump at a point where the two engines may round differently
    out = g.add(op, [x.name], x.dtype, x.shape, exact=x.exact and op in ("Abs", "Neg", "Identity", "Sign"))
    out.single |= op in SINGLE_PRECISION_OPS
    return out


def gen_unary_attr(g: Graph):
    x = g.pick(FLOATS)
    if x is None:
        return None
    r = g.rng
    op = str(r.choice(["LeakyRelu", "Elu", "Selu", "HardSigmoid", "ThresholdedRelu", "Celu", "Gelu"]))
    attrs = {}
    if op in ("LeakyRelu", "Elu", "ThresholdedRelu", "Celu"):
        attrs["alpha"] = float(np.float32(r.uniform(0.05, 2.0)))
    if op == "HardSigmoid":
        attrs = {"alpha": float(np.float32(r.uniform(0.1, 0.5))), "beta": float(np.float32(r.uniform(0, 1)))}
    if op == "Selu":
        attrs = {"alpha": 1.67326, "gamma": 1.0507}
    if op == "Gelu":
        if OPSET < 20:
            return None
        attrs["approximate"] = str(r.choice(["none", "tanh"]))
    if op == "Celu" and x.dtype is not np.float32:
        return None  # Celu is float32-only in the spec
    return g.add(op, [x.name], x.dtype, x.shape, **attrs)


def broadcast_partner(g: Graph, x: Value, dtype: type) -> Value:
    """An existing value or a new input whose shape broadcasts with x's."""
    r = g.rng
    for v in reversed(g.values):
        if v is not x and v.dtype is dtype and r.random() < 0.3:
            try:
                np.broadcast_shapes(v.shape, x.shape)
                return v
            except ValueError:
                pass
    suffix = x.shape[len(x.shape) - int(r.integers(0, len(x.shape) + 1)):]
    # A 1 in x meets any size; any size of x may meet a 1.
    shape = [int(r.choice([0, 1, 3])) if d == 1 and r.random() < 0.3 else 1 if r.random() < 0.3 else d
             for d in suffix]
    if len(shape) == len(x.shape) and r.random() < 0.15:
        shape = [int(r.choice([1, 2]))] + shape  # the partner has the higher rank
    return g.new_input(dtype, tuple(shape))


def gen_binary(g: Graph):
    x = g.pick([np.float32, np.float64, np.int64])
    if x is None:
        return None
    r = g.rng
    ops = ["Add", "Sub", "Mul", "Max", "Min"] + (["Div", "Pow"] if x.dtype in FLOATS else [])
    op = str(r.choice(ops))
    y = broadcast_partner(g, x, x.dtype)
    a, b = (x, y) if r.random() < 0.5 else (y, x)
    shape = np.broadcast_shapes(a.shape, b.shape)
    exact = a.exact and b.exact and x.dtype is np.int64
    return g.add(op, [a.name, b.name], x.dtype, shape, exact=exact)


def gen_variadic(g: Graph):
    x = g.pick(FLOATS)
    if x is None:
        return None
    op = str(g.rng.choice(["Sum", "Mean", "Max", "Min"]))
    others, shape = [], x.shape
    for _ in range(int(g.rng.integers(0, 3))):
        others.append(broadcast_partner(g, Value("", x.dtype, shape, False), x.dtype))
        shape = np.broadcast_shapes(shape, others[-1].shape)
    return g.add(op, [x.name] + [o.name for o in others], x.dtype, shape)


def gen_compare(g: Graph):
    x = g.pick([np.float32, np.float64, np.int64], exact=True)
    if x is None:
        return None
    op = str(g.rng.choice(["Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual"]))
    y = broadcast_partner(g, x, x.dtype)
    if not y.exact:
        return None
    return g.add(op, [x.name, y.name], np.bool_, np.broadcast_shapes(x.shape, y.shape), exact=True)


def gen_logic(g: Graph):
    x = g.pick([np.bool_])
    if x is None:
        return None
    op = str(g.rng.choice(["Not", "And", "Or", "Xor"]))
    if op == "Not":
        return g.add(op, [x.name], np.bool_, x.shape, exact=True)
    y = broadcast_partner(g, x, np.bool_)
    return g.add(op, [x.name, y.name], np.bool_, np.broadcast_shapes(x.shape, y.shape), exact=True)


def gen_where(g: Graph):
    c = g.pick([np.bool_])
    if c is None:
        return None
    dtype = [np.float32, np.float64, np.int64][int(g.rng.integers(0, 3))]
    x = broadcast_partner(g, c, dtype)
    both = Value("", dtype, np.broadcast_shapes(c.shape, x.shape), False)
    y = broadcast_partner(g, both, dtype)  # broadcasts with c and x together
    shape = np.broadcast_shapes(both.shape, y.shape)
    return g.add("Where", [c.name, x.name, y.name], dtype, shape, exact=x.exact and y.exact)


def random_axes(g: Graph, rank: int, allow_empty=True) -> list[int]:
    count = int(g.rng.integers(0 if allow_empty else 1, rank + 1)) if rank else 0
    axes = sorted(g.rng.choice(rank, size=count, replace=False).tolist()) if count else []
    return [a - rank if g.rng.random() < 0.3 else a for a in axes]  # negative axes now and then


def gen_reduce(g: Graph):
    r = g.rng
    op = str(r.choice(["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1",
                       "ReduceL2", "ReduceLogSumExp", "ReduceSumSquare", "ReduceLogSum"]))
    dtypes = [np.float32, np.float64, np.int64] if op in ("ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd") \
        else list(FLOATS)
    x = g.pick(dtypes)
    if x is None:
        return None
    rank = len(x.shape)
    axes = random_axes(g, rank)
    keepdims = int(r.integers(0, 2))
    noop = int(r.random() < 0.2)
    if any(x.shape[a] == 0 for a in axes) or (not axes and not noop and 0 in x.shape):
        if op in ("ReduceMax", "ReduceMin", "ReduceLogSumExp", "ReduceLogSum"):
            return None  # empty reductions of these: onnxruntime refuses or answers -inf/inf by kernel
    if 0 in x.shape:
        g.known.add("reduce_empty")
    if not axes and noop and op in ("ReduceL1", "ReduceL2", "ReduceSumSquare", "ReduceLogSum"):
        g.known.add("reduce_noop")
    if op in ("ReduceMax", "ReduceMin"):
        g.known.add("reduce_max_nan")
    inputs = [x.name]
    if axes or r.random() < 0.5:
        inputs.append(g.const(np.array(axes, dtype=np.int64)))
    if not axes and noop:
        shape = x.shape
    else:
        reduced = {a % rank for a in axes} if axes else set(range(rank))
        shape = tuple(1 if i in reduced else d for i, d in enumerate(x.shape) if keepdims or i not in reduced)
    return g.add(op, inputs, x.dtype, shape, exact=x.exact and x.dtype is np.int64 and op != "ReduceProd",
                 keepdims=keepdims, noop_with_empty_axes=noop)


def gen_argmax(g: Graph):
    x = g.pick([np.float32, np.float64, np.int64], min_rank=1, exact=True)
    if x is None:
        return None
    r = g.rng
    rank = len(x.shape)
    axis = int(r.integers(-rank, rank))
    if x.shape[axis] == 0:
        return None  # no index to return: the spec leaves it undefined
    if 0 in x.shape:
        g.known.add("reduce_empty")
    keepdims = int(r.integers(0, 2))
    shape = tuple(1 if i == axis % rank else d for i, d in enumerate(x.shape) if keepdims or i != axis % rank)
    op = str(r.choice(["ArgMax", "ArgMin"]))
    return g.add(op, [x.name], np.int64, shape, exact=True, axis=axis, keepdims=keepdims,
                 select_last_index=int(r.integers(0, 2)))


def gen_softmax(g: Graph):
    x = g.pick(FLOATS, min_rank=1)
    if x is None:
        return None
    rank = len(x.shape)
    op = str(g.rng.choice(["Softmax", "LogSoftmax"]))
    return g.add(op, [x.name], x.dtype, x.shape, axis=int(g.rng.integers(-rank, rank)))


def gen_cumsum(g: Graph):
    x = g.pick([np.float32, np.float64, np.int64], min_rank=1)
    if x is None:
        return None
    rank = len(x.shape)
    axis = g.const(np.array(int(g.rng.integers(-rank, rank)), dtype=np.int64))
    return g.add("CumSum", [x.name, axis], x.dtype, x.shape, exact=x.exact and x.dtype is np.int64,
                 exclusive=int(g.rng.integers(0, 2)), reverse=int(g.rng.integers(0, 2)))


def gen_transpose(g: Graph):
    x = g.pick()
    if x is None:
        return None
    perm = g.rng.permutation(len(x.shape)).tolist()
    attrs = {"perm": perm} if perm and g.rng.random() < 0.8 else {}
    if not attrs:
        perm = list(range(len(x.shape)))[::-1]
    return g.add("Transpose", [x.name], x.dtype, [x.shape[p] for p in perm], exact=x.exact, **attrs)


def gen_reshape(g: Graph):
    x = g.pick()
    if x is None:
        return None
    r = g.rng
    size = int(np.prod(x.shape))
    # Split the element count into a random factorization, then hide one dimension as -1 or 0.
    target: list[int] = []
    rest = size
    for _ in range(int(r.integers(0, 4))):
        divisors = [d for d in range(1, 8) if rest % d == 0] if rest else [0, 1, 2]
        d = int(r.choice(divisors))
        target.append(d)
        rest = rest // d if d else rest
    if size == 0 and 0 not in target:
        target.append(0)
    elif size:
        target.append(rest)
    spec = list(target)
    attrs = {}
    if 0 in target:
        attrs["allowzero"] = 1  # a 0 in the shape means size 0, not "copy the input's dimension"
    elif spec and r.random() < 0.4:
        spec[int(r.integers(0, len(spec)))] = -1
    elif spec and r.random() < 0.3:
        i = int(r.integers(0, len(spec)))
        if i < len(x.shape) and x.shape[i] == spec[i]:
            spec[i] = 0  # "copy this dimension from the input"
    return g.add("Reshape", [x.name, g.const(np.array(spec, dtype=np.int64))], x.dtype, target, exact=x.exact,
                 **attrs)


def gen_flatten(g: Graph):
    x = g.pick()
    if x is None:
        return None
    rank = len(x.shape)
    axis = int(g.rng.integers(-rank, rank + 1)) if rank else 0
    a = axis + rank if axis < 0 else axis
    shape = (int(np.prod(x.shape[:a])), int(np.prod(x.shape[a:])))
    return g.add("Flatten", [x.name], x.dtype, shape, exact=x.exact, axis=axis)


def gen_squeeze(g: Graph):
    x = g.pick()
    if x is None:
        return None
    r = g.rng
    if r.random() < 0.5:
        ones = [i for i, d in enumerate(x.shape) if d == 1]
        if not ones:
            return None
        axes = sorted(r.choice(ones, size=int(r.integers(1, len(ones) + 1)), replace=False).tolist())
        shape = [d for i, d in enumerate(x.shape) if i not in axes]
        return g.add("Squeeze", [x.name, g.const(np.array(axes, dtype=np.int64))], x.dtype, shape, exact=x.exact)
    rank = len(x.shape) + int(r.integers(1, 3))
    axes = sorted(r.choice(rank, size=rank - len(x.shape), replace=False).tolist())
    shape, it = [], iter(x.shape)
    for i in range(rank):
        shape.append(1 if i in axes else next(it))
    axes = [a - rank if r.random() < 0.3 else a for a in axes]
    return g.add("Unsqueeze", [x.name, g.const(np.array(axes, dtype=np.int64))], x.dtype, shape, exact=x.exact)


def gen_concat(g: Graph):
    x = g.pick(min_rank=1)
    if x is None:
        return None
    r = g.rng
    rank = len(x.shape)
    axis = int(r.integers(-rank, rank))
    parts = [x]
    for _ in range(int(r.integers(1, 3))):
        shape = list(x.shape)
        shape[axis] = int(r.choice([0, 1, 2, 3]))
        parts.append(g.new_input(x.dtype, tuple(shape)))
    shape = list(x.shape)
    shape[axis] = sum(p.shape[axis] for p in parts)
    order = r.permutation(len(parts))
    return g.add("Concat", [parts[i].name for i in order], x.dtype, shape,
                 exact=all(p.exact for p in parts), axis=axis)


def slice_length(n: int, start: int, end: int, step: int) -> int:
    """Elements a Slice keeps on an axis of size n, clamping as the ONNX spec says (not as Python)."""
    start, end = start + n if start < 0 else start, end + n if end < 0 else end
    if step > 0:
        start, end = min(max(start, 0), n), min(max(end, 0), n)
        return max(0, (end - start + step - 1) // step)
    start, end = min(max(start, 0), n - 1), min(max(end, -1), n - 1)
    return max(0, (start - end - step - 1) // -step)


def gen_slice(g: Graph):
    x = g.pick(min_rank=1)
    if x is None:
        return None
    r = g.rng
    rank = len(x.shape)
    axes = random_axes(g, rank, allow_empty=False)
    starts, ends, steps, shape = [], [], [], list(x.shape)
    for a in axes:
        n = x.shape[a]
        step = int(r.choice([1, 1, 2, 3, -1, -2]))
        start = int(r.integers(-n - 2, n + 3))
        end = int(r.choice([int(r.integers(-n - 2, n + 3)), 2**62, -2**62]))
        if n == 0 and step < 0:
            step = 1  # onnx's shape inference answers 1 for a reversed slice of an empty axis
        starts.append(start)
        ends.append(end)
        steps.append(step)
        shape[a] = slice_length(n, start, end, step)
    inputs = [x.name, g.const(np.array(starts, np.int64)), g.const(np.array(ends, np.int64)),
              g.const(np.array(axes, np.int64))]
    if any(s != 1 for s in steps) or r.random() < 0.5:
        inputs.append(g.const(np.array(steps, np.int64)))
    return g.add("Slice", inputs, x.dtype, shape, exact=x.exact)


def gen_gather(g: Graph):
    x = g.pick(min_rank=1)
    if x is None:
        return None
    r = g.rng
    rank = len(x.shape)
    axis = int(r.integers(-rank, rank))
    n = x.shape[axis]
    ishape = g.random_shape(int(r.integers(0, 3)))
    indices = r.integers(-n, n, size=ishape) if n else np.zeros([0] * max(1, len(ishape)), np.int64)
    indices = np.asarray(indices, dtype=np.int64)
    shape = list(x.shape[:axis % rank]) + list(indices.shape) + list(x.shape[axis % rank + 1:])
    return g.add("Gather", [x.name, g.const(indices)], x.dtype, shape, exact=x.exact, axis=axis)


def gen_matmul(g: Graph):
    x = g.pick([np.float32, np.float64, np.int64] if OPSET >= 13 else FLOATS, min_rank=1)
    if x is None or x.dtype is np.int64:
        return None
    r = g.rng
    k = x.shape[-1]
    n = int(r.choice([0, 1, 2, 3, 5]))
    if len(x.shape) == 1:
        wshape = (k,) if r.random() < 0.3 else (k, n)
    else:
        batch = list(x.shape[:-2])
        batch = batch[len(batch) - int(r.integers(0, len(batch) + 1)):]
        batch = [1 if r.random() < 0.2 else d for d in batch]
        wshape = (k,) if r.random() < 0.15 else tuple(batch) + (k, n)
    w = g.new_input(x.dtype, wshape)
    if k == 0:
        g.known.add("matmul_k0")
    a, b = x.shape, w.shape
    # numpy's matmul rules decide the output shape.
    shape = np.matmul(np.zeros(a, np.float32), np.zeros(b, np.float32)).shape
    return g.add("MatMul", [x.name, w.name], x.dtype, shape)


def gen_gemm(g: Graph):
    x = g.pick(FLOATS, min_rank=2, max_rank=2)
    if x is None:
        return None
    r = g.rng
    trans_a, trans_b = int(r.integers(0, 2)), int(r.integers(0, 2))
    m, k = (x.shape[1], x.shape[0]) if trans_a else x.shape
    n = int(r.choice([0, 1, 2, 4]))
    w = g.new_input(x.dtype, (n, k) if trans_b else (k, n))
    if k == 0:
        g.known.add("gemm_k0")
    inputs = [x.name, w.name]
    if r.random() < 0.6:
        cshape = [(m, n), (n,), (1, n), (m, 1), (1,), ()][int(r.integers(0, 6))]
        inputs.append(g.new_input(x.dtype, cshape).name)
    attrs = {"transA": trans_a, "transB": trans_b}
    if r.random() < 0.5:
        attrs["alpha"] = float(np.float32(r.uniform(-2, 2)))
    if r.random() < 0.5:
        attrs["beta"] = float(np.float32(r.uniform(-2, 2)))
    return g.add("Gemm", inputs, x.dtype, (m, n), **attrs)


def gen_cast(g: Graph):
    x = g.pick()
    if x is None:
        return None
    targets = [np.float32, np.float64, np.bool_] + ([np.int64] if x.dtype in (np.int64, np.bool_) else [])
    to = targets[int(g.rng.integers(0, len(targets)))]
    exact = x.exact and (to is not np.float32 or x.dtype is not np.float64)
    return g.add("Cast", [x.name], to, x.shape, exact=exact, to=ELEM[to])


def gen_expand(g: Graph):
    x = g.pick()
    if x is None:
        return None
    r = g.rng
    target = [d if d != 1 else int(r.choice([0, 1, 1, 3])) for d in x.shape]
    target = [1 if d != 0 and r.random() < 0.2 else d for d in target]  # 1 in the target keeps x's size
    target = [int(r.choice([1, 2]))] * int(r.integers(0, 2)) + target
    shape = np.broadcast_shapes(x.shape, tuple(target))
    return g.add("Expand", [x.name, g.const(np.array(target, np.int64))], x.dtype, shape, exact=x.exact)


def gen_tile(g: Graph):
    x = g.pick(min_rank=1)
    if x is None:
        return None
    repeats = [int(g.rng.choice([0, 1, 1, 2, 3])) for _ in x.shape]
    shape = [d * k for d, k in zip(x.shape, repeats)]
    return g.add("Tile", [x.name, g.const(np.array(repeats, np.int64))], x.dtype, shape, exact=x.exact)


def gen_pad(g: Graph):
    x = g.pick([np.float32, np.float64, np.int64], min_rank=1)
    if x is None:
        return None
    r = g.rng
    rank = len(x.shape)
    mode = str(r.choice(["constant", "constant", "reflect", "edge"]))
    if mode == "constant":
        pads = [int(r.integers(-1, 3)) for _ in range(2 * rank)]
        pads = [max(p, -x.shape[i % rank] // 2) for i, p in enumerate(pads)]
    else:
        if 0 in x.shape:
            return None
        limit = [d - 1 if mode == "reflect" else 3 for d in x.shape]
        pads = [int(r.integers(0, limit[i % rank] + 1)) for i in range(2 * rank)]
    shape = [x.shape[i] + pads[i] + pads[i + rank] for i in range(rank)]
    if min(shape) < 0:
        return None
    if min(pads) < 0:
        g.known.add("pad_negative")
    inputs = [x.name, g.const(np.array(pads, np.int64))]
    if mode == "constant" and r.random() < 0.5:
        inputs.append(g.const(np.array(r.uniform(-2, 2), dtype=x.dtype) if x.dtype in FLOATS
                              else np.array(4, dtype=np.int64)))
    return g.add("Pad", inputs, x.dtype, shape, exact=x.exact, mode=mode)


def gen_clip(g: Graph):
    x = g.pick([np.float32, np.float64, np.int64])
    if x is None:
        return None
    r = g.rng
    lo, hi = sorted(r.uniform(-2, 2, size=2))
    cast = (lambda v: np.array(v, x.dtype)) if x.dtype in FLOATS else (lambda v: np.array(round(v), np.int64))
    inputs = [x.name, g.const(cast(lo)) if r.random() < 0.7 else ""]
    if r.random() < 0.7:
        inputs.append(g.const(cast(hi)))
    return g.add("Clip", inputs, x.dtype, x.shape, exact=x.exact)


def gen_shape(g: Graph):
    x = g.pick()
    if x is None:
        return None
    rank = len(x.shape)
    attrs = {}
    start, end = 0, rank
    if g.rng.random() < 0.4:
        start = int(g.rng.integers(-rank - 1, rank + 2))
        end = int(g.rng.integers(-rank - 1, rank + 2))
        attrs = {"start": start, "end": end}
    dims = list(range(rank))[slice(start if start >= -rank else 0, end if end >= -rank else 0)]
    if g.rng.random() < 0.3:
        return g.add("Size", [x.name], np.int64, (), exact=True)
    return g.add("Shape", [x.name], np.int64, (len(dims),), exact=True, **attrs)


def conv_out(n: int, k: int, stride: int, dilation: int, pad: int, ceil: bool = False) -> int:
    span = (k - 1) * dilation + 1
    num = n + pad - span
    if num < 0:
        return -1
    return (num + (stride - 1 if ceil else 0)) // stride + 1


def image(g: Graph) -> Value | None:
    x = g.pick(FLOATS, min_rank=4, max_rank=4)
    if x is None or 0 in x.shape[1:] or g.rng.random() < 0.5:
        shape = (int(g.rng.choice([1, 2])), int(g.rng.choice([1, 2, 3, 4])), int(g.rng.integers(1, 9)),
                 int(g.rng.integers(1, 9)))
        x = g.new_input(np.float32 if g.rng.random() < 0.8 else np.float64, shape)
    return x


def window(g: Graph, h: int, w: int, dilations=True):
    """Kernel, strides, dilations and pads for a 2-D window over an h x w image, or None."""
    r = g.rng
    kernel = [int(r.integers(1, 4)), int(r.integers(1, 4))]
    strides = [int(r.integers(1, 3)), int(r.integers(1, 3))]
    dil = [int(r.integers(1, 3)), int(r.integers(1, 3))] if dilations and r.random() < 0.3 else [1, 1]
    pads = [int(r.integers(0, k)) for k in kernel + kernel] if r.random() < 0.6 else [0, 0, 0, 0]
    return kernel, strides, dil, pads


def gen_conv(g: Graph):
    x = image(g)
    n, c, h, w = x.shape
    r = g.rng
    group = int(r.choice([d for d in (1, 2, c) if c % d == 0]))
    m = group * int(r.integers(1, 3))
    kernel, strides, dil, pads = window(g, h, w)
    oh = conv_out(h, kernel[0], strides[0], dil[0], pads[0] + pads[2])
    ow = conv_out(w, kernel[1], strides[1], dil[1], pads[1] + pads[3])
    if oh < 1 or ow < 1:
        return None
    weight = g.new_input(x.dtype, (m, c // group) + tuple(kernel))
    inputs = [x.name, weight.name]
    if r.random() < 0.5:
        inputs.append(g.new_input(x.dtype, (m,)).name)
    return g.add("Conv", inputs, x.dtype, (n, m, oh, ow), kernel_shape=kernel, strides=strides,
                 dilations=dil, pads=pads, group=group)


def gen_pool(g: Graph):
    x = image(g)
    n, c, h, w = x.shape
    r = g.rng
    op = str(r.choice(["MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool"]))
    if op.startswith("Global"):
        return g.add(op, [x.name], x.dtype, (n, c, 1, 1))
    kernel, strides, dil, pads = window(g, h, w, dilations=op == "MaxPool")
    if r.random() < 0.3:
        kernel, strides = [2, 2], [2, 2]  # the 2x2 fast path
    attrs = {"kernel_shape": kernel, "strides": strides, "pads": pads}
    if op == "MaxPool" and dil != [1, 1]:
        attrs["dilations"] = dil
    if op == "AveragePool" and r.random() < 0.5:
        attrs["count_include_pad"] = 1
    ceil = r.random() < 0.3
    if ceil:
        attrs["ceil_mode"] = 1
    dims = []
    for i, size in enumerate((h, w)):
        total = pads[i] + pads[i + 2]
        out = conv_out(size, kernel[i], strides[i], dil[i], total, ceil)
        # With ceil_mode, a last window that would start inside the end padding is dropped.
        if ceil and out > 1 and (out - 1) * strides[i] >= size + pads[i]:
            # onnxruntime (and torch) drop a last window that would start in the end padding;
            # onnx's shape inference keeps it: not a case either can be checked on.
            return None
        dims.append(out)
    if min(dims) < 1:
        return None
    if op == "AveragePool" and ceil and attrs.get("count_include_pad") and any(
            (dims[i] - 1) * strides[i] + kernel[i] > size + pads[i] + pads[i + 2] for i, size in enumerate((h, w))):
        g.known.add("avgpool_ceil_overhang")
    return g.add(op, [x.name], x.dtype, (n, c, dims[0], dims[1]), **attrs)


def gen_norm(g: Graph):
    r = g.rng
    if r.random() < 0.5:
        x = g.pick(FLOATS, min_rank=1)
        if x is None:
            return None
        rank = len(x.shape)
        axis = int(r.integers(-rank, rank))
        a = axis % rank
        scale = g.new_input(x.dtype, x.shape[a:])
        inputs = [x.name, scale.name]
        if r.random() < 0.5:
            inputs.append(g.new_input(x.dtype, x.shape[a:]).name)
        return g.add("LayerNormalization", inputs, x.dtype, x.shape, axis=axis,
                     epsilon=float(np.float32(r.choice([1e-5, 1e-3]))))
    x = g.pick(FLOATS, min_rank=2, max_rank=4)
    if x is None:
        return None
    c = x.shape[1]
    if c == 0:
        g.known.add("batchnorm_no_channels")
    inputs = [x.name] + [g.new_input(x.dtype, (c,)).name for _ in range(4)]
    var = g.initializers[-1] if g.initializers and g.initializers[-1].name == inputs[-1] else None
    # The variance must be >= 0: replace the last operand with a positive one.
    g.values.pop()
    if var is not None:
        g.initializers.pop()
    else:
        g.inputs.pop()
        g.feeds.pop(inputs[-1])
    inputs[-1] = g.const(r.uniform(0.1, 2.0, size=(c,)).astype(x.dtype))
    return g.add("BatchNormalization", inputs, x.dtype, x.shape, epsilon=float(np.float32(1e-5)))


GENERATORS = [gen_unary, gen_unary, gen_unary_attr, gen_binary, gen_binary, gen_variadic, gen_compare, gen_logic,
              gen_where, gen_reduce, gen_reduce, gen_argmax, gen_softmax, gen_cumsum, gen_transpose, gen_reshape,
              gen_flatten, gen_squeeze, gen_concat, gen_slice, gen_gather, gen_matmul, gen_gemm, gen_cast,
              gen_expand, gen_tile, gen_pad, gen_clip, gen_shape, gen_conv, gen_pool, gen_norm]


def undo(g: Graph, mark: tuple[int, int, int, int]) -> None:
    """Drops what a generator added after `mark` (it refused, or the op has no kernel)."""
    del g.nodes[mark[0]:]
    del g.values[mark[1]:]
    for v in g.inputs[mark[2]:]:
        g.feeds.pop(v.name, None)
    del g.inputs[mark[2]:]
    del g.initializers[mark[3]:]


def generate(seed: int, index: int, supported: set[str]) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """Case `index` of `seed`: a valid model and its feeds."""
    return build(np.random.default_rng([seed, index]), supported, f"fuzz_{seed}_{index}")


def build(rng, supported: set[str], name: str, max_nodes: int = 29,
          validate: bool = True) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """A model of 1 to `max_nodes` nodes and its feeds, every choice drawn from `rng` (numpy's
    Generator, or tests/fuzz/fuzz_graph.py's reader of a fuzzer's bytes). `validate` runs onnx's
    checker and strict shape inference on it (ValidationError/InferenceError when the generator
    got a rule wrong)."""
    g = Graph(rng)
    for _ in range(int(rng.integers(1, 3))):
        dtype = [np.float32, np.float32, np.float64, np.int64][int(rng.integers(0, 4))]
        g.new_input(dtype, g.random_shape())
    target = int(rng.integers(1, max_nodes + 1))
    attempts = 0
    while len(g.nodes) < target and attempts < 20 * target:
        attempts += 1
        mark = (len(g.nodes), len(g.values), len(g.inputs), len(g.initializers))
        out = GENERATORS[int(rng.integers(0, len(GENERATORS)))](g)
        refused = out is None or g.nodes[-1].op_type not in supported
        if refused or int(np.prod(out.shape)) > 1 << 16:  # keep every case fast
            undo(g, mark)
    produced = [v for v in g.values if v.name in {o for n in g.nodes for o in n.output}]
    outputs = [v for v in produced if v.name not in g.used or rng.random() < 0.15]
    if not outputs:  # no node: the graph passes an input through
        x = g.values[0]
        outputs = [g.add("Identity", [x.name], x.dtype, x.shape, exact=x.exact)]
    graph = helper.make_graph(
        g.nodes, name,
        [helper.make_tensor_value_info(v.name, ELEM[v.dtype], v.shape) for v in g.inputs],
        [helper.make_tensor_value_info(v.name, ELEM[v.dtype], v.shape) for v in outputs],
        initializer=g.initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=9)
    helper.set_model_props(model, {"graph_fuzz.single": ",".join(v.name for v in outputs if v.single),
                                   "graph_fuzz.known": ",".join(sorted(g.known))})
    if validate:
        check_valid(model)
    return model, g.feeds


def check_valid(model: onnx.ModelProto) -> None:
    """onnx's checker and strict shape inference (ValidationError/InferenceError)."""
    onnx.checker.check_model(model, full_check=True)
    onnx.shape_inference.infer_shapes(model, check_type=True, strict_mode=True, data_prop=True)


# --- running a case (in the worker) ---------------------------------------------------------------


def compare(expected: list, actual: list, single: list[bool] | None = None) -> str | None:
    """None when the outputs agree; else what differs. single[i]: output i passed through float32.
    An output is a tensor, a sequence of tensors (a list) or an optional without a value (None)."""
    for i, (e, a) in enumerate(zip(expected, actual)):
        difference = compare_value(f"output {i}", e, a, bool(single and single[i]))
        if difference is not None:
            return difference
    if len(expected) != len(actual):
        return f"expected {len(expected)} outputs, got {len(actual)}"
    return None


def compare_value(where: str, e, a, single: bool) -> str | None:
    """compare() for one value; sequences element by element."""
    def kind(value) -> str:
        return "None" if value is None else "a sequence" if isinstance(value, list) else "a tensor"

    if kind(e) != kind(a):
        return f"{where}: expected {kind(e)}, got {kind(a)}"
    if e is None:
        return None
    if isinstance(e, list):
        if len(e) != len(a):
            return f"{where}: expected a sequence of {len(e)} tensors, got {len(a)}"
        for j, (e_j, a_j) in enumerate(zip(e, a)):
            difference = compare_value(f"{where}[{j}]", e_j, a_j, single)
            if difference is not None:
                return difference
        return None
    e, a = np.asarray(e), np.asarray(a)
    if e.dtype != a.dtype or e.shape != a.shape:
        return f"{where}: expected {e.dtype}{list(e.shape)}, got {a.dtype}{list(a.shape)}"
    rtol, atol = TOLERANCE.get(e.dtype.type, (0, 0))
    if single and e.dtype == np.float64:
        rtol, atol = TOLERANCE[np.float32]
    if not np.allclose(a, e, rtol=rtol, atol=atol, equal_nan=True):
        bad = ~np.isclose(a, e, rtol=rtol, atol=atol, equal_nan=True)
        first = tuple(int(j) for j in np.argwhere(bad)[0])
        return (f"{where}: {int(bad.sum())} of {e.size} elements differ, first at {first}: "
                f"expected {e[first]!r}, got {a[first]!r}")
    return None


def run_case(folder: Path, report) -> dict:
    return check_case((folder / "model.onnx").read_bytes(), dict(np.load(folder / "inputs.npz")), report)


class Engines:
    """The session options of the two runtimes, made once (a fuzzer checks many cases)."""

    def __init__(self) -> None:
        import onnxruntime as ort
        import onnxtrain

        ort.set_default_logger_severity(4)  # refusals are expected; no log line for each
        self.ort_options = ort.SessionOptions()
        self.ort_options.intra_op_num_threads = 1
        self.ort_options.log_severity_level = 4  # no warnings (unused initializers), no errors
        self.ort_options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        self.options = onnxtrain.SessionOptions()
        self.options.intra_op_num_threads = 1


_engines: Engines | None = None


def run_onnxruntime(model_bytes: bytes, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    """onnxruntime in this process (the case's session options)."""
    import onnxruntime as ort

    global _engines
    if _engines is None:
        _engines = Engines()
    return ort.InferenceSession(model_bytes, _engines.ort_options, providers=["CPUExecutionProvider"]).run(None, feeds)


class OnnxruntimeDied(Exception):
    """onnxruntime's process died (a signal, an abort) or hung on a case."""


class IsolatedOnnxruntime:
    """onnxruntime in a child process, for a fuzzer that runs onnxtrain in its own: onnxruntime
    kills its process on some invalid models (SIGFPE in an integer division by zero, aborts in
    kernels fed empty tensors), and that must neither end the fuzzing nor pass for onnxtrain's
    crash. Cases go to the child as pickles over a pipe; a dead child is restarted on the next."""

    def __init__(self, timeout: float = 60.0) -> None:
        self.timeout = timeout
        self.process: subprocess.Popen | None = None

    def __call__(self, model_bytes: bytes, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        import pickle

        if self.process is None or self.process.poll() is not None:
            env = dict(os.environ, OMP_NUM_THREADS="1")
            self.process = subprocess.Popen([sys.executable, __file__, "--onnxruntime-child"], env=env,
                                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        request = pickle.dumps((model_bytes, feeds), protocol=pickle.HIGHEST_PROTOCOL)
        try:
            self.process.stdin.write(len(request).to_bytes(8, "little") + request)
            self.process.stdin.flush()
            reply = self._read(8)
            kind, value = pickle.loads(self._read(int.from_bytes(reply, "little")))
        except (OSError, EOFError, TimeoutError) as e:
            self.stop()
            raise OnnxruntimeDied(f"onnxruntime died on this case ({e})") from None
        if kind == "refused":
            raise RuntimeError(value)
        return value

    def _read(self, size: int) -> bytes:
        fd = self.process.stdout.fileno()
        deadline = time.monotonic() + self.timeout
        data = b""
        while len(data) < size:
            if not select.select([fd], [], [], max(deadline - time.monotonic(), 0))[0]:
                raise TimeoutError(f"no answer in {self.timeout} s")
            chunk = os.read(fd, size - len(data))
            if not chunk:
                raise EOFError(f"exit status {self.process.wait()}")
            data += chunk
        return data

    def stop(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait()
            self.process = None


def onnxruntime_child() -> None:
    """The child of IsolatedOnnxruntime: (model bytes, feeds) in, ("ok", outputs) or
    ("refused", message) out, each an 8-byte length and a pickle."""
    import pickle

    source, sink = sys.stdin.buffer, os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # whatever onnxruntime prints must not enter the replies
    while header := source.read(8):
        model_bytes, feeds = pickle.loads(source.read(int.from_bytes(header, "little")))
        try:
            answer = ("ok", run_onnxruntime(model_bytes, feeds))
        except Exception as e:  # noqa: BLE001 - a refusal goes back as its message
            answer = ("refused", f"{type(e).__name__}: {str(e)[:300]}")
        reply = pickle.dumps(answer, protocol=pickle.HIGHEST_PROTOCOL)
        sink.write(len(reply).to_bytes(8, "little") + reply)
        sink.flush()


# What onnxtrain raises for bad input (its C++ errors arrive as these). Anything else, or a
# message that says an exception other than onnxtrain's escaped the C++ core, is a finding.
CLEAN_ERRORS = (RuntimeError, ValueError, NotImplementedError)
ESCAPED = "internal error"


def check_case(model_bytes: bytes, feeds: dict[str, np.ndarray], report=lambda stage: None,
               ours_first: bool = False, run_ort=lambda: True, onnxruntime=run_onnxruntime) -> dict:
    """Runs one case in onnxruntime and onnxtrain, and compares. {"status": ...}:
      ok            both ran and agree
      ort_refused   onnxruntime refused the case; onnxtrain ran it or raised a clean error
      ort_crash     onnxruntime died on the case (`onnxruntime` an IsolatedOnnxruntime); onnxtrain
                    ran it or raised a clean error
      error         onnxtrain raised a clean error where onnxruntime ran the case
      refused       (ours_first) onnxtrain raised a clean error; onnxruntime was not asked
      unclean_error onnxtrain raised something else (TypeError, an escaped C++ exception...)
      mismatch      the outputs differ; judged by onnx.reference: "status" ort_deviation or
                    known_ort_deviation when it sides with onnxtrain, rounding_amplified when
                    the first differing node agrees with onnxruntime fed the same inputs
    `report(stage)` is told when onnxtrain starts ("onnxtrain") and when the judging starts.
    `ours_first` runs onnxtrain first and onnxruntime only on what onnxtrain accepted, and
    then only if `run_ort()` says so: invalid models crash onnxruntime (and onnx's shape
    inference) in places, and a fuzzer must not take their crash for onnxtrain's.
    `onnxruntime(model_bytes, feeds)` runs onnxruntime: in this process by default."""
    import onnxtrain

    global _engines
    if _engines is None:
        _engines = Engines()

    def ours() -> tuple[list | None, dict | None]:
        report("onnxtrain")  # from here on, a dying worker is onnxtrain's crash
        if os.environ.get("GRAPH_FUZZ_TEST_ABORT"):  # tests/python/test_graph_fuzz.py: a crash on demand
            os.abort()
        try:
            return onnxtrain.InferenceSession(model_bytes, _engines.options).run(None, feeds), None
        except Exception as e:  # noqa: BLE001
            detail = f"{type(e).__name__}: {str(e)[:500]}"
            if not isinstance(e, CLEAN_ERRORS) or str(e).startswith(ESCAPED):
                return None, {"status": "unclean_error", "detail": detail}
            return None, {"status": "refused", "detail": detail}

    if ours_first:
        actual, failed = ours()
        if failed is not None:
            return failed
    died = False
    try:
        if not run_ort():
            raise ValueError("not run: the case would crash onnxruntime")
        expected, refusal = onnxruntime(model_bytes, feeds), None
    except OnnxruntimeDied as e:
        expected, refusal, died = None, str(e), True
    except Exception as e:  # noqa: BLE001 - onnxruntime refusing a graph is not our finding
        expected, refusal = None, f"{type(e).__name__}: {str(e)[:300]}"
    not_run = {"status": "ort_crash" if died else "ort_refused", "detail": refusal}
    if not ours_first:
        actual, failed = ours()
        if failed is not None and failed["status"] == "refused":
            failed = {**not_run, "onnxtrain": failed["detail"]} if refusal \
                else {"status": "error", "detail": failed["detail"]}
        if failed is not None:
            return failed
    if refusal is not None:
        return not_run
    report("compare")
    model = onnx.load_from_string(model_bytes)
    props = {p.key: p.value for p in model.metadata_props}
    single = set(props.get("graph_fuzz.single", "").split(","))
    singles = [o.name in single for o in model.graph.output]
    difference = compare(expected, actual, singles)
    if difference is None:
        return {"status": "ok"}
    verdict = judge_with_reference(model, feeds, expected, actual, singles)
    if verdict.get("status") != "ort_deviation":
        # onnx.reference fails or differs on many whole graphs with empty tensors: ask it about
        # the first node whose output differs, alone.
        verdict.update(judge_first_difference(model, feeds, props))
    return {"status": "mismatch", "detail": difference, **verdict}


def overflowed_where_finite(theirs, ours) -> bool:
    """True when every element where the two differ is +inf in `theirs` and finite in `ours`."""
    if not (isinstance(theirs, np.ndarray) and isinstance(ours, np.ndarray)) or theirs.shape != ours.shape:
        return False
    differ = theirs != ours
    return bool(differ.any() and np.isposinf(theirs[differ]).all() and np.isfinite(ours[differ]).all())


def pads_negative(input_values: list) -> bool:
    """True when a Pad node's pads input (its second) removes elements somewhere."""
    return len(input_values) > 1 and np.size(input_values[1]) > 0 and np.min(input_values[1]) < 0


def casts_out_of_range(model: onnx.ModelProto, feeds: dict) -> bool:
    """True when a Cast or CastLike to an integer type gets (as a feed or an initializer) a float
    outside that type's range: undefined in C++ and in the spec (onnxruntime wraps, onnxtrain
    saturates), and onnxruntime folds an initializer's Cast so the locating run cannot see it."""
    constants = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    for node in model.graph.node:
        if node.op_type not in ("Cast", "CastLike") or not node.input:
            continue
        value = feeds.get(node.input[0], constants.get(node.input[0]))
        if node.op_type == "Cast":
            to = next((a.i for a in node.attribute if a.name == "to"), None)
            target = helper.tensor_dtype_to_np_dtype(to) if to else None
        else:
            like = feeds.get(node.input[1], constants.get(node.input[1])) if len(node.input) > 1 else None
            target = None if like is None else like.dtype
        if value is None or target is None or np.dtype(target).kind not in "iu" or value.dtype.kind != "f":
            continue
        finite = np.asarray(value, np.float64)
        limits = np.iinfo(target)
        if finite.size and (np.nanmin(finite) < limits.min or np.nanmax(finite) > limits.max):
            return True
    return False


def has_negative_pads(model: onnx.ModelProto, feeds: dict) -> bool:
    """True when a Pad node of the graph gets pads (a feed or an initializer) below zero."""
    constants = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    for node in model.graph.node:
        if node.op_type == "Pad" and len(node.input) > 1:
            pads = feeds.get(node.input[1], constants.get(node.input[1]))
            if pads is not None and pads_negative([None, pads]):
                return True
    return False


def judge_first_difference(model: onnx.ModelProto, feeds: dict, props: dict) -> dict:
    known = [k for k in props.get("graph_fuzz.known", "").split(",") if k]
    try:
        node, engines = first_difference(model, feeds)
    except Exception as e:  # noqa: BLE001
        return {"node": f"could not locate: {type(e).__name__}: {str(e)[:200]}"}
    if node is None:
        if has_negative_pads(model, feeds):
            known = known + ["pad_negative"]  # the schema cases' Pad: not marked by the generator
        if casts_out_of_range(model, feeds):
            return {"node": "every value agrees when made an output", "status": "known_ort_deviation",
                    "known": known + ["cast_out_of_range"]}
        if {"pad_negative", "matmul_k0"} & set(known):
            # onnxruntime's uninitialized values show only where its buffers are reused.
            return {"node": "every value agrees when made an output", "status": "known_ort_deviation",
                    "known": known}
        return {"node": "every value agrees when made an output"}
    result = {"node": helper.printable_node(node),
              "engines": {k: str(v)[:300] for k, v in engines.items() if k != "input_values"}}
    ort_out, ours, ref = (engines.get(k) for k in ("onnxruntime", "onnxtrain", "onnx.reference"))
    wide = engines.get("float64")
    if isinstance(ort_out, np.ndarray) and isinstance(ours, np.ndarray) and compare([ort_out], [ours], [True]) is None:
        # Fed the same inputs (onnxruntime's), the node agrees: its inputs' differences, each
        # within tolerance, grew through it (Mean of values that nearly cancel).
        result["status"] = "rounding_amplified"
    elif isinstance(ref, np.ndarray) and isinstance(ours, np.ndarray) and compare([ref], [ours], [True]) is None:
        result["status"] = "known_ort_deviation" if known else "ort_deviation"
    elif isinstance(wide, np.ndarray) and isinstance(ort_out, np.ndarray) and nearer(wide, ours, ort_out):
        # All differ in float32 (LayerNormalization of a constant row: the deviations are
        # rounding error divided by sqrt(epsilon)); onnxtrain is nearer the float64 result.
        result["status"] = "known_ort_deviation" if known else "ort_deviation"
        result["float64"] = "nearer onnxtrain than onnxruntime"
    elif known and not isinstance(ref, np.ndarray):
        result["status"] = "known_ort_deviation"  # onnx.reference cannot run the node itself
    elif node.op_type in ("HannWindow", "HammingWindow", "BlackmanWindow") and \
            [int(np.asarray(v).reshape(-1)[0]) for v in engines.get("input_values", [])[:1]] == [1]:
        result["status"] = "known_ort_deviation"
        known = known + ["window_size_1"]
    elif node.op_type == "Softplus" and overflowed_where_finite(ort_out, ours):
        result["status"] = "known_ort_deviation"
        known = known + ["softplus_overflow"]
    elif node.op_type == "Pad" and pads_negative(engines.get("input_values", [])):
        result["status"] = "known_ort_deviation"  # the schema cases' Pad: not marked by the generator
        known = known + ["pad_negative"]
    elif node.op_type in ("Cast", "CastLike") and isinstance(ours, np.ndarray) and ours.dtype.kind in "iu" and any(
            np.asarray(v).dtype.kind == "f" and np.size(v) and (np.nanmin(v) < np.iinfo(ours.dtype).min or
                                                                 np.nanmax(v) > np.iinfo(ours.dtype).max)
            for v in engines.get("input_values", [])):
        result["status"] = "known_ort_deviation"
        known = known + ["cast_out_of_range"]
    elif node.op_type == "ReduceLogSumExp" and infinite_where_nan(ort_out, ours):
        result["status"] = "known_ort_deviation"
        known = known + ["logsumexp_infinite_max"]
    elif integer_indefinite(ort_out, ours):
        result["status"] = "known_ort_deviation"
        known = known + ["int_from_nan"]
    elif any(node.op_type in KNOWN_DEVIATION_OPS.get(k, ()) for k in known):
        result["status"] = "known_ort_deviation"
    elif node.op_type in ("MaxPool", "GlobalMaxPool") and engines.get("input_nan"):
        result["status"] = "known_ort_deviation"
        known = known + ["maxpool_nan"]
    elif node.op_type.startswith("Reduce") and \
            any(a.name == "noop_with_empty_axes" and a.i for a in node.attribute) and \
            (len(node.input) < 2 or engines["inputs"][-1][2] == [0]) and \
            isinstance(ours, np.ndarray) and not_reduced(node.op_type, engines["input_values"][0], ours):
        # noop_with_empty_axes with no axes: onnxtrain applies the op's elementwise part
        # without reducing, as the spec says; onnxruntime copies the input and onnx.reference
        # reduces everything when the axes input is empty (KNOWN_ORT_DEVIATIONS["reduce_noop"]).
        # Recognised from the node: schema cases are not marked by the generator.
        result["status"] = "known_ort_deviation"
        known = sorted(set(known) | {"reduce_noop"})
    if "status" in result:
        result["known"] = known
    return result


# What each reduction does to one element: its result when noop_with_empty_axes leaves the
# axes unreduced ("ReduceSumSquare acts as a vanilla Square").
UNREDUCED = {"ReduceL1": np.abs, "ReduceL2": np.abs, "ReduceSumSquare": np.square, "ReduceLogSum": np.log,
             "ReduceLogSumExp": lambda x: np.log(np.exp(x))}


def not_reduced(op_type: str, x, ours: np.ndarray) -> bool:
    """Whether `ours` is reduction `op_type` applied to `x` without reducing any axis."""
    x = np.asarray(x)
    with np.errstate(all="ignore"):
        expected = UNREDUCED.get(op_type, lambda v: v)(x).astype(x.dtype)
    return compare([expected], [ours], [True]) is None


def infinite_where_nan(expected, actual) -> bool:
    """Whether onnxruntime's float output differs from ours only where it holds NaN and ours an
    infinity (KNOWN_ORT_DEVIATIONS["logsumexp_infinite_max"])."""
    if not (isinstance(expected, np.ndarray) and isinstance(actual, np.ndarray)) or expected.dtype.kind != "f" \
            or expected.shape != actual.shape:
        return False
    differ = ~((expected == actual) | (np.isnan(expected) & np.isnan(actual)))
    return bool(differ.any()) and bool((np.isnan(expected[differ]) & np.isinf(actual[differ])).all())


def integer_indefinite(expected, actual) -> bool:
    """Whether onnxruntime's integer output differs from ours only where it holds the type's
    minimum (KNOWN_ORT_DEVIATIONS["int_from_nan"])."""
    if not (isinstance(expected, np.ndarray) and isinstance(actual, np.ndarray)) or expected.dtype.kind != "i" \
            or expected.dtype != actual.dtype or expected.shape != actual.shape:
        return False
    differ = expected != actual
    return bool(differ.any()) and bool((expected[differ] == np.iinfo(expected.dtype).min).all())


def judge_with_reference(model: onnx.ModelProto, feeds: dict, expected: list[np.ndarray], actual: list[np.ndarray],
                         single: list[bool]) -> dict:
    """Asks onnx.reference which side follows the spec. Where all three differ (an
    ill-conditioned float computation: LayerNormalization of nearly constant rows, whose
    variance onnxruntime takes as E[x^2] - E[x]^2), onnxtrain is on the spec's side when its
    every output is at least as near onnx.reference's as onnxruntime's is."""
    from onnx.reference import ReferenceEvaluator

    try:
        reference = ReferenceEvaluator(model).run(None, feeds)
    except Exception as e:  # noqa: BLE001
        return {"reference": f"failed: {type(e).__name__}: {str(e)[:200]}"}
    difference = compare(reference, actual, single)
    if difference is None:
        return {"reference": "agrees with onnxtrain", "status": "ort_deviation"}
    if all(nearer(r, a, e) for r, a, e in zip(reference, actual, expected)):
        return {"reference": f"nearer onnxtrain than onnxruntime: {difference}", "status": "ort_deviation"}
    return {"reference": f"disagrees with onnxtrain: {difference}"}


def nearer(reference, ours, theirs) -> bool:
    """Whether `ours` is float, has NaN where `reference` has, and its largest distance from
    `reference` is at most that of `theirs`."""
    reference, ours, theirs = np.asarray(reference), np.asarray(ours), np.asarray(theirs)
    if ours.dtype.kind != "f" or not (reference.shape == ours.shape == theirs.shape) or ours.size == 0:
        return False
    if not np.array_equal(np.isnan(ours), np.isnan(reference)):
        return False
    finite = ~np.isnan(reference)
    with np.errstate(invalid="ignore", over="ignore"):
        ours_off = np.abs(ours[finite].astype(np.float64) - reference[finite])
        theirs_off = np.abs(theirs[finite].astype(np.float64) - reference[finite])
    return bool(np.nan_to_num(ours_off, nan=np.inf).max(initial=0) <= np.nan_to_num(theirs_off, nan=np.inf).max(initial=0))


def locate(folder: Path) -> str:
    """Triage help: the first node whose output differs while its inputs agree, and what each
    engine gives for that node alone."""
    node, engines = first_difference(onnx.load(folder / "model.onnx"), dict(np.load(folder / "inputs.npz")))
    if node is None:
        return "every value agrees when made an output (a fusion, or the graph's outputs only, differ)"
    lines = [helper.printable_node(node)]
    for engine, out in engines.items():
        if engine in ("input_nan", "input_values"):
            continue
        shown = f"{out.dtype}{list(out.shape)} {np.array2string(out.ravel()[:6], precision=6)}" \
            if isinstance(out, np.ndarray) else str(out)
        lines.append(f"  {engine}: {shown}")
    return "\n".join(lines)


def first_difference(model: onnx.ModelProto, feeds: dict):
    """(node, {engine: output or error}) for the first node whose output differs while its inputs
    agree, every value made a graph output (so fusions that keep a value inside do not apply);
    (None, {}) when all agree."""
    import onnxruntime as ort
    import onnxtrain

    model = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    known = {o.name for o in model.graph.output}
    for info in model.graph.value_info:
        if info.name not in known:
            model.graph.output.append(info)
    names = [o.name for o in model.graph.output]
    options = ort.SessionOptions()
    options.log_severity_level = 3
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    data = model.SerializeToString()
    expected = dict(zip(names, ort.InferenceSession(data, options).run(names, feeds)))
    actual = dict(zip(names, onnxtrain.InferenceSession(data).run(names, feeds)))
    constants = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    constants.update(feeds)
    for node in model.graph.node:
        # float32's tolerance throughout: a locator, not the judge (HardSwish's float64 7e-8).
        inputs_agree = all(compare([expected[i]], [actual[i]], [True]) is None for i in node.input if i in expected)
        for out in node.output:
            difference = compare([expected[out]], [actual[out]], [True])
            if difference is not None and inputs_agree:
                return node, judge_node(model, node, {**constants, **expected})
    return None, {}


def judge_node(model: onnx.ModelProto, node: onnx.NodeProto, values: dict[str, np.ndarray]) -> str:
    """The node alone, its inputs fed: onnxruntime, onnxtrain and onnx.reference side by side."""
    import onnxruntime as ort
    import onnxtrain
    from onnx.reference import ReferenceEvaluator

    names = list(dict.fromkeys(i for i in node.input if i))  # a value read twice is one graph input
    feeds = {i: values[i] for i in names}
    infos = [helper.make_tensor_value_info(i, helper.np_dtype_to_tensor_dtype(feeds[i].dtype), feeds[i].shape)
             for i in names]
    output = next(o for o in model.graph.output if o.name == node.output[0])
    single = helper.make_model(helper.make_graph([node], "node", infos, [output]),
                               opset_imports=model.opset_import, ir_version=9)
    shown = [(i, feeds[i].dtype.name, list(feeds[i].shape), feeds[i].tolist() if feeds[i].size <= 8 else "...")
             for i in names]
    results: dict = {"inputs": shown, "input_values": list(feeds.values()),
                     "input_nan": any(v.dtype.kind == "f" and bool(np.isnan(v).any()) for v in feeds.values())}
    options = ort.SessionOptions()
    options.log_severity_level = 3
    for engine, run in (("onnxruntime", lambda m: ort.InferenceSession(m.SerializeToString(), options).run(None, feeds)),
                        ("onnxtrain", lambda m: onnxtrain.InferenceSession(m.SerializeToString()).run(None, feeds)),
                        ("onnx.reference", lambda m: ReferenceEvaluator(m).run(None, feeds))):
        try:
            results[engine] = np.asarray(run(single)[0])
        except Exception as e:  # noqa: BLE001
            results[engine] = f"{type(e).__name__}: {str(e)[:150]}"
    if any(v.dtype == np.float32 for v in feeds.values()) and output.type.tensor_type.elem_type == TensorProto.FLOAT:
        # The same node in float64 (onnx.reference): what an ill-conditioned float32 result
        # should have been, to tell which engine rounds better.
        wide = {i: v.astype(np.float64) if v.dtype == np.float32 else v for i, v in feeds.items()}
        infos = [helper.make_tensor_value_info(i, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
                 for i, v in wide.items()]
        graph = helper.make_graph([node], "node", infos, [helper.make_tensor_value_info(output.name,
                                                                                         TensorProto.DOUBLE, None)])
        try:
            results["float64"] = np.asarray(ReferenceEvaluator(helper.make_model(
                graph, opset_imports=model.opset_import, ir_version=9)).run(None, wide)[0], dtype=np.float64)
        except Exception as e:  # noqa: BLE001
            results["float64"] = f"{type(e).__name__}: {str(e)[:150]}"
    return results


def worker() -> None:
    """Reads case folders from stdin, answers one JSON line each; 'stage' lines say where it is."""
    def report(stage: str) -> None:
        sys.stdout.write(json.dumps({"stage": stage}) + "\n")
        sys.stdout.flush()

    for line in sys.stdin:
        report("ort")
        result = run_case(Path(line.strip()), report)
        sys.stdout.write(json.dumps(result) + "\n")
        sys.stdout.flush()


# --- the driver ----------------------------------------------------------------------------------


class Worker:
    def __init__(self) -> None:
        self.process = None

    def start(self) -> None:
        env = dict(os.environ, OMP_NUM_THREADS="1")
        # stderr goes to a file: a pipe nobody reads fills up and blocks the worker.
        self.stderr = tempfile.TemporaryFile(mode="w+")
        self.process = subprocess.Popen([sys.executable, __file__, "--worker"], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, stderr=self.stderr, text=True, env=env)
        self.pending = b""  # read from the worker's stdout, not yet a whole line

    def readline(self, deadline: float) -> str | None:
        """One line from the worker; '' when it died, None at the deadline. Reads the file
        descriptor itself: a buffered reader would hold lines that select() cannot see."""
        fd = self.process.stdout.fileno()
        while b"\n" not in self.pending:
            ready, _, _ = select.select([fd], [], [], max(deadline - time.monotonic(), 0))
            if not ready:
                return None
            chunk = os.read(fd, 65536)
            if not chunk:
                return ""
            self.pending += chunk
        line, self.pending = self.pending.split(b"\n", 1)
        return line.decode()

    def run(self, folder: Path, timeout: float) -> dict:
        if self.process is None or self.process.poll() is not None:
            self.start()
        self.process.stdin.write(str(folder) + "\n")
        self.process.stdin.flush()
        stage = "start"
        deadline = time.monotonic() + timeout
        while True:
            line = self.readline(deadline)
            if line is None:
                self.stop()
                status = {"onnxtrain": "crash", "compare": "reference_hang"}.get(stage, "ort_hang")
                return {"status": status,
                        "detail": f"hung for {timeout} s in stage {stage}"}
            if not line:
                code = self.process.wait()
                self.stderr.seek(0)
                stderr = self.stderr.read()[-2000:]
                self.process = None
                status = "crash" if stage in ("onnxtrain", "compare") else "ort_crash"
                return {"status": status, "detail": f"worker died with {code} in stage {stage}: {stderr}"}
            message = json.loads(line)
            if "stage" in message:
                stage = message["stage"]
                continue
            return message

    def stop(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait()
            self.process = None


FAILURES = {"crash", "error", "unclean_error", "mismatch"}


def fuzz(seed: int, cases: int | None, seconds: float | None, out: Path, timeout: float = 60.0,
         verbose: bool = False) -> dict:
    """Runs cases until `cases` are done or `seconds` have passed; returns the counts and findings."""
    import onnxtrain

    supported = {op for domain, op, *_ in onnxtrain.supported_ops() if domain in ("", "ai.onnx")}
    counts: dict[str, int] = {}
    findings = []
    work = Path(tempfile.mkdtemp(prefix="graph_fuzz_"))
    runner = Worker()
    start = time.monotonic()
    index = 0
    try:
        while (cases is None or index < cases) and (seconds is None or time.monotonic() - start < seconds):
            try:
                model, feeds = generate(seed, index, supported)
            except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError) as e:
                # The generator's shape rules and onnx's disagree (a generator bug, not a finding):
                # counted, so a rise shows.
                counts["invalid_generated"] = counts.get("invalid_generated", 0) + 1
                if verbose:
                    print(f"case {index}: generated an invalid graph: {str(e)[:200]}", flush=True)
                index += 1
                continue
            onnx.save(model, work / "model.onnx")
            np.savez(work / "inputs.npz", **feeds)
            result = runner.run(work, timeout)
            status = result["status"]
            counts[status] = counts.get(status, 0) + 1
            if status in FAILURES or status == "ort_deviation":
                case = out / f"seed{seed}_case{index}_{status}"
                case.mkdir(parents=True, exist_ok=True)
                shutil.copy(work / "model.onnx", case / "model.onnx")
                shutil.copy(work / "inputs.npz", case / "inputs.npz")
                ops = sorted({n.op_type for n in model.graph.node})
                (case / "report.json").write_text(json.dumps({"seed": seed, "case": index, "ops": ops, **result},
                                                             indent=1))
                findings.append({"case": index, "folder": str(case), **result})
                if verbose:
                    print(f"case {index}: {status}: {result.get('detail', '')[:300]}", flush=True)
            index += 1
    finally:
        runner.stop()
        shutil.rmtree(work, ignore_errors=True)
    return {"seed": seed, "cases": index, "seconds": round(time.monotonic() - start, 1), "counts": counts,
            "findings": findings}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cases", type=int, default=None, help="stop after this many cases")
    parser.add_argument("--seconds", type=float, default=None, help="stop after this long")
    parser.add_argument("--out", type=Path, default=Path("build/graph_fuzz"), help="failing cases go here")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds one case may take")
    parser.add_argument("--replay", type=Path, help="run one saved case folder and print the result")
    parser.add_argument("--locate", type=Path, help="find the first differing node of a saved case")
    parser.add_argument("--save", type=int, help="write case N of --seed to --out/case (no run)")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--onnxruntime-child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker()
        return 0
    if args.onnxruntime_child:
        onnxruntime_child()
        return 0
    if args.save is not None:
        import onnxtrain

        supported = {op for domain, op, *_ in onnxtrain.supported_ops() if domain in ("", "ai.onnx")}
        model, feeds = generate(args.seed, args.save, supported)
        folder = args.out / f"seed{args.seed}_case{args.save}"
        folder.mkdir(parents=True, exist_ok=True)
        onnx.save(model, folder / "model.onnx")
        np.savez(folder / "inputs.npz", **feeds)
        print(folder)
        return 0
    if args.locate:
        print(locate(args.locate))
        return 0
    if args.replay:
        print(json.dumps(run_case(args.replay, lambda stage: None), indent=1))
        return 0
    if args.cases is None and args.seconds is None:
        args.cases = 100
    summary = fuzz(args.seed, args.cases, args.seconds, args.out, args.timeout, verbose=True)
    print(json.dumps({k: v for k, v in summary.items() if k != "findings"}))
    return 1 if any(f["status"] in FAILURES for f in summary["findings"]) else 0


if __name__ == "__main__":
    sys.exit(main())
