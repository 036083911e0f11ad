"""Reference models for onnxtrain, exported to ONNX by both PyTorch exporters.

Every *case* is one model exported by one exporter in one mode; its id reads
``<model>-<exporter>-<mode>``, e.g. ``mlp-torchscript-eval`` or ``bert-dynamo-train``:

- models: ``mlp``, ``cnn`` (Conv2d/BatchNorm2d/ReLU/MaxPool2d/Dropout/Linear),
  ``resnet18`` (torchvision, random init, 10 classes), ``gpt2`` (GPT2LMHeadModel, 2 layers,
  logits only), ``bert`` (BertForMaskedLM, 2 layers, logits only);
- exporters: ``torchscript`` (``torch.onnx.export(dynamo=False)``, opset 17) and
  ``dynamo`` (``torch.onnx.export(dynamo=True)``, opset 18);
- modes: ``eval`` (``model.eval()``) and ``train`` (``model.train()``; TorchScript also gets
  ``training=TrainingMode.TRAINING``).

All weights come from fixed seeds; nothing is downloaded. The batch axis is dynamic in
every export, and so is the sequence axis of ``gpt2`` and ``bert``.

Training mode and determinism
-----------------------------
Dropout is random in training mode, so every Dropout probability of a ``train`` case is
set to 0 before export (``nn.Dropout.p`` and the transformers configs' dropout fields).
The TorchScript exporter still emits the node: ``Dropout(x, ratio=0.0, training_mode=True)``.
The dynamo exporter drops a Dropout whose ``p`` is 0, so ``*-dynamo-train`` graphs hold no
Dropout node (with ``p > 0`` it emits the same 3-input Dropout node as TorchScript).

BatchNorm in training mode normalizes with the batch statistics. TorchScript emits
``BatchNormalization(training_mode=1)`` with three outputs (Y, running_mean, running_var),
of which only Y is used; the graph outputs are the logits alone.

Workarounds for torch 2.9.1 / onnxscript 0.5.6 (each is recorded in the case's sidecar)
-----------------------------------------------------------------------------------------
1. Every dynamo export leaves unused torchlib helper functions
   (``pkg.onnxscript.torch_lib.common::Rank``/``IsScalar``) in the model, and the
   exporter's final opset conversion then refuses it ("The model contains functions").
   :func:`_dynamo_shim` removes unused functions just before that conversion.
2. Dynamo cannot export a training-mode BatchNorm that updates its running statistics
   (``ValueError: Key 'b_bn_running_mean' does not match the name of the value ...``).
   ``cnn-dynamo-train`` and ``resnet18-dynamo-train`` are exported with
   ``track_running_stats=False``: the same training-mode forward (batch statistics), which
   the exporter writes as ReduceMean/Sub/Mul feeding an *inference-mode*
   BatchNormalization. (Passing cloned running stats to ``F.batch_norm`` instead exports
   without error but is numerically wrong: the exporter then emits an inference
   BatchNormalization over the running stats.)
3. The dynamo exporter's optimizer fuses BatchNormalization into the preceding Conv and
   names the fused bias of a bias-less Conv after the Conv's *input*; in ResNet, conv1 and
   the downsample Conv of a block read the same tensor, so one silently gets the other's
   bias (``resnet18-dynamo-eval`` is off by 0.3). That case is re-exported without the
   fusion (:func:`_without_batchnorm_fusion`); its graph keeps inference BatchNormalization.
4. transformers 4.57 builds GPT-2's causal mask with ``torch.vmap``, which neither exporter
   can trace; GPT-2 uses the ``sdpa_without_vmap`` attention that transformers registers
   for its own exports (:func:`_use_sdpa_without_vmap`).
5. ``torch.export`` guards GPT-2 and BERT on ``batch != 1``, so their dynamo batch Dim
   starts at 2; the ONNX graphs hold no guard and run at batch 1 (tested).

Every export is run in onnxruntime on inputs of another batch and sequence size than the
trace and compared with PyTorch before it is cached, which is how 2 and 3 were found.

Caching
-------
Exports are slow, so ``.onnx`` files are cached under ``$ONNXTRAIN_MODEL_CACHE`` (default
``~/.cache/onnxtrain/models/<torch version>/``) as ``<case id>.onnx`` with a ``.json``
sidecar (export time, check against PyTorch, workarounds). Bump :data:`RECIPE_VERSION`
whenever a model or export setting changes.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import json
import os
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

RECIPE_VERSION = 1
TORCHSCRIPT_OPSET = 17
DYNAMO_OPSET = 18

MODELS: tuple[str, ...] = ("mlp", "cnn", "resnet18", "gpt2", "bert")
EXPORTERS: tuple[str, ...] = ("torchscript", "dynamo")
MODES: tuple[str, ...] = ("eval", "train")

#: Sequence length of the example inputs used for tracing (gpt2, bert).
EXPORT_SEQ_LEN = 16
#: Batch size used for tracing; 2 rather than 1 so no exporter specializes the batch axis.
EXPORT_BATCH = 2
#: Tolerances of the export-time check of onnxruntime against PyTorch.
CHECK_RTOL, CHECK_ATOL = 1e-3, 1e-4

InputMaker = Callable[..., dict[str, np.ndarray]]


class Case(NamedTuple):
    """An exported case: the ONNX file and a factory of matching random inputs.

    ``make_inputs(batch, seed, seq_len=None)`` returns ``{input name: array}``;
    ``seq_len`` only matters for sequence models (default :data:`EXPORT_SEQ_LEN`).
    """

    onnx_path: Path
    make_inputs: InputMaker


@dataclasses.dataclass(frozen=True)
class InputSpec:
    """One graph input. ``kind``: ``float`` (N(0,1)), ``tokens`` (ids below ``high``),
    ``mask`` (1 then trailing 0 padding per row) or ``segments`` (0/1 ids).
    ``shape`` uses the strings ``"batch"`` and ``"seq"`` for the dynamic axes."""

    name: str
    kind: str
    shape: tuple[int | str, ...]
    high: int = 0


@dataclasses.dataclass
class ModelSpec:
    """A built torch model with what exporting and feeding it needs."""

    module: Any  # torch.nn.Module; typed loosely so importing torch stays lazy
    inputs: tuple[InputSpec, ...]
    output_names: tuple[str, ...] = ("logits",)
    workarounds: tuple[str, ...] = ()
    #: Lower bound of the dynamo batch Dim. The transformers models guard on batch != 1
    #: while tracing, so they declare min=2; the ONNX graph holds no such guard and the
    #: tests run it at batch 1 too.
    dynamo_batch_min: int = 1


class ExportError(RuntimeError):
    """An export failed, or its result disagrees with PyTorch."""


# --------------------------------------------------------------------------- ids


def case_id(model: str, exporter: str, mode: str) -> str:
    """The id of a case, ``<model>-<exporter>-<mode>``."""
    return f"{model}-{exporter}-{mode}"


def parse_case_id(cid: str) -> tuple[str, str, str]:
    """Split a case id into (model, exporter, mode), validating each part."""
    parts = cid.split("-")
    if len(parts) != 3 or parts[0] not in MODELS or parts[1] not in EXPORTERS or parts[2] not in MODES:
        raise KeyError(f"unknown case {cid!r}; expected <model>-<exporter>-<mode> with "
                       f"model in {MODELS}, exporter in {EXPORTERS}, mode in {MODES}")
    return parts[0], parts[1], parts[2]


def list_cases(models: tuple[str, ...] | list[str] | None = None) -> list[str]:
    """All case ids (optionally only for some models), in a stable order."""
    chosen = MODELS if models is None else tuple(models)
    return [case_id(m, e, d) for m in chosen for e in EXPORTERS for d in MODES]


# --------------------------------------------------------------------------- inputs


def make_inputs(specs: tuple[InputSpec, ...], batch: int, seed: int,
                seq_len: int | None = None) -> dict[str, np.ndarray]:
    """Random inputs for ``specs`` with the given batch (and sequence) size."""
    rng = np.random.default_rng(seed)
    seq = EXPORT_SEQ_LEN if seq_len is None else seq_len
    feeds: dict[str, np.ndarray] = {}
    for spec in specs:
        shape = tuple(batch if d == "batch" else seq if d == "seq" else int(d) for d in spec.shape)
        feeds[spec.name] = _random_input(spec, shape, rng)
    return feeds


def _random_input(spec: InputSpec, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    if spec.kind == "float":
        return rng.standard_normal(shape, dtype=np.float32)
    if spec.kind == "tokens":
        return rng.integers(0, spec.high, size=shape, dtype=np.int64)
    if spec.kind == "segments":
        return rng.integers(0, 2, size=shape, dtype=np.int64)
    if spec.kind == "mask":
        batch, seq = shape
        lengths = rng.integers(max(1, seq // 2), seq + 1, size=batch)
        lengths[0] = seq  # keep one unpadded row
        return (np.arange(seq)[None, :] < lengths[:, None]).astype(np.int64)
    raise ValueError(f"unknown input kind {spec.kind!r} for input {spec.name!r}")


#: The graph inputs of each model (names are also the forward-argument names).
_INPUTS: dict[str, tuple[InputSpec, ...]] = {
    "mlp": (InputSpec("x", "float", ("batch", 32)),),
    "cnn": (InputSpec("x", "float", ("batch", 3, 32, 32)),),
    "resnet18": (InputSpec("x", "float", ("batch", 3, 64, 64)),),
    "gpt2": (InputSpec("input_ids", "tokens", ("batch", "seq"), high=128),),
    "bert": (
        InputSpec("input_ids", "tokens", ("batch", "seq"), high=128),
        InputSpec("attention_mask", "mask", ("batch", "seq")),
        InputSpec("token_type_ids", "segments", ("batch", "seq")),
    ),
}


# --------------------------------------------------------------------------- models


def _seed_everything(seed: int) -> None:
    import torch

    torch.manual_seed(seed)
    np.random.seed(seed)


def _randomize_batchnorm(module: Any, seed: int) -> None:
    """Give every BatchNorm non-trivial affine parameters and running statistics, so
    eval-mode exports are not near-identity normalizations."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for bn in module.modules():
            if not isinstance(bn, torch.nn.modules.batchnorm._BatchNorm):
                continue
            n = bn.num_features
            bn.weight.copy_(torch.rand(n, generator=gen) + 0.5)
            bn.bias.copy_(torch.randn(n, generator=gen) * 0.1)
            if bn.running_mean is not None:
                bn.running_mean.copy_(torch.randn(n, generator=gen) * 0.1)
                bn.running_var.copy_(torch.rand(n, generator=gen) + 0.5)


