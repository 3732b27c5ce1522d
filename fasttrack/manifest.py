"""The contribution manifest (`fasttrack.toml` in the contribution directory): who it is, where it lands in
the engine, the envelope it supports, its fallback, the evidence suite it runs and the claims it makes.

Schema validation here is structural (types, unknown keys, ranges that are self-evidently wrong). Whether
the envelope fits the *policy* is judged by the envelope rules (FT2xx), so a PR gets findings, not a crash.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from fasttrack.domain import Point
from fasttrack.loading import load_toml_model

MANIFEST_FILE = "fasttrack.toml"


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)


class Hardware(Strict):
    name: str = Field(min_length=1, description="GPU name as torch.cuda.get_device_name reports it")
    compute_capability: str = Field(pattern=r"^\d{1,2}\.\d$")


class IntRange(Strict):
    min: int = Field(ge=1)
    max: int = Field(ge=1)

    @model_validator(mode="after")
    def _ordered(self) -> IntRange:
        if self.min > self.max:
            raise ValueError(f"min ({self.min}) is greater than max ({self.max})")
        return self

    def contains(self, value: int) -> bool:
        return self.min <= value <= self.max


MAX_GRID_POINTS = 16384  # a resource bound: 4x the policy default FT209 enforces (each point is measured)


class Envelope(Strict):
    """The deployments the contribution supports. Outside them the code must fall back to stock."""

    hardware: list[Hardware] = Field(min_length=1)
    tp: list[int] = Field(min_length=1)
    pp: list[int] = Field(default_factory=lambda: [1])
    expert_parallel: bool = False
    batch: IntRange
    context: IntRange
    dtypes: list[str] = Field(min_length=1)
    cuda_graph: Literal["full", "piecewise", "none"]
    # Query rows per request in speculative-decoding verification (1 + draft tokens); [1] means no spec.
    spec_decode_widths: list[int] = Field(default_factory=lambda: [1])
    mixed_prefill_decode: bool = False
    # Grid sample points used by evidence collection (each must lie inside the ranges above).
    # Batch 1, 2 and batch.max are always added by the collector, whatever is listed here.
    grid_batches: list[int] = Field(default_factory=list)
    grid_contexts: list[int] = Field(default_factory=list)

    @field_validator("tp", "pp", "spec_decode_widths")
    @classmethod
    def _positive_unique(cls, values: list[int]) -> list[int]:
        if any(v < 1 for v in values):
            raise ValueError("values must be >= 1")
        if len(set(values)) != len(values):
            raise ValueError("values must be unique")
        return values

    @model_validator(mode="after")
    def _grid_bounded(self) -> Envelope:
        # Every grid point is collected on a GPU: a real envelope has dozens, the policy allows a few thousand
        # (FT209). 10^6 points made verify expand and check them for minutes in over a GiB (the evidence
        # rules cost about a millisecond a point), so beyond this bound the manifest is not read at all.
        size = (len(self.hardware) * len(self.tp) * (len(set(self.grid_batches)) + 4)
                * (len(set(self.grid_contexts)) + 2) * len(self.dtypes))
        if size > MAX_GRID_POINTS:
            raise ValueError(f"the grid (hardware x tp x batches x contexts x dtypes) has up to {size} "
                             f"points, over the cap of {MAX_GRID_POINTS}: list fewer grid_batches or "
                             "grid_contexts")
        return self

    @model_validator(mode="after")
    def _grid_inside(self) -> Envelope:
        for b in self.grid_batches:
            if not self.batch.contains(b):
                raise ValueError(
                    f"grid_batches value {b} is outside batch {self.batch.min}..{self.batch.max}")
        for c in self.grid_contexts:
            if not self.context.contains(c):
                raise ValueError(
                    f"grid_contexts value {c} is outside context {self.context.min}..{self.context.max}"
                )
        return self

    def batches(self) -> list[int]:
        """The grid's batch sizes: declared points plus 1, 2 and the maximum, always."""
        pts = set(self.grid_batches) | {self.batch.min, self.batch.max}
        pts |= {b for b in (1, 2) if self.batch.contains(b)}
        return sorted(pts)

    def contexts(self) -> list[int]:
        pts = set(self.grid_contexts) | {self.context.min, self.context.max}
        return sorted(pts)

    def points(self) -> list[EnvelopePoint]:
        """Expand the envelope into its grid (hardware x TP x batch x context x dtype)."""
        return [
            EnvelopePoint(gpu=hw.name, tp=tp, batch=b, context=c, dtype=dt)
            for hw, tp, b, c, dt in itertools.product(
                self.hardware, self.tp, self.batches(), self.contexts(), self.dtypes
            )
        ]


