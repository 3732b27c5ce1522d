"""The domain's small value types, shared from the manifest to the report: an envelope `Point` (one key
format), the collection `Phase`s, the reference `Variant` names, and the statuses of a changed file and of
an envelope point.

Imports nothing of fasttrack (the bottom layer). The evidence harness (`fasttrack/evidence/`) keeps its own
copies of the point key and the variant names, since its digest is bound into signed evidence;
`tests/test_domain.py` checks that they agree with these.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Final

POINT_FIELDS: Final = ("gpu", "tp", "batch", "context", "dtype")


@dataclass(frozen=True, order=True)
class Point:
    """One envelope point: GPU kind, tensor-parallel size, batch, context length, dtype."""

    gpu: str
    tp: int
    batch: int
    context: int
    dtype: str

    def key(self) -> str:
        """The one key format: `gpu|tp<n>|b<batch>|c<context>|dtype` (bundles and verdicts match by it)."""
        return f"{self.gpu}|tp{self.tp}|b{self.batch}|c{self.context}|{self.dtype}"

    def label(self) -> str:
        """The point for a reader: `NVIDIA H200 TP1 batch 8 context 4096 bfloat16`."""
        return f"{self.gpu} TP{self.tp} batch {self.batch} context {self.context} {self.dtype}".strip()

    def short(self) -> str:
        """Without the GPU, for tables of one machine: `tp1 b8 c4096 bfloat16`."""
        return f"tp{self.tp} b{self.batch} c{self.context} {self.dtype}"

    def test_id(self) -> str:
        """A shell-safe pytest id: `NVIDIA_H200-tp1-b2-c4096-bfloat16`."""
        gpu = re.sub(r"[^A-Za-z0-9.]+", "_", self.gpu).strip("_") or "gpu"
        dtype = re.sub(r"[^A-Za-z0-9.]+", "_", self.dtype).strip("_")
        return f"{gpu}-tp{self.tp}-b{self.batch}-c{self.context}-{dtype}"

    def as_dict(self) -> dict[str, str | int]:
        return {"gpu": self.gpu, "tp": self.tp, "batch": self.batch, "context": self.context,
                "dtype": self.dtype}

    @classmethod
    def parse_key(cls, key: str) -> Point:
        """The inverse of `key()`; ValueError naming what is wrong."""
        parts = key.rsplit("|", 4)
        if len(parts) != 5:
            raise ValueError(f"point key {key!r}: expected gpu|tp<n>|b<batch>|c<context>|dtype")
        gpu, tp, batch, context, dtype = parts
        for text, prefix, name in ((tp, "tp", "tp"), (batch, "b", "batch"), (context, "c", "context")):
            if not text.startswith(prefix) or not text[len(prefix):].isdigit():
                raise ValueError(f"point key {key!r}: {name} must be {prefix}<n>")
        return cls(gpu=gpu, tp=int(tp[2:]), batch=int(batch[1:]), context=int(context[1:]), dtype=dtype)

    @classmethod
    def from_record(cls, d: Mapping[str, object]) -> Point:
        """A point as a verdict or a report records it (`{"gpu": ..., "tp": ..., ...}`), read leniently: a
        missing or non-numeric number reads as 0 (tp as 1), a missing name as "?" (gpu) or "" (dtype)."""
        def num(name: str, default: int) -> int:
            v = d.get(name)
            if isinstance(v, int):
                return v
            if isinstance(v, str) and v.strip().lstrip("-").isdigit():
                return int(v)
            return default

        return cls(gpu=str(d.get("gpu", "?")), tp=num("tp", 1), batch=num("batch", 0),
                   context=num("context", 0), dtype=str(d.get("dtype", "")))


class Phase(StrEnum):
    """The phases of an evidence collection, in the order they run."""

    TESTS = "tests"
    BENCH = "bench"
    EVALS = "evals"
    SANITIZER = "sanitizer"


class Variant(StrEnum):
    """The reference variants a candidate is measured against (the engine's own code paths)."""

    STOCK = "stock"
    COMPILE = "compile"  # torch.compile(mode="max-autotune") of stock: what a user would pick instead


REFERENCE_VARIANTS: Final = frozenset(v.value for v in Variant)


class ChangeStatus(StrEnum):
    ADDED = "added"
    MODIFIED = "modified"
    DELETED = "deleted"
    RENAMED = "renamed"
    COPIED = "copied"
    TYPE_CHANGED = "type-changed"  # file <-> symlink <-> submodule
    MODE_CHANGED = "mode-changed"


class PointStatus(StrEnum):
    PASSED = "passed"
    FAILED = "failed"
    MISSING = "missing"
    STALE = "stale"
