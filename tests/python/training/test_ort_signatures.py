"""onnxtrain's training API against onnxruntime-training 1.19.2's, as recorded by
tools/record_ort_signatures.py in ORT's own venv: every class, method and function ORT users
call exists, with the same parameter names, positions and defaults. onnxtrain's extras come
after ORT's parameters and have defaults, so they stay opt-in."""

from __future__ import annotations

import importlib
import inspect
import json
from pathlib import Path
from typing import Any

import pytest

TABLE = json.loads((Path(__file__).with_name("ort_1_19_2_signatures.json")).read_text())

# What ORT 1.19.2 has and onnxtrain leaves out, and why (docs/differences.md says the same).
NOT_PROVIDED = {
    "onnxblock.blocks.InputLike": "builds graph inputs for ORT's own optimizer graphs",
    "onnxblock.blocks.LabelEncoder": "an ai.onnx.ml op; onnxtrain runs the default ONNX domain only",
    "onnxblock.custom_op_library": "onnxtrain loads no custom-op libraries",
}

# Parameters ORT names but callers pass by position only (the input names of a block's
# build): onnxtrain may call them otherwise.
POSITIONAL_ONLY_IN_PRACTICE = {"build"}


def _onnxtrain_object(ort_name: str) -> Any:
    module_name, _, attribute = ("onnxtrain.training." + ort_name).rpartition(".")
    return getattr(importlib.import_module(module_name), attribute, None)


def _entries() -> list[tuple[str, dict]]:
    return sorted((name.removeprefix("onnxruntime.training."), entry) for name, entry in TABLE["api"].items())


def _default_matches(recorded: dict, actual: Any) -> bool:
    if "value" in recorded:
        value = list(actual) if isinstance(actual, tuple) else actual
        return type(value) is type(recorded["value"]) and value == recorded["value"] or (
            isinstance(value, float) and isinstance(recorded["value"], (int, float)) and value == recorded["value"])
    return repr(actual) == recorded["repr"]


def _compare(where: str, method: str, recorded: list[dict], function: Any) -> list[str]:
    """The mismatches between ORT's recorded parameters and ``function``'s."""
    ours = list(inspect.signature(function).parameters.values())
    if recorded and recorded[0]["name"] == "self" and (not ours or ours[0].name != "self"):
        recorded = recorded[1:]  # a bound or static method
    problems = []
    by_name = {p.name: p for p in ours}
    for index, expected in enumerate(recorded):
        kind = expected["kind"]
        rename_ok = method in POSITIONAL_ONLY_IN_PRACTICE and "default" not in expected
        if kind in ("VAR_POSITIONAL", "VAR_KEYWORD"):
            if not any(p.kind.name == kind for p in ours):
                problems.append(f"{where}: takes no {'*args' if kind == 'VAR_POSITIONAL' else '**kwargs'}")
            continue
        actual = by_name.get(expected["name"])
        if actual is None and rename_ok:
            if any(p.kind.name == "VAR_POSITIONAL" for p in ours[:index + 1]):
                continue  # onnxtrain's *input_names takes it
            if index < len(ours) and ours[index].kind.name == kind:
                actual = ours[index]
        if actual is None:
            problems.append(f"{where}: no parameter '{expected['name']}'")
            continue
        if kind == "POSITIONAL_OR_KEYWORD" and (actual.kind.name != kind or ours.index(actual) != index):
            problems.append(f"{where}: '{expected['name']}' must be positional parameter {index}")
        if "default" in expected:
            if actual.default is inspect.Parameter.empty:
                problems.append(f"{where}: '{expected['name']}' has no default; ORT's is {expected['default']['repr']}")
            elif not _default_matches(expected["default"], actual.default):
                problems.append(f"{where}: '{expected['name']}' defaults to {actual.default!r}; ORT's is "
                                f"{expected['default']['repr']}")
    recorded_names = {e["name"] for e in recorded}
    for extra in ours[len(recorded):]:
        if extra.name in recorded_names or extra.kind.name in ("VAR_POSITIONAL", "VAR_KEYWORD"):
            continue
        if extra.default is inspect.Parameter.empty:
            problems.append(f"{where}: onnxtrain's extra parameter '{extra.name}' needs a default (opt-in)")
    return problems


