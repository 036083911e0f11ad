"""``onnxtrain convert``: onnxruntime-training 1.19.2 artifacts to onnxtrain's, and back.

onnxtrain trains ORT's files as they are (docs/migrating_from_ort.md). Converting them gives
artifacts that are plain ONNX: every com.microsoft op of ORT's training model becomes its
org.onnxtrain equivalent, shipped with its standard-ONNX function body, or standard ops, so
the converted model also runs in stock onnxruntime; the ODTC checkpoint becomes a
safetensors checkpoint. ``to_ort_checkpoint`` writes an onnxtrain checkpoint as ODTC again.

    onnxtrain convert from-ort ORT_DIR OUT_DIR [--checkpoint checkpoint]
    onnxtrain convert to-ort CHECKPOINT OUT_CHECKPOINT
"""

from __future__ import annotations

import argparse
import copy
import os
import warnings
from pathlib import Path

import onnx
from onnx import helper, numpy_helper

import numpy as np

from onnxtrain import _C
from onnxtrain.training.api import CheckpointState

ORT = "com.microsoft"
OURS = "org.onnxtrain"
OPSET = 17

# com.microsoft op -> org.onnxtrain op computing the same from the same inputs.
SAME_OP = {
    "ReluGrad": "ReluGrad",  # ORT reads X, ours Y: X > 0 exactly where Relu(X) > 0
    "SigmoidGrad": "SigmoidGrad",
    "TanhGrad": "TanhGrad",
    "GeluGrad": "GeluGrad",
    "FastGeluGrad": "GeluTanhGrad",
    "SoftmaxGrad_13": "SoftmaxGrad",
    "LogSoftmaxGrad_13": "LogSoftmaxGrad",
    "LayerNormalizationGrad": "LayerNormalizationGrad",
    "Gelu": "Gelu",
}
# Attributes ORT's op has that the org.onnxtrain function does not take.
DROPPED_ATTRIBUTES = {"LayerNormalizationGrad": {"epsilon", "stash_type"}}


class ConversionError(ValueError):
    """An ORT artifact that has no plain-ONNX equivalent here."""


def _attribute(node: onnx.NodeProto, name: str, default=None):
    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default


def _value_infos(graph: onnx.GraphProto) -> dict[str, onnx.ValueInfoProto]:
    return {v.name: v for v in list(graph.input) + list(graph.value_info) + list(graph.output)}