class EnvelopePoint(Strict):
    """One point of the grid, with plain keys any tool can read."""

    gpu: str
    tp: int
    batch: int
    context: int
    dtype: str

    def point(self) -> Point:
        return Point(gpu=self.gpu, tp=self.tp, batch=self.batch, context=self.context, dtype=self.dtype)

    def key(self) -> str:
        return self.point().key()


class Fallback(Strict):
    """How the contribution falls back outside its envelope, and where operators see it."""

    metric: str = Field(pattern=r"^[a-zA-Z_:][a-zA-Z0-9_:]*$", description="Prometheus counter name")
    stock_path: str = Field(min_length=1, description="module:callable of the stock implementation")
    guard: str = Field(min_length=1, description="module:callable that decides per call")
    log_reasons: bool = True


class EvidenceSuite(Strict):
    """What `fasttrack collect` runs (paths relative to the contribution directory)."""

    kernel_tests: list[str] = Field(min_length=1)
    sanitizer_tests: list[str] = Field(default_factory=list)
    # Test functions (`tests/test_x.py::test_name`) that must run, pass and record their error at every
    # envelope point (FT340): the per-point comparisons with the engine's oracle.
    point_tests: list[str] = Field(default_factory=list)
    # module:callable `candidates(baseline, point) -> {name: callable}`: the contribution's variants, built
    # on the engine baseline's state (docs/baseline-contract.md; stock, oracle and inputs are the engine's)
    benchmark: str | None = None
    # module:callable running the model-level evals (see fasttrack.evidence.contract)
    evals: str | None = None
    lm_eval_results: list[str] = Field(default_factory=list)


class TraceCalls(Strict):
    """What the effect trace calls after importing the contribution's changed modules (in its sandbox, on
    CPU, effects recorded and attributed like import-time ones): a zero-argument smoke callable that runs
    the code on tiny inputs, and the guard (`[fallback] guard`) on points fasttrack builds from the envelope,
    each turned into the guard's argument by `guard_input(point)`."""

    smoke: str = Field(min_length=1, description="module:callable, no arguments, tiny CPU shapes, seconds")
    guard_input: str | None = Field(default=None, description="module:callable, an envelope point (a dict: "
                                    "gpu, compute_capability, tp, batch, context, dtype, cuda_graph) -> the "
                                    "guard's argument")


class Claim(Strict):
    """A performance claim; verification recomputes it from raw samples, never trusts the number."""

    name: str = Field(pattern=r"^[a-z0-9_.-]+$")
    baseline: str = Field(default="stock")
    candidate: str = Field(default="fused")
    min_speedup: float = Field(gt=0)
    gpu: str
    gpus: int = Field(default=1, ge=1, description="GPU count on both sides (like with like)")
    tp: int = 1
    batch: int
    context: int
    dtype: str = "bfloat16"


class ContributionInfo(Strict):
    name: str = Field(pattern=r"^[a-z][a-z0-9_]{0,63}$", description="evidence/<name>/ holds its bundle")
    model: str = Field(pattern=r"^[a-z][a-z0-9_]{0,63}$")
    title: str = ""
    maintainers: list[str] = Field(default_factory=list)
    # Where these files land in the engine tree, e.g. vllm/models/kimi_k3/nvidia/specialized_decode.
    target_path: str = Field(min_length=1)
    # The torch op namespace the contribution owns (torch.ops.<ns>.*); defaults to the model name.
    op_namespace: str | None = Field(default=None, pattern=r"^[a-z_][a-z0-9_]{0,63}$")

    @property
    def own_op_namespace(self) -> str:
        return self.op_namespace or self.model

    @field_validator("target_path")
    @classmethod
    def _relative(cls, v: str) -> str:
        if v.startswith("/") or ".." in Path(v).parts:
            raise ValueError("target_path must be a relative path inside the engine tree")
        return v.rstrip("/")


class Manifest(Strict):
    schema_version: Literal[1]
    contribution: ContributionInfo
    envelope: Envelope
    fallback: Fallback
    evidence: EvidenceSuite
    trace: TraceCalls | None = None
    claims: list[Claim] = Field(default_factory=list)

    @model_validator(mode="after")
    def _unique_claims(self) -> Manifest:
        names = [c.name for c in self.claims]
        if len(names) != len(set(names)):
            raise ValueError("claim names must be unique")
        return self


def load_manifest(path: Path) -> Manifest:
    if path.is_dir():
        path = path / MANIFEST_FILE
    return load_toml_model(path, Manifest, "manifest")