def _zero_dropout(module: Any) -> None:
    """Set p=0 on every nn.Dropout (the node stays in the TorchScript graph)."""
    import torch

    for m in module.modules():
        if isinstance(m, torch.nn.Dropout):
            m.p = 0.0


def _drop_running_stats(module: Any) -> None:
    """Make every BatchNorm use batch statistics only (dynamo training workaround)."""
    import torch

    for bn in module.modules():
        if isinstance(bn, torch.nn.modules.batchnorm._BatchNorm):
            bn.track_running_stats = False
            bn.running_mean = None
            bn.running_var = None
            bn.num_batches_tracked = None


def _named_x(body: Any) -> Any:
    """Wrap an ``nn.Sequential`` so its forward argument is named ``x`` (the ONNX input
    name; the dynamo exporter names inputs after forward arguments)."""
    from torch import nn

    class Classifier(nn.Module):
        def __init__(self, inner: nn.Module) -> None:
            super().__init__()
            self.body = inner

        def forward(self, x):  # type: ignore[no-untyped-def]
            return self.body(x)

    return Classifier(body)


def _build_mlp(training: bool) -> ModelSpec:
    from torch import nn

    _seed_everything(1)
    module = _named_x(
        nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10)))
    return ModelSpec(module, _INPUTS["mlp"])


