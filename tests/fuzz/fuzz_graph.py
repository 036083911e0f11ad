"""Coverage-guided fuzz target at the Python boundary (atheris, libFuzzer for Python).

The fuzzer's bytes drive every choice of a graph generator (ByteRng below stands in for
numpy's Generator), in one of two ways:
  generated  tools/graph_fuzz.py's generator: 1 to 8 nodes of about 90 ops, valid by
             construction (size-0/1 dimensions, broadcasting, attributes within the spec);
  schema     one node of an op onnxtrain has a kernel for, built from the op's ONNX schema at
             a random opset: inputs present or left out, dtypes from its type constraints,
             random shapes and random values for every attribute, so mostly invalid.
Each case runs in onnxruntime and then onnxtrain (tools/graph_fuzz.py's check_case): onnxtrain
in this process, onnxruntime in a child process (it dies on some invalid models; such a case is
`ort_crash`, not a finding, and the child is restarted). A finding is: a crash or a sanitizer report (libFuzzer keeps the input); an exception
from onnxtrain other than its clean errors (CLEAN_ERRORS, or an escaped C++ exception); outputs
that differ from onnxruntime's where onnx.reference does not side with onnxtrain (filtered:
KNOWN_ORT_DEVIATIONS); and, for a generated graph that onnx's checker accepts, an error where
onnxruntime ran it. A finding's model and feeds are saved (`--findings`, one .npz each) for
tests/fuzz/regressions/fuzz_graph/, which the test command replays.

    scripts/fuzz.sh --targets fuzz_graph --seconds 600      # the usual way
    python tests/fuzz/fuzz_graph.py CORPUS_DIR -max_total_time=60 -rss_limit_mb=4096

Coverage is Python's (atheris instruments this file, the generator and the onnxtrain package);
the C++ core is not instrumented here (the libFuzzer targets in this folder cover it natively).
Without atheris, `one_input(data)` runs one case: the test command does that with a few inputs.
"""

from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))

MAX_NODES = 8
OPSETS = (13, 15, 17, 18, 21)
DTYPES = {"tensor(float)": np.float32, "tensor(double)": np.float64, "tensor(float16)": np.float16,
          "tensor(int64)": np.int64, "tensor(int32)": np.int32, "tensor(int8)": np.int8,
          "tensor(uint8)": np.uint8, "tensor(bool)": np.bool_}
# Ops whose results are random (Dropout in training mode) or need a subgraph: nothing to
# compare, or no way to build it.
SKIPPED_OPS = {"RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike", "Multinomial",
               "Bernoulli", "Dropout", "If", "Loop", "Scan"}
STRINGS = ["", "constant", "reflect", "edge", "wrap", "NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID", "none",
           "tanh", "linear", "nearest", "cubic", "DCR", "CRD", "half_pixel", "asymmetric", "align_corners",
           "round_prefer_floor", "floor", "ceil", "mean", "sum", "max", "bogus\xff"]
ELEMENT_TYPES = [1, 2, 3, 5, 6, 7, 9, 10, 11, 0, 8, 16, 99]  # the numeric ones, UNDEFINED, string...


class ByteRng:
    """The part of numpy.random.Generator that the generators use, reading its choices from a
    fuzzer's bytes (0 once they run out) so that mutating a byte changes one decision. Bulk
    numbers (a tensor's contents) come from a numpy Generator seeded by the first 4 bytes."""

    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 4
        self.values = np.random.default_rng(int.from_bytes(data[:4], "little"))

    def below(self, n: int) -> int:
        if n <= 1:
            return 0
        width = ((n - 1).bit_length() + 7) // 8
        chunk = self.data[self.pos:self.pos + width]
        self.pos += width
        return int.from_bytes(chunk, "little") % n

    def integers(self, low, high=None, size=None):
        if high is None:
            low, high = 0, low
        if size is not None:
            return self.values.integers(low, high, size=size)
        return int(low) + self.below(int(high) - int(low))

    def random(self, size=None):
        return self.values.random(size) if size is not None else self.below(256) / 256

    def uniform(self, low=0.0, high=1.0, size=None):
        if size is not None:
            return self.values.uniform(low, high, size)
        return low + (high - low) * self.below(1 << 16) / (1 << 16)

    def permutation(self, n: int) -> np.ndarray:
        order = list(range(n))
        for i in range(n - 1, 0, -1):  # Fisher-Yates
            j = self.below(i + 1)
            order[i], order[j] = order[j], order[i]
        return np.array(order, dtype=np.int64)

    def choice(self, a, size=None, replace=True, p=None):
        # p (graph_fuzz's preference for recent values) is the fuzzer's to choose here.
        items = np.arange(a) if isinstance(a, (int, np.integer)) else np.asarray(a)
        if size is None:
            return items[self.below(len(items))]
        if not replace:
            return items[self.permutation(len(items))[:size]]
        return items[[self.below(len(items)) for _ in range(size)]]


