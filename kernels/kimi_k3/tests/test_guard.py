"""The envelope guard: decisions at every edge of the envelope and just outside it, the fallback counter,
the once-per-reason log line, and the manifest as the single source of truth."""

from __future__ import annotations

import dataclasses
import logging
import re
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from kimi_k3.guard import ENVELOPE, MANIFEST_PATH, METRIC_NAME, REASONS, Envelope, Guard
from kimi_k3.layer import DecodeMeta

INSIDE = DecodeMeta(
    batch=ENVELOPE.batch_min,
    max_context=ENVELOPE.context_max,
    tp=1,
    dtype="bfloat16",
    graph_mode="full",
    device_capability=(9, 0),
    device_name="NVIDIA H200",
)


def _guard() -> tuple[Guard, CollectorRegistry]:
    reg = CollectorRegistry()
    return Guard(registry=reg), reg


def _count(reg: CollectorRegistry, reason: str) -> float:
    value = reg.get_sample_value(METRIC_NAME, {"reason": reason})
    return 0.0 if value is None else value


EDGES = [
    # (change, expected reason or None for "inside"); the bounds are the manifest's (fasttrack.toml says why)
    ({"batch": ENVELOPE.batch_min}, None),
    ({"batch": ENVELOPE.batch_max}, None),
    ({"batch": ENVELOPE.batch_min - 1}, "batch"),
    ({"batch": ENVELOPE.batch_max + 1}, "batch"),
    ({"batch": 0}, "batch"),
    ({"max_context": ENVELOPE.context_min}, None),
    ({"max_context": ENVELOPE.context_max}, None),
    ({"max_context": ENVELOPE.context_min - 1}, "context"),
    ({"max_context": ENVELOPE.context_max + 1}, "context"),
    ({"max_context": 1}, "context"),
    ({"max_context": 0}, "context"),
    ({"tp": 4}, "tp"),
    ({"tp": 2}, None if 2 in ENVELOPE.tp else "tp"),
    ({"tp": 8}, "tp"),
    ({"device_capability": (10, 0)}, "gpu"),
    ({"device_capability": (8, 0)}, "gpu"),
    ({"device_name": "NVIDIA H100 80GB HBM3"}, "gpu"),
    ({"device_name": None}, None),
    ({"dtype": "float16"}, "dtype"),
    ({"dtype": "float8_e4m3fn"}, "dtype"),
    ({"num_prefill_rows": 1}, "mixed_prefill"),
    ({"graph_mode": "none"}, "graph_mode"),
    ({"graph_mode": "piecewise"}, "graph_mode"),
    ({"query_len": 2}, "spec_width"),
]


@pytest.mark.parametrize(
    ("change", "reason"), EDGES, ids=[f"{next(iter(c))}={next(iter(c.values()))}" for c, _ in EDGES]
)
def test_guard_decision_at_edges(change: dict[str, object], reason: str | None) -> None:
    guard, reg = _guard()
    meta = dataclasses.replace(INSIDE, **change)  # type: ignore[arg-type]
    decision = guard.decide(meta)
    assert decision.use_fused is (reason is None)
    assert decision.reason == reason
    if reason is not None:
        assert _count(reg, reason) == 1.0
    assert all(_count(reg, r) == 0.0 for r in REASONS if r != reason)


def test_counter_moves_and_logs_once_per_reason(caplog: pytest.LogCaptureFixture) -> None:
    guard, reg = _guard()
    mixed = dataclasses.replace(INSIDE, num_prefill_rows=3, batch=8)
    with caplog.at_level(logging.WARNING, logger="kimi_k3.guard"):
        for _ in range(5):
            assert guard.decide(mixed) == (False, "mixed_prefill")
        guard.decide(dataclasses.replace(INSIDE, batch=65))
        assert guard.decide(INSIDE).use_fused
    assert _count(reg, "mixed_prefill") == 5.0
    assert _count(reg, "batch") == 1.0
    lines = [r.getMessage() for r in caplog.records if r.name == "kimi_k3.guard"]
    assert sum("reason=mixed_prefill" in m for m in lines) == 1
    assert sum("reason=batch" in m for m in lines) == 1
    assert all(METRIC_NAME in m for m in lines)


def test_short_context_falls_back_with_reason_counted_and_logged(caplog: pytest.LogCaptureFixture) -> None:
    """Below the envelope's lower context edge the layer runs stock, visibly: counted and logged once."""
    guard, reg = _guard()
    short = dataclasses.replace(INSIDE, max_context=ENVELOPE.context_min - 1, batch=8)
    with caplog.at_level(logging.WARNING, logger="kimi_k3.guard"):
        for _ in range(3):
            assert guard.decide(short) == (False, "context")
        assert guard.decide(dataclasses.replace(short, max_context=ENVELOPE.context_min)).use_fused
    assert _count(reg, "context") == 3.0
    lines = [r.getMessage() for r in caplog.records if r.name == "kimi_k3.guard"]
    assert len(lines) == 1 and "reason=context" in lines[0]
    assert f"context={ENVELOPE.context_min - 1}" in lines[0]


def test_fused_unavailable_falls_back_visibly() -> None:
    guard, reg = _guard()
    assert guard.decide(INSIDE, fused_available=False) == (False, "fused_unavailable")
    assert _count(reg, "fused_unavailable") == 1.0


def test_check_has_no_side_effects() -> None:
    guard, reg = _guard()
    assert guard.check(dataclasses.replace(INSIDE, tp=4)) == (False, "tp")
    assert _count(reg, "tp") == 0.0


def test_envelope_is_read_from_the_manifest() -> None:
    from fasttrack.manifest import load_manifest

    manifest = load_manifest(MANIFEST_PATH)
    env = manifest.envelope
    assert ENVELOPE.batch_min == env.batch.min and ENVELOPE.batch_max == env.batch.max
    assert ENVELOPE.context_min == env.context.min and ENVELOPE.context_max == env.context.max
    assert ENVELOPE.tp == frozenset(env.tp)
    assert ENVELOPE.dtypes == frozenset(env.dtypes)
    assert ENVELOPE.cuda_graph == env.cuda_graph
    assert ENVELOPE.gpu_names == frozenset(h.name for h in env.hardware)
    assert manifest.fallback.metric == METRIC_NAME


def test_a_different_manifest_moves_the_edges(tmp_path: Path) -> None:
    text = re.sub(r"(?m)^tp = \[.*\]$", "tp = [1, 2, 4]", MANIFEST_PATH.read_text())
    text = text.replace("max = 64", "max = 32")
    path = tmp_path / "fasttrack.toml"
    path.write_text(text)
    env = Envelope.from_manifest(path)
    guard = Guard(envelope=env, registry=CollectorRegistry())
    assert guard.decide(dataclasses.replace(INSIDE, tp=4)).use_fused
    assert guard.decide(dataclasses.replace(INSIDE, batch=33)) == (False, "batch")