def _build_cnn(training: bool) -> ModelSpec:
    from torch import nn

    _seed_everything(2)
    module = _named_x(nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(8, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Dropout(0.25), nn.Linear(16 * 8 * 8, 10),
    ))
    _randomize_batchnorm(module, 2)
    return ModelSpec(module, _INPUTS["cnn"])


def _build_resnet18(training: bool) -> ModelSpec:
    import torchvision

    _seed_everything(3)
    module = torchvision.models.resnet18(weights=None, num_classes=10)
    _randomize_batchnorm(module, 3)
    return ModelSpec(module, _INPUTS["resnet18"])


def _logits_only(model: Any, input_names: tuple[str, ...]) -> Any:
    """Wrap a transformers model so that ``forward(<input_names>)`` returns ``.logits``.

    The dynamo exporter binds inputs by forward-argument name, so the wrapper spells the
    arguments out instead of taking ``**kwargs``.
    """
    from torch import nn

    class TextLogits(nn.Module):
        def __init__(self, inner: nn.Module) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, input_ids, attention_mask=None, token_type_ids=None):  # type: ignore[no-untyped-def]
            given = {"input_ids": input_ids, "attention_mask": attention_mask, "token_type_ids": token_type_ids}
            kwargs = {k: v for k, v in given.items() if k in input_names}
            return self.inner(**kwargs, return_dict=True).logits

    return TextLogits(model)