@pytest.mark.parametrize("name,entry", _entries(), ids=[n for n, _ in _entries()])
def test_onnxtrain_has_what_ort_1_19_2_has(name: str, entry: dict) -> None:
    if name in NOT_PROVIDED:
        pytest.skip(f"not provided: {NOT_PROVIDED[name]}")
    ours = _onnxtrain_object(name)
    assert ours is not None, f"onnxtrain.training.{name} is missing"
    if entry["type"] == "enum":
        assert {m.name: m.value for m in ours} == entry["members"]
        return
    if entry["type"] == "function":
        assert not (problems := _compare(name, name, entry["parameters"], ours)), problems
        return
    problems = []
    for method, recorded in entry["methods"].items():
        where = f"{name}.{method}"
        raw = inspect.getattr_static(ours, method, None)
        if raw is None:
            problems.append(f"{where} is missing")
        elif recorded["type"] == "property":
            if not isinstance(raw, property):
                problems.append(f"{where} must be a property")
        elif recorded["type"] in ("classmethod", "staticmethod") and not isinstance(raw, (classmethod, staticmethod)):
            problems.append(f"{where} must be a {recorded['type']}")
        else:
            problems += _compare(where, method, recorded["parameters"], getattr(ours, method))
    assert not problems, "\n".join(problems)


def test_the_table_is_onnxruntime_training_1_19_2() -> None:
    assert TABLE["onnxruntime_version"] == "1.19.2"
    defaults = {p["name"]: p["default"]["value"] for p in
                TABLE["api"]["onnxruntime.training.onnxblock.optim.AdamW"]["methods"]["__init__"]["parameters"][1:]
                if "value" in p.get("default", {})}
    assert defaults == {"bias_correction": True, "betas": [0.9, 0.999], "eps": 1e-6, "weight_decay": 0.0,
                        "clip_grad": None}


def test_the_comparison_finds_mismatches() -> None:
    recorded = TABLE["api"]["onnxruntime.training.onnxblock.optim.AdamW"]["methods"]["__init__"]["parameters"]

    def torch_defaults(self, bias_correction=True, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01, clip_grad=None):
        pass

    def reordered(self, betas=(0.9, 0.999), bias_correction=True, eps=1e-6, weight_decay=0.0, clip_grad=None):
        pass

    def required_extra(self, bias_correction=True, betas=(0.9, 0.999), eps=1e-6, weight_decay=0.0, clip_grad=None,
                       amsgrad=None, *, foreach):
        pass

    assert _compare("AdamW", "__init__", recorded, torch_defaults) == [
        "AdamW: 'eps' defaults to 1e-08; ORT's is 1e-06", "AdamW: 'weight_decay' defaults to 0.01; ORT's is 0.0"]
    assert len(_compare("AdamW", "__init__", recorded, reordered)) == 2
    assert _compare("AdamW", "__init__", recorded, required_extra) == [
        "AdamW: onnxtrain's extra parameter 'foreach' needs a default (opt-in)"]


def test_extras_beyond_ort_are_off_by_default() -> None:
    from onnxtrain.training.onnxblock import optim

    sgd = optim.SGD()
    assert (sgd.momentum, sgd.dampening, sgd.nesterov, sgd.weight_decay, sgd.clip_grad) == (0.0, 0.0, False, 0.0, None)
    adamw = optim.AdamW()
    assert (adamw.eps, adamw.weight_decay, adamw.betas, adamw.bias_correction, adamw.clip_grad) == (
        1e-6, 0.0, (0.9, 0.999), True, None)