def schema_ops(supported: set[str]) -> dict[int, list]:
    """For each opset of OPSETS, the schemas of the supported ops that can be built here."""
    import onnx.defs

    ops = {}
    for opset in OPSETS:
        schemas = []
        for op in sorted(supported - SKIPPED_OPS):
            try:
                schema = onnx.defs.get_schema(op, opset, "")
            except onnx.defs.SchemaError:
                continue
            if all(p.type_str in DTYPES or any(c.type_param_str == p.type_str for c in schema.type_constraints)
                   for p in schema.inputs):
                schemas.append(schema)
        ops[opset] = schemas
    return ops


def attribute_value(rng: ByteRng, name: str, kind, rank: int):
    from onnx import numpy_helper
    from onnx.defs import OpSchema

    A = OpSchema.AttrType
    small = [-2, -1, 0, 1, 2, 3, 4]
    if kind == A.INT:
        return int(rng.choice(ELEMENT_TYPES)) if name in ("to", "dtype") else int(rng.choice(small))
    if kind == A.FLOAT:
        return float(rng.choice([0.0, 0.5, 1.0, -1.0, 1e-5, 2.0, -0.5, 6.0]))
    if kind == A.STRING:
        return str(rng.choice(STRINGS))
    length = int(rng.choice([0, 1, 2, rank, 2 * rank, 3, 4, 8]))
    if kind == A.INTS:
        return [int(rng.choice(small)) for _ in range(length)]
    if kind == A.FLOATS:
        return [float(rng.choice([0.0, 0.5, 1.0, -1.0, 2.0])) for _ in range(length)]
    if kind == A.TENSOR:
        shape = [int(rng.integers(0, 3)) for _ in range(int(rng.integers(0, 3)))]
        dtype = [np.float32, np.int64, np.float64][int(rng.integers(0, 3))]
        return numpy_helper.from_array(rng.values.uniform(-3, 3, size=shape).astype(dtype))
    return None  # graphs, sparse tensors, type protos: not built here


def schema_case(rng: ByteRng, ops: dict[int, list]):
    """One node of a random supported op with random inputs and attributes, from its schema."""
    import onnx
    from onnx import helper, numpy_helper

    from graph_fuzz import KNOWN_DEVIATION_OPS, SINGLE_PRECISION_OPS, Graph

    opset = int(rng.choice(OPSETS))
    if not ops[opset]:
        return None
    schema = ops[opset][rng.below(len(ops[opset]))]
    g = Graph(rng)
    base = g.random_shape()
    rank = len(base)
    bound: dict[str, type] = {}  # type constraint -> the dtype chosen for it
    names, inputs, initializers, feeds = [], [], [], {}
    low, high = [(-5, 6), (0, 4), (-1, 2), (0, 2), (-rank - 1, rank + 1)][rng.below(5)]
    option = onnx.defs.OpSchema.FormalParameterOption
    for param in schema.inputs:
        count = {option.Single: 1, option.Optional: rng.below(2), option.Variadic: 1 + rng.below(3)}[param.option]
        if param.option == option.Single and rng.random() < 0.03:
            count = 0  # a required input left out
        if count == 0:
            names.append("")
            continue
        if param.type_str in DTYPES:
            dtype = DTYPES[param.type_str]
        else:
            if param.type_str not in bound:
                allowed = [DTYPES[t] for c in schema.type_constraints if c.type_param_str == param.type_str
                           for t in c.allowed_type_strs if t in DTYPES]
                if not allowed:
                    return None
                bound[param.type_str] = allowed[rng.below(len(allowed))]
            dtype = bound[param.type_str]
        for _ in range(count):
            kind = rng.below(4)
            if kind == 0:
                shape = g.random_shape()
            elif kind == 1 and dtype in (np.int64, np.int32):  # a list of axes, sizes, pads...
                shape = (int(rng.choice([0, 1, 2, rank, 2 * rank, 3])),)
            elif kind == 2:
                shape = base[rng.below(rank + 1):]
            else:
                shape = base
            if dtype is np.bool_:
                array = rng.values.random(shape) < 0.5
            elif np.issubdtype(dtype, np.integer):
                array = rng.values.integers(max(low, np.iinfo(dtype).min), high, size=shape).astype(dtype)
            else:
                array = rng.values.uniform(-3, 3, size=shape).astype(dtype)
            name = g.fresh("in")
            names.append(name)
            if rng.random() < 0.5:
                initializers.append(numpy_helper.from_array(array, name))
            else:
                inputs.append(helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(np.dtype(dtype)),
                                                            shape))
                feeds[name] = array
    while names and names[-1] == "":  # optional inputs left out at the end are dropped
        names.pop()
    attributes = {}
    for name, attribute in schema.attributes.items():
        if attribute.required or rng.random() < 0.5:
            value = attribute_value(rng, name, attribute.type, rank)
            if value is None:
                if attribute.required:
                    return None
                continue
            attributes[name] = helper.make_attribute(name, value, attr_type=int(attribute.type))
    outputs = [f"out{i}" for i in range(max(1, min(schema.min_output + rng.below(2), schema.max_output, 3)))]
    node = helper.make_node(schema.name, names, outputs)
    node.attribute.extend(attributes.values())
    graph = helper.make_graph([node], "schema_case", inputs, [helper.make_empty_tensor_value_info(o) for o in outputs],
                              initializer=initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)
    integer = any(np.issubdtype(t, np.integer) for t in bound.values())
    props = {}
    if integer and schema.name in KNOWN_DEVIATION_OPS["int_log_reduce"]:
        props["graph_fuzz.known"] = "int_log_reduce"
    if schema.name in SINGLE_PRECISION_OPS:
        props["graph_fuzz.single"] = ",".join(outputs)
    helper.set_model_props(model, props)
    return model, feeds


