"""Hypothesis: no input to the loader, the FT3xx rules or the summary produces a traceback, and none passes.

Three generators: arbitrary bytes, arbitrary JSON documents, and the good statement with one part replaced
or deleted (the inputs that get deepest into the rules). Every example must load without raising, every
rule must run without crashing (a crash would become a "rule crashed" finding, which the helper rejects),
the summary must build, and the verdict must fail (the bytes no longer match the signature).
"""

from __future__ import annotations

import copy
import json
import os
import tempfile
from pathlib import Path
from typing import Any

import pytest
from bundle_factory import BundleFixture, errors, run_all, session_key
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fasttrack.evidence.loader import load_evidence
from fasttrack.evidence.summary import summarize

# FASTTRACK_FUZZ_EXAMPLES raises the example count for a longer local run (CI uses the default).
EXAMPLES = int(os.environ.get("FASTTRACK_FUZZ_EXAMPLES", "120"))
SETTINGS = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])

scalars = st.one_of(
    st.none(), st.booleans(), st.text(max_size=20),
    st.integers(min_value=-(10**30), max_value=10**30),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from(["passed", "failed", "stock", "fused", "NVIDIA H200", "bfloat16", "9.0", "a" * 64,
                     "2026-11-30T00:00:00Z", 0, 1, 2, -1, 1e308, 1e-308]),
)
json_values = st.recursive(
    scalars,
    lambda children: st.one_of(st.lists(children, max_size=5),
                               st.dictionaries(st.text(max_size=12), children, max_size=5)),
    max_leaves=30,
)


class Harness:
    """One signed good bundle on disk; each example overwrites statement.json and judges it."""

    def __init__(self) -> None:
        self.fx = BundleFixture(Path(tempfile.mkdtemp(prefix="fasttrack-fuzz-")), session_key())
        self.fx.write_and_sign()
        self.good = copy.deepcopy(self.fx.data)

    def judge(self, raw: bytes) -> None:
        self.fx.write(raw)
        ev = load_evidence(self.fx.bundle)
        assert ev is not None
        ctx = self.fx.context()
        found = run_all(ctx)  # asserts no rule crashed
        summarize(ctx)
        assert errors(found), "a bundle that is not the signed one must never pass"


_HARNESS: Harness | None = None


def harness() -> Harness:
    global _HARNESS
    if _HARNESS is None:
        _HARNESS = Harness()
    return _HARNESS


def paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix] if prefix else []
    if isinstance(node, dict):
        for k, v in node.items():
            out += paths(v, (*prefix, k))
    elif isinstance(node, list):
        for i, v in enumerate(node[:3]):
            out += paths(v, (*prefix, i))
    return out


GOOD_PATHS: list[tuple[Any, ...]] = []


def good_paths() -> list[tuple[Any, ...]]:
    if not GOOD_PATHS:
        GOOD_PATHS.extend(paths(harness().good))
    return GOOD_PATHS


@SETTINGS
@given(st.binary(max_size=2000))
def test_arbitrary_bytes(raw: bytes) -> None:
    harness().judge(raw)


@SETTINGS
@given(json_values)
def test_arbitrary_json(value: Any) -> None:
    harness().judge(json.dumps(value).encode())


@SETTINGS
@given(st.data())
def test_good_statement_with_one_part_replaced_or_deleted(data: st.DataObject) -> None:
    h = harness()
    doc = copy.deepcopy(h.good)
    where = data.draw(st.sampled_from(good_paths()))
    parent: Any = doc
    for part in where[:-1]:
        parent = parent[part]
    if data.draw(st.booleans()):
        del parent[where[-1]]
    else:
        parent[where[-1]] = data.draw(json_values)
    h.judge(json.dumps(doc).encode())


@pytest.mark.parametrize("text", [
    '{"predicate": {"benchmarks": [{"point": {"gpu": "NVIDIA H200", "tp": 1, "batch": 1, "context": 128, '
    '"dtype": "bfloat16"}, "not_run": "x"}]}}',
    '{"predicate": {"kernel_tests": [{"nodeid": "[", "outcome": "passed", "point": null}]}}',
    '{"predicate": {"environment": {"gpu_name": "x", "gpu_count": 0, "compute_capability": "1.0", '
    '"python": "3"}}}',
    '{"predicate": {"collected_at": "0001-01-01T00:00:00Z"}}',
    '{"predicate": {"collected_at": "9999-12-31T23:59:59Z"}}',
    '{"predicate": {"evals": [{"name": "e", "value": 1e308, "threshold": -1e308, "direction": "min"}]}}',
])
def test_edge_documents(text: str) -> None:
    harness().judge(text.encode())