class _TrainingModelConverter:
    """Rewrites one ORT training (or eval) model in place."""

    def __init__(self, model: onnx.ModelProto) -> None:
        self.model = model
        self.graph = model.graph
        self.infos = _value_infos(self.graph)
        self.used: set[str] = set()
        self.extra: list[onnx.NodeProto] = []

    def ours(self, node: onnx.NodeProto, op_type: str, inputs=None, keep=None) -> onnx.NodeProto:
        self.used.add(op_type)
        attributes = [a for a in node.attribute if keep is None or a.name in keep]
        new = helper.make_node(op_type, list(node.input if inputs is None else inputs), list(node.output),
                               name=node.name, domain=OURS)
        new.attribute.extend(attributes)
        return new

    def convert(self) -> None:
        nodes = []
        for node in self.graph.node:
            nodes.extend(self.node(node))
        del self.graph.node[:]
        self.graph.node.extend(nodes + self.extra)
        for v in self.graph.input:
            if v.name == "lazy_reset_grad":  # ORT feeds bool[1]; onnxtrain's artifacts a scalar
                v.type.tensor_type.shape.ClearField("dim")
        self.finish()

    def node(self, node: onnx.NodeProto) -> list[onnx.NodeProto]:
        op = node.op_type
        if node.domain == "" and op == "MaxPoolGrad":
            return self.max_pool_grad(node)
        if node.domain == "" and op == "AveragePoolGrad":
            return self.average_pool_grad(node)
        if node.domain == "" and op == "SimplifiedLayerNormalization":  # ORT's, in the default domain
            return self.simplified_layer_normalization(node)
        if node.domain != ORT:
            return [node]
        if op in SAME_OP:
            dropped = DROPPED_ATTRIBUTES.get(op, set())
            return [self.ours(node, SAME_OP[op], keep={a.name for a in node.attribute} - dropped)]
        handler = getattr(self, "op_" + op, None)
        if handler is None:
            raise ConversionError(f"{node.op_type} node '{node.name}' (com.microsoft) has no plain-ONNX equivalent here")
        return handler(node)

    # ---- the ops that need more than a new domain ----

    def op_InPlaceAccumulatorV2(self, node):
        buffer, grad, reset = (list(node.input) + [""] * 3)[:3]
        if not reset or len(node.output) != 1:
            raise ConversionError(f"accumulator '{node.name}' is not the (buffer, gradient, lazy_reset_grad) kind")
        for output in self.graph.output:
            if output.name == node.output[0]:
                output.type.CopyFrom(self.infos[buffer].type)
        self.used.add("AccumulateGradient")
        return [helper.make_node("AccumulateGradient", [grad, buffer, reset], list(node.output), name=node.name,
                                 domain=OURS)]

    def op_GatherGrad(self, node):
        shape, indices, dy = node.input
        return [self.ours(node, "GatherGrad", [dy, shape, indices])]

    def max_pool_grad(self, node):
        pooled = next((n.input[0] for n in self.graph.node
                       if n.op_type == "MaxPool" and len(n.output) == 2 and n.output[1] == node.input[1]), None)
        if pooled is None:
            raise ConversionError(f"MaxPoolGrad '{node.name}': no MaxPool produces its indices")
        shape = node.output[0] + "/input_shape"
        return [helper.make_node("Shape", [pooled], [shape]),
                self.ours(node, "MaxPoolGrad", [node.input[0], node.input[1], shape], keep=set())]

    def average_pool_grad(self, node):
        pooled = next((n.input[0] for n in self.graph.node if n.op_type == "AveragePool"
                       and (n.output[0] + "_grad" == node.input[0] or n.input[0] + "_grad" == node.output[0])), None)
        if pooled is None:
            raise ConversionError(f"AveragePoolGrad '{node.name}': no AveragePool is the one it differentiates")
        auto_pad = _attribute(node, "auto_pad", b"NOTSET")
        if (auto_pad.decode() if isinstance(auto_pad, bytes) else auto_pad) not in ("NOTSET", "VALID"):
            raise ConversionError(f"AveragePoolGrad '{node.name}' with auto_pad {auto_pad!r}")
        spatial = len(_attribute(node, "kernel_shape"))
        attributes = {"kernel_shape": _attribute(node, "kernel_shape"),
                      "pads": _attribute(node, "pads", [0] * (2 * spatial)),
                      "strides": _attribute(node, "strides", [1] * spatial),
                      "dilations": _attribute(node, "dilations", [1] * spatial),
                      "count_include_pad": _attribute(node, "count_include_pad", 0)}
        shape = node.output[0] + "/input_shape"
        self.used.add("AveragePoolGrad")
        return [helper.make_node("Shape", [pooled], [shape]),
                helper.make_node("AveragePoolGrad", [node.input[0], shape], list(node.output), name=node.name,
                                 domain=OURS, **attributes)]

    def constant(self, name: str, value: np.ndarray) -> str:
        self.graph.initializer.append(numpy_helper.from_array(value, name))
        return name

    def simplified_layer_normalization(self, node):
        """ORT's RMSNorm in standard ops: inv_std = 1 / sqrt(mean(x^2 over the normalized axes)
        + epsilon), Y = x * inv_std * scale; the normalized axes counted from the end, as
        many as scale has (ORT's scale spans them)."""
        x, scale = node.input[:2]
        base = node.output[0]
        axes = self.normalized_axes(node, scale)
        epsilon = self.constant(base + "/epsilon", np.array(_attribute(node, "epsilon", 1e-5), np.float32))
        inv = node.output[1] if len(node.output) > 1 and node.output[1] else base + "/inv_std"
        return [helper.make_node("Mul", [x, x], [base + "/square"]),
                helper.make_node("ReduceMean", [base + "/square"], [base + "/mean"], axes=axes, keepdims=1),
                helper.make_node("Add", [base + "/mean", epsilon], [base + "/variance"]),
                helper.make_node("Sqrt", [base + "/variance"], [base + "/root"]),
                helper.make_node("Reciprocal", [base + "/root"], [inv]),
                helper.make_node("Mul", [x, inv], [base + "/normalized"]),
                helper.make_node("Mul", [base + "/normalized", scale], [base])]

    def normalized_axes(self, node, scale: str) -> list[int]:
        info = self.infos.get(scale)
        if info is None or not info.type.tensor_type.HasField("shape"):
            raise ConversionError(f"{node.op_type} '{node.name}': the rank of its scale '{scale}' is unknown")
        rank = len(info.type.tensor_type.shape.dim)
        return list(range(-rank, 0))

    def op_SimplifiedLayerNormalizationGrad(self, node):
        """With r the saved inv_std, x^ = x r and g = dY scale: dX = r (g - x^ mean(g x^)),
        dScale = the sum over the leading axes of dY x^ (dY x^ reshaped to [-1, *scale's shape])."""
        dy, x, scale, inv = node.input[:4]
        base = node.output[0]
        axes = self.normalized_axes(node, scale)
        minus_one = self.constant(base + "/minus_one", np.array([-1], np.int64))
        nodes = [helper.make_node("Mul", [x, inv], [base + "/x_hat"]),
                 helper.make_node("Mul", [dy, scale], [base + "/g"]),
                 helper.make_node("Mul", [base + "/g", base + "/x_hat"], [base + "/g_x_hat"]),
                 helper.make_node("ReduceMean", [base + "/g_x_hat"], [base + "/mean"], axes=axes, keepdims=1),
                 helper.make_node("Mul", [base + "/x_hat", base + "/mean"], [base + "/projection"]),
                 helper.make_node("Sub", [base + "/g", base + "/projection"], [base + "/difference"]),
                 helper.make_node("Mul", [inv, base + "/difference"], [base])]
        if len(node.output) > 1 and node.output[1]:
            nodes += [helper.make_node("Mul", [dy, base + "/x_hat"], [base + "/dy_x_hat"]),
                      helper.make_node("Shape", [scale], [base + "/scale_shape"]),
                      helper.make_node("Concat", [minus_one, base + "/scale_shape"], [base + "/rows_shape"], axis=0),
                      helper.make_node("Reshape", [base + "/dy_x_hat", base + "/rows_shape"], [base + "/rows"]),
                      helper.make_node("ReduceSum", [base + "/rows", self.constant(base + "/axis0", np.array([0], np.int64))],
                                       [node.output[1]], keepdims=0)]
        return nodes

    def op_QuickGelu(self, node):
        base = node.output[0]
        alpha = self.constant(base + "/alpha", np.array(_attribute(node, "alpha", 1.702), np.float32))
        return [helper.make_node("Mul", [node.input[0], alpha], [base + "/scaled"]),
                helper.make_node("Sigmoid", [base + "/scaled"], [base + "/sigmoid"]),
                helper.make_node("Mul", [node.input[0], base + "/sigmoid"], [base])]

    def op_QuickGeluGrad(self, node):
        """dY * s * (1 + alpha x (1 - s)), s = sigmoid(alpha x)."""
        dy, x = node.input
        base = node.output[0]
        alpha = self.constant(base + "/alpha", np.array(_attribute(node, "alpha", 1.702), np.float32))
        one = self.constant(base + "/one", np.array(1.0, np.float32))
        return [helper.make_node("Mul", [x, alpha], [base + "/ax"]),
                helper.make_node("Sigmoid", [base + "/ax"], [base + "/s"]),
                helper.make_node("Sub", [one, base + "/s"], [base + "/1-s"]),
                helper.make_node("Mul", [base + "/ax", base + "/1-s"], [base + "/ax(1-s)"]),
                helper.make_node("Add", [one, base + "/ax(1-s)"], [base + "/1+ax(1-s)"]),
                helper.make_node("Mul", [base + "/s", base + "/1+ax(1-s)"], [base + "/slope"]),
                helper.make_node("Mul", [dy, base + "/slope"], [base])]

    def op_ConcatTraining(self, node):
        axis = _attribute(node, "axis")
        nodes = [helper.make_node("Concat", list(node.input), [node.output[0]], name=node.name, axis=axis)]
        if len(node.output) > 1 and node.output[1]:
            lengths = []
            for i, name in enumerate(node.input):
                length = f"{node.output[1]}/{i}"
                if axis == -1:  # Shape's end -1 + 1 would be 0: no end
                    nodes.append(helper.make_node("Shape", [name], [length], start=-1))
                else:
                    nodes.append(helper.make_node("Shape", [name], [length], start=axis, end=axis + 1))
                lengths.append(length)
            nodes.append(helper.make_node("Concat", lengths, [node.output[1]], axis=0))
        return nodes

    def op_SplitTraining(self, node):
        return [helper.make_node("Split", list(node.input), list(node.output), name=node.name,
                                 axis=_attribute(node, "axis", 0))]

    def op_GatherElementsGrad(self, node):
        dy, shape, indices = node.input
        base = node.output[0]
        return [helper.make_node("ConstantOfShape", [shape], [base + "/zeros_f"]),
                helper.make_node("CastLike", [base + "/zeros_f", dy], [base + "/zeros"]),
                helper.make_node("ScatterElements", [base + "/zeros", indices, dy], [base], name=node.name,
                                 axis=_attribute(node, "axis", 0), reduction="add")]

    def op_ConvGrad(self, node):
        pads = _attribute(node, "pads")
        spatial = len(pads) // 2 if pads else len(self.infos[node.input[2]].type.tensor_type.shape.dim) - 2
        new = self.ours(node, "ConvGrad", keep={"pads", "strides", "dilations", "group"})
        present = {a.name for a in new.attribute}
        defaults = {"strides": [1] * spatial, "dilations": [1] * spatial, "pads": [0] * (2 * spatial), "group": 1}
        for name, value in defaults.items():
            if name not in present:
                new.attribute.append(helper.make_attribute(name, value))
        return [new]

    def op_BatchNormalizationGrad(self, node):
        # org.onnxtrain's recomputes the batch statistics that ORT saved from X.
        return [self.ours(node, "BatchNormalizationGrad", list(node.input[:3]), keep={"epsilon"})]

    def op_BatchNormInternal(self, node):
        # Standard BatchNormalization in training mode; its running statistics go back into
        # the frozen parameters through "<p>.running.out" outputs, as onnxtrain's artifacts do.
        outputs = [node.output[0]]
        for i in (1, 2):
            statistic = node.input[i + 2]
            if statistic in {v.name for v in self.graph.input}:
                name = statistic + ".running.out"
                if name not in {o.name for o in self.graph.output}:
                    out = copy.deepcopy(self.infos[statistic])
                    out.name = name
                    self.graph.output.append(out)
                outputs.append(name)
            else:
                outputs.append("")
        while outputs and outputs[-1] == "":
            outputs.pop()
        return [helper.make_node("BatchNormalization", list(node.input), outputs, name=node.name,
                                 epsilon=_attribute(node, "epsilon", 1e-5), momentum=_attribute(node, "momentum", 0.9),
                                 training_mode=1)]

    def op_SoftmaxCrossEntropyLossGrad(self, node):
        reduction = _attribute(node, "reduction", b"mean")
        reduction = reduction.decode() if isinstance(reduction, bytes) else reduction
        if len([i for i in node.input if i]) > 3 or _attribute(node, "ignore_index") is not None:
            raise ConversionError(f"SoftmaxCrossEntropyLossGrad '{node.name}' with weights or ignore_index")
        new = self.ours(node, "SoftmaxCrossEntropyLossGrad", list(node.input[:3]), keep=set())
        new.attribute.append(helper.make_attribute("mean", 1 if reduction == "mean" else 0))
        return [new]

    def op_Scale(self, node):
        # As ORT's kernel: the factor is float(scale), inverted for scale_down, times X.
        x, scale = node.input
        base = node.output[0]
        nodes = [helper.make_node("CastLike", [scale, x], [base + "/scale"])]
        factor = base + "/scale"
        if _attribute(node, "scale_down", 0):
            nodes.append(helper.make_node("Reciprocal", [factor], [base + "/inverse"]))
            factor = base + "/inverse"
        nodes.append(helper.make_node("Mul", [x, factor], [base]))
        return nodes

    def op_FusedMatMul(self, node):
        if _attribute(node, "transBatchA", 0) or _attribute(node, "transBatchB", 0):
            raise ConversionError(f"FusedMatMul '{node.name}' with transBatchA/transBatchB")
        # An operand known to be a matrix takes no ellipsis: onnxruntime's Einsum refuses
        # ellipses of different ranks.
        a = self.ellipsis(node.input[0]) + ("km" if _attribute(node, "transA", 0) else "mk")
        b = self.ellipsis(node.input[1]) + ("nk" if _attribute(node, "transB", 0) else "kn")
        alpha = float(_attribute(node, "alpha", 1.0))
        out = node.output[0]
        if alpha == 1.0:
            return [helper.make_node("Einsum", list(node.input), [out], name=node.name, equation=f"{a},{b}->...mn")]
        alpha_name = out + "/alpha"
        return [helper.make_node("Einsum", list(node.input), [out + "/product"], equation=f"{a},{b}->...mn"),
                helper.make_node("Constant", [], [alpha_name], value=numpy_helper.from_array(np.array(alpha, np.float32))),
                helper.make_node("CastLike", [alpha_name, out + "/product"], [alpha_name + "/cast"]),
                helper.make_node("Mul", [out + "/product", alpha_name + "/cast"], [out])]

    def ellipsis(self, name: str) -> str:
        info = self.infos.get(name)
        shape = info.type.tensor_type.shape if info is not None and info.type.HasField("tensor_type") else None
        return "" if shape is not None and len(shape.dim) == 2 else "..."

    def finish(self) -> None:
        library = {f.name: f for f in onnx.load_model_from_string(_C.functions(OPSET)).functions}
        present = {f.name for f in self.model.functions if f.domain == OURS}
        for name in sorted(self.used - present):
            self.model.functions.append(library[name])
        imports = [o for o in self.model.opset_import if o.domain in ("", "ai.onnx")]
        imports.append(helper.make_opsetid(OURS, 1))
        del self.model.opset_import[:]
        self.model.opset_import.extend(imports)
        self.model.ir_version = max(self.model.ir_version, 8)
        left = {f"{n.domain}::{n.op_type}" for n in self.graph.node if n.domain not in ("", "ai.onnx", OURS)}
        if left:
            raise ConversionError("ops left without an equivalent: " + ", ".join(sorted(left)))