class Harness:
    """What one input does; made once (supported ops, schemas), then called per input."""

    def __init__(self, findings: Path | None) -> None:
        import onnxtrain

        self.supported = {op for domain, op, *_ in onnxtrain.supported_ops() if domain in ("", "ai.onnx")}
        self.schemas = schema_ops(self.supported)
        self.findings = findings
        self.checked: dict[bytes, dict] = {}  # case digest -> its result

    def __call__(self, data: bytes) -> dict:
        import graph_fuzz

        rng = ByteRng(data)
        generated = rng.below(2) == 0
        if generated:
            case = graph_fuzz.build(rng, self.supported, "fuzz_graph", max_nodes=MAX_NODES, validate=False)
        else:
            case = schema_case(rng, self.schemas)
        if case is None:
            return {"status": "not_built"}
        model, feeds = case
        model_bytes = model.SerializeToString()
        # Inputs that differ only in bytes the generator did not read make the same case:
        # checked once (the engines are deterministic), the repeats cost only the generation.
        key = hashlib.sha1(model_bytes + b"".join(k.encode() + v.tobytes() for k, v in sorted(feeds.items())))
        result = self.checked.get(key.digest())
        if result is None:
            result = check(model_bytes, feeds, generated)
            if len(self.checked) > 100_000:
                self.checked.clear()
            self.checked[key.digest()] = result
        if result["status"] in FINDINGS:
            self.keep(model_bytes, feeds, generated, result)
            raise AssertionError(f"fuzz_graph finding: {result}")
        return result

    def keep(self, model_bytes: bytes, feeds: dict, generated: bool, result: dict) -> None:
        if self.findings is None:
            return
        self.findings.mkdir(parents=True, exist_ok=True)
        path = self.findings / f"{result['status']}-{hashlib.sha1(model_bytes).hexdigest()[:16]}.npz"
        save_case(path, model_bytes, feeds, generated)
        print(f"fuzz_graph: kept {path}", file=sys.stderr)


FINDINGS = {"unclean_error", "mismatch", "error"}


