"""The measurement schema: what the timing worker measures at one point, what the result stream carries,
what the collector takes into custody and merges across ranks, and what the bundle's benchmarks are built
from (`to_benchmark`).

`CaseResult` (alias `Measurement`) is one pass's record of one point (one rank's, or the merge of a
tensor-parallel point's ranks); `fasttrack.evidence.timing` fills it, `fasttrack.evidence.stream` carries it
(with the samples streamed one by one beside it), `fasttrack.evidence.ranks` merges it.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ProtocolFacts(_Model):
    """How the samples were taken; written beside them so a reader knows what they mean."""

    backend: Literal["cuda", "cpu"]
    timer: str
    graph_replay: bool
    l2_flush_bytes: int
    persisting_l2_reset: bool
    fresh_inputs: bool = True
    poisoned_outputs: bool = True
    pristine_input_check: bool = True
    device_sync: str
    orders: list[list[str]]
    iterations: int
    warmup: int
    seed_base: int
    notes: list[str] = Field(default_factory=list)


class VariantResult(_Model):
    samples_us: list[float] = Field(default_factory=list)
    samples_wall_us: list[float] | None = None
    kernels_per_step: float | None = None  # compute kernels (collectives are counted apart)
    collectives_per_step: float | None = None  # NCCL / symmetric-memory kernels in the graph
    collective_kernels: dict[str, int] | None = None  # those kernels by name (graph nodes, not per layer)
    graph_nodes: dict[str, int] | None = None
    bytes_moved: float | None = None
    gpus: int = 1
    error: str | None = None
    # Tensor parallel (merged result): every rank's own samples; `samples_us` is their element-wise max.
    samples_us_by_rank: list[list[float]] | None = None
    # One profiled replay after timing: device time per kernel name (us), summed over launches. None: the
    # backend cannot profile (CPU) or the profiler failed.
    kernel_times_us: dict[str, float] | None = None
    origin: Literal["engine", "contribution"] | None = None  # who supplied the variant (None: a bare case)


class OracleResult(_Model):
    """A variant's output on one fresh input against the baseline's fp32 oracle on the same input."""

    max_abs_error: float | None = None
    atol: float
    rtol: float
    ok: bool
    reason: str | None = None


class AccuracyResult(_Model):
    max_abs_error: float | None = None
    atol: float
    rtol: float
    ok: bool
    checks: int = 0
    failures: int = 0
    reason: str | None = None


class RankSummary(_Model):
    """One rank's part of a tensor-parallel point (kept beside the merged numbers)."""

    rank: int
    status: Literal["ok", "rejected", "not_run"]
    reasons: list[str] = Field(default_factory=list)
    graph_kernels: dict[str, int] = Field(default_factory=dict)  # variant -> compute kernel nodes
    graph_collectives: dict[str, int] = Field(default_factory=dict)  # variant -> collective kernel nodes
    bytes_moved: dict[str, float] = Field(default_factory=dict)  # variant -> bytes this GPU moved per call


class CaseResult(_Model):
    point: dict[str, Any]
    status: Literal["ok", "rejected", "not_run"]
    reasons: list[str] = Field(default_factory=list)
    protocol: ProtocolFacts | None = None
    variants: dict[str, VariantResult] = Field(default_factory=dict)
    accuracy: dict[str, AccuracyResult] = Field(default_factory=dict)
    layers: int | None = None
    # Tensor parallel: how many ranks ran the point; a rank's own file carries `rank`, the merged one `ranks`.
    world_size: int = 1
    rank: int | None = None
    ranks: list[RankSummary] = Field(default_factory=list)
    oracle: dict[str, OracleResult] = Field(default_factory=dict)
    # Who a not-run or rejected point is down to: "machine" (the engine's baseline has no case here),
    # "engine" (the baseline broke its contract), "contribution", or "harness". None: a measured point.
    not_run_by: Literal["machine", "engine", "contribution", "harness"] | None = None


Measurement = CaseResult
