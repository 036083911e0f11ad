"""ONNX's backend node tests, run through onnxtrain.

One pytest test per node test (the id is the node test's name): skipped with the
reason when it does not apply to onnxtrain (no kernel, unsupported dtype,
non-tensor inputs/outputs), xfail(strict) when listed in
backend_expectations.KNOWN_FAILURES, otherwise it must pass. test_pass_rate then
demands that enough of the applicable tests pass; it reuses the outcomes the
per-test tests computed, so the suite runs every node test once.

Set ONNXTRAIN_BACKEND_ISOLATE=1 to run each node test in a worker process, so a
crash fails that test instead of ending pytest, and a test running longer than
ONNXTRAIN_BACKEND_TIMEOUT seconds (default 120) fails too. Note that test_pass_rate
runs every applicable node test, even under -k. tools/backend_report.py writes the
same results as a Markdown report.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("onnx")
sys.path.insert(0, str(Path(__file__).resolve().parent))

import backend_expectations as expectations
import onnx_backend_runner as backend_runner

try:
    BACKEND = backend_runner.load_backend()
except ImportError as error:
    pytest.skip(
        f"onnxtrain is not importable ({error}); build and install it into the venv first",
        allow_module_level=True,
    )

ISOLATE = os.environ.get("ONNXTRAIN_BACKEND_ISOLATE", "") not in ("", "0")
TIMEOUT_S = float(os.environ.get("ONNXTRAIN_BACKEND_TIMEOUT", "120"))
RUNNER = backend_runner.BackendTestRunner(BACKEND, isolate=ISOLATE, timeout_s=TIMEOUT_S)
CASE_NAMES = backend_runner.all_case_names()


def _case_param(name: str) -> object:
    """A parameter for one node test, marked skip or xfail as the tables say."""
    fit = RUNNER.applicability(name)
    if not fit.applicable:
        return pytest.param(name, id=name, marks=pytest.mark.skip(reason=fit.reason))
    if name in expectations.KNOWN_FAILURES:
        reason = expectations.KNOWN_FAILURES[name]
        return pytest.param(name, id=name, marks=pytest.mark.xfail(reason=reason, strict=True))
    return pytest.param(name, id=name)


def _applicable_names() -> list[str]:
    return [name for name in CASE_NAMES if RUNNER.applicability(name).applicable]


@pytest.fixture(scope="module", autouse=True)
def _stop_workers_at_the_end() -> Iterator[None]:
    yield
    RUNNER.close()


@pytest.mark.parametrize("name", [_case_param(name) for name in CASE_NAMES])
def test_onnx_node(name: str) -> None:
    outcome = RUNNER.outcome(name)
    if outcome.status == "failed":
        pytest.fail(outcome.reason, pytrace=False)


def test_pass_rate() -> None:
    """At least MIN_PASS_RATE of the applicable node tests pass (known failures
    count as failures)."""
    applicable = _applicable_names()
    assert applicable, "no ONNX node test applies: does onnxtrain.supported_ops() list kernels?"
    outcomes = RUNNER.outcomes(applicable)
    passed = sum(outcome.status == "passed" for outcome in outcomes)
    unexpected = [
        o.name
        for o in outcomes
        if o.status == "failed" and o.name not in expectations.KNOWN_FAILURES
    ]
    rate = passed / len(applicable)
    assert rate >= expectations.MIN_PASS_RATE, (
        f"{passed} of {len(applicable)} applicable ONNX node tests pass ({rate:.1%}), "
        f"below {expectations.MIN_PASS_RATE:.0%}; failures not in KNOWN_FAILURES: "
        f"{', '.join(unexpected[:20]) or '(none)'}{' ...' if len(unexpected) > 20 else ''}"
    )


def test_expectation_tables_are_current() -> None:
    """Every entry names an existing node test and says why; a known failure must be
    applicable (otherwise it is skipped anyway and the entry is stale)."""
    tables: dict[str, dict[str, Any]] = {
        "KNOWN_FAILURES": expectations.KNOWN_FAILURES,
        "NOT_COMPARABLE": expectations.NOT_COMPARABLE,
        "TOLERANCES": expectations.TOLERANCES,
        "RANDOM_PROPERTY_CHECKS": expectations.RANDOM_PROPERTY_CHECKS,
    }
    existing = set(CASE_NAMES)
    for table_name, table in tables.items():
        unknown = sorted(set(table) - existing)
        assert not unknown, f"{table_name} names tests that do not exist: {unknown}"
    for table_name in ("KNOWN_FAILURES", "NOT_COMPARABLE"):
        blank = sorted(name for name, reason in tables[table_name].items() if not reason.strip())
        assert not blank, f"{table_name} entries without a reason: {blank}"
    unknown_checks = sorted(
        f"{name}: {check}"
        for name, check in expectations.RANDOM_PROPERTY_CHECKS.items()
        if check not in backend_runner.RANDOM_CHECKS
    )
    assert not unknown_checks, f"RANDOM_PROPERTY_CHECKS names checks that do not exist: {unknown_checks}"
    skipped = sorted(
        n for n in expectations.KNOWN_FAILURES if not RUNNER.applicability(n).applicable
    )
    assert not skipped, f"KNOWN_FAILURES entries for tests that are skipped anyway: {skipped}"