def check(model_bytes: bytes, feeds: dict, generated: bool) -> dict:
    """graph_fuzz.check_case, with the harness's rules. A generated graph (valid by
    construction) runs in onnxruntime and then onnxtrain: a clean error of onnxtrain where
    onnxruntime ran it is a finding when onnx's checker accepts the graph. A schema case runs in
    onnxtrain first, where a clean error ends it (a refusal is not wrong); what onnxtrain
    accepted is compared with onnxruntime unless onnx's strict shape inference rejects it or
    it is one onnxruntime crashes on (crashes_onnxruntime). Invalid models crash onnxruntime
    and onnx's shape inference in places (ConvTranspose with group=0, Einsum with a malformed
    equation, an integer Div by zero, an empty 1-D MatMul in a valid graph), and the fuzzer must
    not take their crash for ours."""
    import onnx

    import graph_fuzz

    if generated:
        # onnxruntime 1.23 segfaults on some MatMuls with an empty inner dimension (two [0]
        # vectors) and aborts on BatchNormalization with zero channels: the generator marks
        # those graphs, and onnxtrain runs them alone.
        known = {p.value for p in onnx.load_from_string(model_bytes).metadata_props if p.key == "graph_fuzz.known"}
        unsafe = {"matmul_k0", "batchnorm_no_channels"}
        safe = not any(unsafe & set(value.split(",")) for value in known)
        result = graph_fuzz.check_case(model_bytes, feeds, run_ort=lambda: safe, onnxruntime=onnxruntime())
    else:
        def comparable() -> bool:
            model = onnx.load_from_string(model_bytes)
            try:
                onnx.shape_inference.infer_shapes(model, check_type=True, strict_mode=True)
            except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError):
                return False
            return not crashes_onnxruntime(model, feeds)

        result = graph_fuzz.check_case(model_bytes, feeds, ours_first=True, run_ort=comparable,
                                       onnxruntime=onnxruntime())
    if result["status"] == "error":
        try:
            graph_fuzz.check_valid(onnx.load_from_string(model_bytes))
        except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError) as e:
            result = {"status": "refused", "detail": result["detail"], "why_not_a_finding": str(e)[:200]}
    return result


_onnxruntime = None


def onnxruntime():
    """onnxruntime in a child process (graph_fuzz.IsolatedOnnxruntime), started once: where it
    dies on a case (crashes_onnxruntime names the frequent ones, which are not sent), the case
    is `ort_crash`, not a finding, and the fuzzing goes on."""
    import graph_fuzz

    global _onnxruntime
    if _onnxruntime is None:
        _onnxruntime = graph_fuzz.IsolatedOnnxruntime()
    return _onnxruntime


def crashes_onnxruntime(model, feeds: dict) -> bool:
    """Whether a (valid) schema case is one onnxruntime 1.23 dies on: an integer Div or Mod by
    zero raises SIGFPE inside it (onnxtrain refuses it with an error naming the divisor), and so
    does LpNormalization of a tensor with a size-0 dimension (onnxtrain returns it empty)."""
    from onnx import numpy_helper

    node = model.graph.node[0]
    if node.op_type == "LpNormalization":  # its input a feed or an initializer
        return any(np.size(value) == 0 for value in feeds.values()) or any(
            0 in tuple(t.dims) for t in model.graph.initializer)
    if node.op_type not in ("Div", "Mod") or len(node.input) < 2:
        return False
    values = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    divisor = feeds.get(node.input[1], values.get(node.input[1]))
    return divisor is not None and divisor.dtype.kind in "iu" and not divisor.all()


def save_case(path: Path, model_bytes: bytes, feeds: dict, generated: bool) -> None:
    """One .npz: the model's bytes (`__model__`), which mode made it (`__generated__`), the feeds."""
    np.savez(path, __model__=np.frombuffer(model_bytes, dtype=np.uint8), __generated__=np.array(generated), **feeds)


def load_case(path: Path) -> tuple[bytes, dict[str, np.ndarray], bool]:
    with np.load(path) as data:
        arrays = {k: data[k] for k in data.files}
    return arrays.pop("__model__").tobytes(), arrays, bool(arrays.pop("__generated__"))


def replay(path: Path) -> dict:
    """A saved case (tests/fuzz/regressions/fuzz_graph/*.npz) checked again, by its mode's rules."""
    model_bytes, feeds, generated = load_case(path)
    return check(model_bytes, feeds, generated)


def main() -> int:
    if sys.argv[1:2] == ["--replay"]:  # scripts/fuzz.sh: the regression corpus, without atheris
        bad = 0
        for path in sys.argv[2:]:
            result = replay(Path(path))
            bad += result["status"] in FINDINGS
            print(f"{path}: {result['status']}" + (f": {result}" if result["status"] in FINDINGS else ""))
        return 1 if bad else 0
    import atheris

    findings = os.environ.get("FUZZ_GRAPH_FINDINGS")
    with atheris.instrument_imports(include=["graph_fuzz", "onnxtrain"]):
        import graph_fuzz  # noqa: F401
        import onnxtrain  # noqa: F401
    harness = Harness(Path(findings) if findings else None)
    atheris.instrument_func(ByteRng.below)
    atheris.instrument_func(schema_case)
    atheris.instrument_func(attribute_value)
    atheris.Setup(sys.argv, lambda data: harness(data) and None)
    atheris.Fuzz()
    return 0


if __name__ == "__main__":
    sys.exit(main())