def _use_sdpa_without_vmap(model: Any) -> None:
    """Switch a transformers model to SDPA attention with a causal mask built without
    ``torch.vmap``, as ``transformers.integrations.executorch`` does for export.

    The default mask builder (``masking_utils.sdpa_mask_recent_torch``) uses ``vmap``;
    TorchScript tracing then fails with ``RuntimeError: unordered_map::at`` and
    ``torch.export`` with ``8*s72 ... is not tracked with proxy`` (eager attention builds
    its mask the same way and fails the same).
    """
    from transformers.integrations.executorch import sdpa_mask_without_vmap
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    ALL_MASK_ATTENTION_FUNCTIONS.register("sdpa_without_vmap", sdpa_mask_without_vmap)
    ALL_ATTENTION_FUNCTIONS.register("sdpa_without_vmap", ALL_ATTENTION_FUNCTIONS["sdpa"])
    model.config._attn_implementation = "sdpa_without_vmap"


def _build_gpt2(training: bool) -> ModelSpec:
    import transformers

    _seed_everything(4)
    drop = 0.0 if training else 0.1
    config = transformers.GPT2Config(
        n_layer=2, n_head=2, n_embd=64, vocab_size=128, n_positions=64, use_cache=False,
        resid_pdrop=drop, embd_pdrop=drop, attn_pdrop=drop,
    )
    model = transformers.GPT2LMHeadModel(config)
    _use_sdpa_without_vmap(model)
    specs = _INPUTS["gpt2"]
    return ModelSpec(_logits_only(model, tuple(s.name for s in specs)), specs, dynamo_batch_min=2,
                     workarounds=("attention 'sdpa_without_vmap' (transformers' own export setting)",))


def _build_bert(training: bool) -> ModelSpec:
    import transformers

    _seed_everything(5)
    drop = 0.0 if training else 0.1
    config = transformers.BertConfig(
        num_hidden_layers=2, hidden_size=64, num_attention_heads=2, intermediate_size=128,
        vocab_size=128, max_position_embeddings=64,
        hidden_dropout_prob=drop, attention_probs_dropout_prob=drop,
    )
    model = transformers.BertForMaskedLM(config)
    specs = _INPUTS["bert"]
    return ModelSpec(_logits_only(model, tuple(s.name for s in specs)), specs, dynamo_batch_min=2)


