"""Every gradient rule has at least one gradient check.

The cases are the GradCase lists of the rule test modules (``test_*rules*.py`` in this folder);
an op counts as checked when a case's graph contains it. The org.onnxtrain ops a rule exists for
come out of passes, not models, and are checked where the pass is (named below).
"""

from __future__ import annotations

import importlib
from pathlib import Path

from onnxtrain import _C

from .gradcheck import GradCase

HERE = Path(__file__).resolve().parent

#: Rules whose checks live outside the GradCase tables, and where.
CHECKED_ELSEWHERE = {
    ("org.onnxtrain", "Gelu"): "test_fuse_gelu.py: gradients through the fused GELU against torch",
    ("org.onnxtrain", "GeluTanh"): "test_fuse_gelu.py: gradients through the fused GELU against torch",
    # Estimators, not derivatives (round's derivative is 0 almost everywhere): no finite differences.
    ("", "QuantizeLinear"): "test_quantize_rules.py: straight-through and LSQ gradients against torch's fake-quant",
    ("", "DequantizeLinear"): "test_quantize_rules.py: straight-through and LSQ gradients against torch's fake-quant",
}


def gradient_cases() -> list[GradCase]:
    cases = []
    for path in sorted(HERE.glob("test_*rules*.py")):
        module = importlib.import_module(f"{__package__}.{path.stem}")
        for value in vars(module).values():
            if isinstance(value, list):
                cases.extend(c for c in value if isinstance(c, GradCase))
    return cases


def checked_ops(cases: list[GradCase]) -> set[tuple[str, str]]:
    ops = set()
    for case in cases:
        nodes, _, _ = case.build()
        ops.update(("" if n.domain == "ai.onnx" else n.domain, n.op_type) for n in nodes)
    return ops


def test_every_gradient_rule_has_a_case() -> None:
    cases = gradient_cases()
    assert len(cases) > 300, "the rule test modules were not found"
    checked = checked_ops(cases) | set(CHECKED_ELSEWHERE)
    rules = {(domain, op) for domain, op in _C.differentiable_ops()}
    unchecked = sorted(rules - checked)
    assert not unchecked, f"gradient rules without a gradient check: {unchecked}"