def convert_model(model: onnx.ModelProto) -> onnx.ModelProto:
    """An ORT training or eval model as a plain-ONNX onnxtrain model (a copy)."""
    model = copy.deepcopy(model)
    _TrainingModelConverter(model).convert()
    return model


def _optimizer_options(model: onnx.ModelProto) -> dict:
    (node,) = [n for n in model.graph.node if n.domain == ORT]
    if node.op_type == "SGDOptimizerV2":
        return {"optimizer": "sgd"}
    if node.op_type != "AdamWOptimizer":
        raise ConversionError(f"optimizer op {node.op_type} has no onnxtrain equivalent")
    mode = _attribute(node, "adam_mode", 0)
    if mode not in (0, 1):
        raise ConversionError(f"AdamWOptimizer has adam_mode {mode}; ORT defines 0 (torch) and 1 (Hugging Face)")
    if mode == 0:
        warnings.warn("the ORT optimizer is AdamW with adam_mode=0 (torch's rule): onnxtrain's torch rule computes it "
                      "in torch's order with double-precision scalars, ORT's kernel in float in another order, so the "
                      "converted run may differ from ORT's in the last bits", stacklevel=3)
    return {"optimizer": "adamw", "adam_mode": "huggingface" if mode == 1 else "torch",
            "beta1": float(_attribute(node, "alpha", 0.9)),
            "beta2": float(_attribute(node, "beta", 0.999)), "epsilon": float(_attribute(node, "epsilon", 1e-8)),
            "weight_decay": float(_attribute(node, "weight_decay", 1e-2)),
            "bias_correction": bool(_attribute(node, "correct_bias", 1))}