_BUILDERS: dict[str, Callable[[bool], ModelSpec]] = {
    "mlp": _build_mlp,
    "cnn": _build_cnn,
    "resnet18": _build_resnet18,
    "gpt2": _build_gpt2,
    "bert": _build_bert,
}


def build_model(model: str, mode: str, exporter: str = "torchscript") -> ModelSpec:
    """Build the torch model of a case in its mode, with the exporter's workarounds applied."""
    training = mode == "train"
    spec = _BUILDERS[model](training)
    if training:
        _zero_dropout(spec.module)
        if exporter == "dynamo" and _has_batchnorm(spec.module):
            _drop_running_stats(spec.module)
            spec.workarounds += (
                "BatchNorm track_running_stats=False (dynamo cannot export the running-stat update)",)
    spec.module.train(training)
    return spec


def _has_batchnorm(module: Any) -> bool:
    import torch

    return any(isinstance(m, torch.nn.modules.batchnorm._BatchNorm) for m in module.modules())


# --------------------------------------------------------------------------- export


def _example_tensors(spec: ModelSpec, batch: int, seed: int, seq_len: int | None = None) -> dict[str, Any]:
    import torch

    return {k: torch.from_numpy(v) for k, v in make_inputs(spec.inputs, batch, seed, seq_len).items()}


def _dynamic_axes(spec: ModelSpec) -> dict[str, dict[int, str]]:
    """TorchScript ``dynamic_axes``: every ``batch``/``seq`` axis of the inputs and outputs."""
    axes = {s.name: {i: d for i, d in enumerate(s.shape) if isinstance(d, str)} for s in spec.inputs}
    output_axes = {0: "batch", 1: "seq"} if any("seq" in s.shape for s in spec.inputs) else {0: "batch"}
    for name in spec.output_names:
        axes[name] = output_axes
    return axes


def _dynamic_shapes(spec: ModelSpec) -> dict[str, dict[int, Any]]:
    """Dynamo ``dynamic_shapes`` keyed by forward argument names (= input names here)."""
    import torch

    dims = {"batch": torch.export.Dim("batch", min=spec.dynamo_batch_min, max=1024),
            "seq": torch.export.Dim("seq", min=1, max=64)}
    return {s.name: {i: dims[d] for i, d in enumerate(s.shape) if isinstance(d, str)} for s in spec.inputs}


@contextlib.contextmanager
def _dynamo_shim(removed: list[str]) -> Iterator[None]:
    """Remove unused model-local functions before the exporter's opset conversion, and
    append their names to ``removed``.

    torchlib leaves helper functions (``pkg.onnxscript.torch_lib.common::Rank``,
    ``IsScalar``) in the model after inlining them, and onnxscript's version converter
    refuses any model that has functions ("The model contains functions").
    """
    import onnx_ir.passes.common as common_passes
    from onnxscript._framework_apis import torch_2_9

    original = torch_2_9.convert_version

    def convert_version(model: Any, target_version: int) -> Any:
        before = {f"{d}::{n}" for d, n, _ in model.functions}
        common_passes.RemoveUnusedFunctionsPass()(model)
        removed.extend(sorted(before - {f"{d}::{n}" for d, n, _ in model.functions}))
        return original(model, target_version)

    torch_2_9.convert_version = convert_version
    try:
        yield
    finally:
        torch_2_9.convert_version = original


