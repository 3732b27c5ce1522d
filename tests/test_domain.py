"""fasttrack.domain: one Point with one key format, and the names the harness keeps its own copies of.

The evidence harness (fasttrack/evidence/, digest-bound) formats keys and ids itself; these tests hold it
to the domain's format so the two cannot drift apart silently."""

from __future__ import annotations

import dataclasses

import pytest

from fasttrack.domain import REFERENCE_VARIANTS, ChangeStatus, Phase, Point, PointStatus, Variant
from fasttrack.evidence import analysis, bundle, collect, pytest_plugin
from fasttrack.manifest import EnvelopePoint
from fasttrack.verdict import ChangeStatus as VerdictChangeStatus
from fasttrack.verdict import PointStatus as VerdictPointStatus

P = Point(gpu="NVIDIA H200", tp=2, batch=8, context=4096, dtype="bfloat16")


def test_point_is_frozen_hashable_and_ordered() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        P.tp = 4  # type: ignore[misc]
    assert len({P, Point(**P.as_dict()), dataclasses.replace(P, batch=16)}) == 2  # type: ignore[arg-type]
    assert sorted([dataclasses.replace(P, batch=16), P]) == [P, dataclasses.replace(P, batch=16)]


def test_one_key_format_everywhere() -> None:
    key = "NVIDIA H200|tp2|b8|c4096|bfloat16"
    assert P.key() == key
    assert EnvelopePoint(**P.as_dict()).key() == key  # type: ignore[arg-type]
    assert EnvelopePoint(**P.as_dict()).point() == P  # type: ignore[arg-type]
    # the harness's own formatters (not edited: their digest is bound into the evidence)
    assert bundle.Point(**P.as_dict()).key() == key  # type: ignore[arg-type]
    assert analysis.point_key(bundle.Point(**P.as_dict())) == key  # type: ignore[arg-type]
    assert collect.point_key(P.as_dict()) == key
    assert pytest_plugin.point_id(P.as_dict()) == P.test_id() == "NVIDIA_H200-tp2-b8-c4096-bfloat16"


def test_a_key_reads_back_and_a_bad_one_says_why() -> None:
    assert Point.parse_key(P.key()) == P
    assert Point.parse_key("gpu|with|bars|tp1|b1|c1|fp8").gpu == "gpu|with|bars"  # the GPU name may hold |
    with pytest.raises(ValueError, match="batch must be b<n>"):
        Point.parse_key("NVIDIA H200|tp1|8|c1|bf16")
    with pytest.raises(ValueError, match="expected gpu"):
        Point.parse_key("NVIDIA H200")


def test_a_recorded_point_is_read_leniently() -> None:
    assert Point.from_record(P.as_dict()) == P
    got = Point.from_record({"gpu": "G", "tp": "2", "batch": "x", "dtype": "fp8"})
    assert got == Point("G", 2, 0, 0, "fp8")
    assert Point.from_record({}) == Point("?", 1, 0, 0, "")


def test_names_agree_with_the_harness() -> None:
    assert bundle.STOCK_VARIANT == Variant.STOCK and bundle.COMPILE_VARIANT == Variant.COMPILE
    assert bundle.REFERENCE_VARIANTS == REFERENCE_VARIANTS
    assert tuple(Phase) == collect.PHASES
    assert VerdictChangeStatus is ChangeStatus and VerdictPointStatus is PointStatus