# ORT's moment slots and onnxtrain's names for them, per optimizer.
_MOMENTS = {"adamw": {"momentum0": "exp_avg", "momentum1": "exp_avg_sq"}, "sgd": {}}


def _convert_checkpoint(source: Path, target: Path, optimizer: str) -> CheckpointState:
    state = CheckpointState.load_checkpoint(source)
    if state._state.has_optimizer_state():
        step, lr, moments = state._state.optimizer_state()
        names = _MOMENTS[optimizer]
        renamed = {p: {names[m]: v for m, v in slots.items() if m in names} for p, slots in moments.items()}
        state._state.set_optimizer_state(step, lr, {p: s for p, s in renamed.items() if s})
    CheckpointState.save_checkpoint(state, target, include_optimizer_state=True)
    return state


def from_ort(ort_directory: str | os.PathLike, out_directory: str | os.PathLike, checkpoint: str = "checkpoint",
             prefix: str = "") -> None:
    """Converts ORT's training_model.onnx, eval_model.onnx, optimizer_model.onnx and an ODTC
    checkpoint (`checkpoint`, a name inside `ort_directory` or a path) into onnxtrain's
    artifacts in `out_directory`: the same file names, plain ONNX, a safetensors checkpoint."""
    src, out = Path(ort_directory), Path(out_directory)
    out.mkdir(parents=True, exist_ok=True)
    for name in ("training_model.onnx", "eval_model.onnx"):
        if (src / (prefix + name)).exists():
            onnx.save(convert_model(onnx.load(str(src / (prefix + name)))), str(out / (prefix + name)))
    options = _optimizer_options(onnx.load(str(src / (prefix + "optimizer_model.onnx"))))
    state = _convert_checkpoint(src / checkpoint if not Path(checkpoint).is_absolute() else Path(checkpoint),
                                out / (prefix + "checkpoint"), options["optimizer"])
    parameters = [(name, helper.np_dtype_to_tensor_dtype(np.asarray(p.data).dtype), list(np.asarray(p.data).shape))
                  for name, p in state.parameters if p.requires_grad]
    (out / (prefix + "optimizer_model.onnx")).write_bytes(_C.build_optimizer_model(parameters, options))


def to_ort_checkpoint(checkpoint: str | os.PathLike, out: str | os.PathLike) -> None:
    """Writes an onnxtrain (safetensors) checkpoint as an ODTC file ORT 1.19.2 loads."""
    state = CheckpointState.load_checkpoint(checkpoint)
    CheckpointState.save_checkpoint(state, out, include_optimizer_state=True, format="ort")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="onnxtrain convert", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    a = commands.add_parser("from-ort", help="ORT artifacts + ODTC checkpoint -> onnxtrain artifacts + safetensors")
    a.add_argument("ort_directory")
    a.add_argument("out_directory")
    a.add_argument("--checkpoint", default="checkpoint")
    a.add_argument("--prefix", default="")
    b = commands.add_parser("to-ort", help="an onnxtrain checkpoint -> an ODTC checkpoint")
    b.add_argument("checkpoint")
    b.add_argument("out")
    args = parser.parse_args(argv)
    try:
        if args.command == "from-ort":
            from_ort(args.ort_directory, args.out_directory, args.checkpoint, args.prefix)
        else:
            to_ort_checkpoint(args.checkpoint, args.out)
    except (ConversionError, RuntimeError, OSError) as e:
        print(f"onnxtrain convert: {e}")
        return 1
    return 0