def _export_torchscript(spec: ModelSpec, path: Path) -> None:
    import torch

    training = spec.module.training
    args = tuple(_example_tensors(spec, EXPORT_BATCH, seed=0).values())
    torch.onnx.export(
        spec.module, args, str(path), dynamo=False, opset_version=TORCHSCRIPT_OPSET,
        input_names=[s.name for s in spec.inputs], output_names=list(spec.output_names),
        dynamic_axes=_dynamic_axes(spec),
        training=torch.onnx.TrainingMode.TRAINING if training else torch.onnx.TrainingMode.EVAL,
        do_constant_folding=not training,  # folding is not allowed in training mode
    )


@contextlib.contextmanager
def _without_batchnorm_fusion() -> Iterator[None]:
    """Drop onnxscript's BatchNormalization-into-Conv/Gemm fusion from the exporter's
    optimizer for the duration of the block.

    onnxscript 0.5.6 names the fused bias of a bias-less Conv ``<conv input>_bias``; two
    such Convs reading the same tensor (a ResNet block's conv1 and its downsample) then
    write one initializer, and one Conv silently gets the other's bias.
    """
    from onnxscript import rewriter
    from onnxscript.rewriter.rules.common import _fuse_batchnorm

    original = rewriter._DEFAULT_REWRITE_RULES
    fusion = {id(rule) for rule in _fuse_batchnorm.rules}
    rewriter._DEFAULT_REWRITE_RULES = tuple(r for r in original if id(r) not in fusion)
    try:
        yield
    finally:
        rewriter._DEFAULT_REWRITE_RULES = original


def _export_dynamo(spec: ModelSpec, path: Path, fuse_batchnorm: bool = True) -> None:
    import torch

    kwargs = _example_tensors(spec, EXPORT_BATCH, seed=0)
    removed: list[str] = []
    no_fusion = contextlib.nullcontext() if fuse_batchnorm else _without_batchnorm_fusion()
    with _dynamo_shim(removed), no_fusion:
        torch.onnx.export(
            spec.module, (), str(path), kwargs=kwargs, dynamo=True, opset_version=DYNAMO_OPSET,
            input_names=[s.name for s in spec.inputs], output_names=list(spec.output_names),
            dynamic_shapes=_dynamic_shapes(spec), external_data=False, verbose=False,
        )
    if removed:
        spec.workarounds += (f"removed unused functions before opset conversion: {', '.join(removed)}",)


def _check_against_torch(spec: ModelSpec, path: Path) -> float:
    """Run the export in onnxruntime on fresh inputs (other batch and sequence sizes than
    the trace) and compare with PyTorch; return the largest absolute difference."""
    import onnxruntime
    import torch

    feeds = make_inputs(spec.inputs, batch=3, seed=123, seq_len=11)
    reference_module = copy.deepcopy(spec.module)  # training BatchNorm updates buffers
    with torch.no_grad():
        expected = reference_module(*(torch.from_numpy(v) for v in feeds.values()))
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    actual = session.run(None, feeds)[0]
    np.testing.assert_allclose(actual, expected.numpy(), rtol=CHECK_RTOL, atol=CHECK_ATOL)
    return float(np.max(np.abs(actual - expected.numpy())))


def cache_dir() -> Path:
    """Where exported models are cached (``$ONNXTRAIN_MODEL_CACHE`` or the default)."""
    env = os.environ.get("ONNXTRAIN_MODEL_CACHE")
    if env:
        return Path(env).expanduser()
    import torch

    return Path.home() / ".cache" / "onnxtrain" / "models" / torch.__version__


def _paths(cid: str) -> tuple[Path, Path]:
    root = cache_dir()
    return root / f"{cid}.onnx", root / f"{cid}.json"


def read_metadata(cid: str) -> dict[str, Any] | None:
    """The sidecar of a cached export, or None when absent or from another recipe."""
    onnx_path, meta_path = _paths(cid)
    if not (onnx_path.exists() and meta_path.exists()):
        return None
    meta = json.loads(meta_path.read_text())
    return meta if meta.get("recipe_version") == RECIPE_VERSION else None


def export_case(cid: str, force: bool = False) -> Path:
    """Export a case into the cache (unless already there) and return the .onnx path.

    Every export is run in onnxruntime and compared with PyTorch before it is cached;
    a mismatch raises :class:`ExportError`, except that a dynamo export whose
    BatchNormalization fusion broke it is retried once without that fusion.
    """
    onnx_path, meta_path = _paths(cid)
    if not force and read_metadata(cid) is not None:
        return onnx_path
    model, exporter, mode = parse_case_id(cid)
    onnx_path.parent.mkdir(parents=True, exist_ok=True)
    spec = build_model(model, mode, exporter)
    with tempfile.TemporaryDirectory(dir=onnx_path.parent) as tmp:
        tmp_path = Path(tmp) / onnx_path.name
        start = time.perf_counter()
        _export(cid, spec, tmp_path)
        max_diff = _checked(cid, spec, tmp_path, may_retry=exporter == "dynamo" and _has_batchnorm(spec.module))
        if max_diff is None:
            _export(cid, spec, tmp_path, fuse_batchnorm=False)
            spec.workarounds += ("onnxscript BatchNormalization fusion disabled "
                                 "(it gives bias-less Convs sharing an input one bias name)",)
            max_diff = _checked(cid, spec, tmp_path, may_retry=False)
        seconds = time.perf_counter() - start
        os.replace(tmp_path, onnx_path)  # atomic: concurrent runs never see half a file
    meta = {"recipe_version": RECIPE_VERSION, "case": cid, "export_seconds": round(seconds, 2),
            "max_abs_diff_vs_torch": max_diff, "workarounds": list(dict.fromkeys(spec.workarounds)),
            "inputs": [dataclasses.asdict(s) for s in spec.inputs]}
    _atomic_write_text(meta_path, json.dumps(meta, indent=1))
    return onnx_path


def _checked(cid: str, spec: ModelSpec, path: Path, may_retry: bool) -> float | None:
    """:func:`_check_against_torch`, raising :class:`ExportError` on a mismatch, or
    returning None instead when ``may_retry``."""
    try:
        return _check_against_torch(spec, path)
    except AssertionError as e:
        if may_retry:
            return None
        raise ExportError(f"{cid}: onnxruntime disagrees with PyTorch on the export:\n{e}") from e


def _export(cid: str, spec: ModelSpec, path: Path, fuse_batchnorm: bool = True) -> None:
    """Run the case's exporter quietly, wrapping any failure in :class:`ExportError`."""
    _, exporter, _ = parse_case_id(cid)
    try:
        with warnings.catch_warnings(), _quiet():
            warnings.simplefilter("ignore")
            if exporter == "dynamo":
                _export_dynamo(spec, path, fuse_batchnorm)
            else:
                _export_torchscript(spec, path)
    except Exception as e:
        raise ExportError(f"{cid}: export failed: {type(e).__name__}: {e}") from e


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """Silence the exporters' progress prints (they write to stdout)."""
    import io
    import sys

    saved = sys.stdout
    sys.stdout = io.StringIO()
    try:
        yield
    finally:
        sys.stdout = saved


def _atomic_write_text(path: Path, text: str) -> None:
    tmp = path.with_suffix(path.suffix + f".{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def input_specs(model: str) -> tuple[InputSpec, ...]:
    """The input specs of a model, without building it."""
    return _INPUTS[model]


def get_case(cid: str) -> Case:
    """The exported ONNX file of a case (exported on first use) and its input factory."""
    model, _, _ = parse_case_id(cid)
    path = export_case(cid)
    specs = input_specs(model)

    def make(batch: int, seed: int, seq_len: int | None = None) -> dict[str, np.ndarray]:
        return make_inputs(specs, batch, seed, seq_len)

    return Case(path, make)


def is_sequence_model(model: str) -> bool:
    """True for models with a dynamic sequence axis."""
    return any("seq" in s.shape for s in input_specs(model))
