"""The measurement schema, one from the timing worker to the bundle.

What the timing protocol measures at a point (`fasttrack.evidence.timing` fills these models), what the
result stream carries (`fasttrack.evidence.stream`), what the collector takes into custody and merges over
ranks (`fasttrack.evidence.ranks`), and what the bundle's `Benchmark` holds (`fasttrack.evidence.bundle`
re-exports `Protocol`, `Variant`, `Accuracy`, `OracleCheck` and `RankInfo` from here) are the same models,
with the same field names and units: nothing is renamed or rounded on the way. Kernel counts are per layer,
rounded up (never understated), where they are counted; a sample below the timer's resolution (zero) is
dropped where it is taken, with a reason. `Measurement` is one pass's record of one point (one rank's, or
the merge of a tensor-parallel point's ranks); the collector turns its status into the bundle's
`not_run` / `rejected` (`collect.benchmark_entry`).

The bundle's format (`https://fasttrack.dev/evidence/v1`) is unchanged for statements written before: the
worker's facts that used to stay in the work dir (`Protocol.backend`, `timer_detail`, `device_sync`,
`seed_base`, `notes`, ...; `Variant.graph_nodes`, `collective_kernels`, `error`; `Accuracy.failures`) are
optional fields, and `Accuracy.max_abs_error` defaults to 0. These models are mutable (the worker fills
them while it measures); the bundle's own models around them stay frozen.
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

MAX_SAMPLES = 100_000  # per variant and point: far above any honest run, bounds verification time


class Measured(BaseModel):
    """Unknown keys are errors; NaN and infinities are errors."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, defer_build=True)


class Protocol(Measured):
    """How fasttrack timed a benchmark point (the harness owns timing, not the contribution)."""

    graph_replay: bool
    l2_flush_bytes: int = Field(ge=0)
    persisting_l2_reset: bool
    fresh_inputs: bool
    # Orders in which variants were interleaved, e.g. [["stock", "fused"], ["fused", "stock"]].
    orders: list[list[str]] = Field(default_factory=list)
    iterations: int = Field(ge=0)
    warmup: int = Field(ge=0)
    streams_synchronized: bool = True
    timer: str = Field(default="cuda-event", max_length=64)  # "cuda-event" or "perf_counter"
    # The worker's own account (None in statements written before the schema was one).
    backend: Literal["cuda", "cpu"] | None = None
    timer_detail: str | None = Field(default=None, max_length=512)
    device_sync: str | None = Field(default=None, max_length=512)
    poisoned_outputs: bool | None = None
    pristine_input_check: bool | None = None
    seed_base: int | None = None
    notes: list[Annotated[str, Field(max_length=4096)]] = Field(default_factory=list, max_length=64)


class Variant(Measured):
    """One implementation's raw timings at a point: `samples_us` are per-call times in microseconds.

    Further raw sample lists are allowed under keys named `samples_<unit>` (`samples_wall_us`: host wall
    time around each timed call; `samples_us_rank<r>`: rank r's own samples at tp > 1, where `samples_us`
    is their element-wise max). `bytes_moved` is what one GPU moves through HBM for one timed call; `gpus`
    is the GPU count the variant ran on; `per_gpu` says its samples are already normalised per GPU.
    """

    model_config = ConfigDict(extra="allow", allow_inf_nan=False, defer_build=True)

    samples_us: list[float] = Field(default_factory=list, max_length=MAX_SAMPLES)
    # Compute kernels per layer (from the captured graph, rounded up); collectives (NCCL, symmetric-memory)
    # are counted apart in `collectives_per_step` (None: not counted, e.g. kernel names unreadable).
    kernels_per_step: int | None = Field(default=None, ge=0)
    collectives_per_step: int | None = Field(default=None, ge=0)
    bytes_moved: float | None = Field(default=None, ge=0)
    gpus: int = Field(default=1, ge=1, le=4096)
    gpu: str | None = Field(default=None, max_length=128, description="GPU kind if not the point's gpu")
    per_gpu: bool = False
    # Who supplied the variant: the engine's baseline ("engine": stock, compile) or the contribution.
    origin: Literal["engine", "contribution"] | None = None
    # One profiled replay after timing: device time per kernel name (us). None: not profiled.
    kernel_times_us: dict[Annotated[str, Field(max_length=512)], Annotated[float, Field(ge=0)]] | None = \
        Field(default=None, max_length=4096)
    # The captured graph's nodes by type (not per layer) and its collective kernels by name; why the variant
    # has no samples (it could not be prepared). None: not counted / no error.
    graph_nodes: dict[str, int] | None = None
    collective_kernels: dict[Annotated[str, Field(max_length=512)], int] | None = Field(default=None,
                                                                                       max_length=4096)
    error: str | None = Field(default=None, max_length=8192)

    @field_validator("samples_us")
    @classmethod
    def _positive(cls, v: list[float]) -> list[float]:
        if any(s <= 0 for s in v):
            raise ValueError("samples must be positive times")
        return v

    @model_validator(mode="after")
    def _extra_samples_only(self) -> Variant:
        for key, value in (self.model_extra or {}).items():
            if not key.startswith("samples_"):
                raise ValueError(f"unknown key {key!r} (only samples_* lists may be added)")
            if not isinstance(value, list) or not all(
                isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x) for x in value
            ):
                raise ValueError(f"{key} must be a list of finite numbers")
        return self

    def samples(self) -> dict[str, list[float]]:
        """Every raw sample list, `samples_us` first."""
        out: dict[str, list[float]] = {"samples_us": list(self.samples_us)}
        for key, value in (self.model_extra or {}).items():
            out[key] = [float(x) for x in value]
        return out

    def put_samples(self, key: str, values: list[float]) -> None:
        """Set a further raw sample list (`samples_wall_us`, `samples_us_rank<r>`)."""
        if not key.startswith("samples_") or key == "samples_us":
            raise ValueError(f"{key!r} is not a further samples_* list")
        extra = self.__pydantic_extra__
        assert extra is not None  # extra="allow"
        extra[key] = [float(x) for x in values]


class Accuracy(Measured):
    """The timed run's outputs checked against stock's, in the mode that was timed."""

    max_abs_error: float = Field(default=0.0, ge=0)
    max_rel_error: float | None = Field(default=None, ge=0)
    atol: float = Field(ge=0)
    rtol: float = Field(ge=0)
    ok: bool
    checked: int = Field(default=1, ge=0, description="how many timed outputs were compared")
    failures: int | None = Field(default=None, ge=0, description="how many of those checks failed")
    reason: str | None = Field(default=None, max_length=4096, description="first failed check, if any")


class OracleCheck(Measured):
    """A variant's output on one fresh input against the engine baseline's fp32 oracle (the harness's own
    comparison, under the policy's tolerance cap for the point's dtype)."""

    max_abs_error: float | None = Field(default=None, ge=0)
    atol: float = Field(ge=0)
    rtol: float = Field(ge=0)
    ok: bool
    reason: str | None = Field(default=None, max_length=4096)


class RankInfo(Measured):
    """One rank's part of a tensor-parallel point. Its raw samples are the variant's `samples_us_rank<r>`."""

    rank: int = Field(ge=0, le=4095)
    status: Literal["ok", "rejected", "not_run"]
    rejected: list[str] = Field(default_factory=list, max_length=256)
    kernels_per_step: dict[str, int] = Field(default_factory=dict)  # variant -> compute kernels per layer
    collectives_per_step: dict[str, int] = Field(default_factory=dict)  # variant -> collectives per layer
    bytes_moved: dict[str, float] = Field(default_factory=dict)  # variant -> bytes this GPU moves per call


class Measurement(Measured):
    """One pass's record of one point: `status` and `reasons` are what the bundle writes as `not_run` (a
    point not measured) or `rejected` (a measured point a check failed)."""

    point: dict[str, Any]
    status: Literal["ok", "rejected", "not_run"]
    reasons: list[str] = Field(default_factory=list)
    protocol: Protocol | None = None
    variants: dict[str, Variant] = Field(default_factory=dict)
    accuracy: dict[str, Accuracy] = Field(default_factory=dict)
    layers: int | None = None
    # Tensor parallel: how many ranks ran the point; a rank's own record carries `rank`, the merge `ranks`.
    world_size: int = 1
    rank: int | None = None
    ranks: list[RankInfo] = Field(default_factory=list)
    oracle: dict[str, OracleCheck] = Field(default_factory=dict)
    # Who a not-run or rejected point is down to: "machine" (the engine's baseline has no case here),
    # "engine" (the baseline broke its contract), "contribution", or "harness". None: a measured point.
    not_run_by: Literal["machine", "engine", "contribution", "harness"] | None = None


def per_layer(nodes: int, layers: int) -> int:
    """Graph nodes per layer, rounded up: a count is never understated."""
    return math.ceil(nodes / max(layers, 1))


# The names the timing protocol has always used for these models (one model each, not a second schema).
CaseResult = Measurement
ProtocolFacts = Protocol
VariantResult = Variant
AccuracyResult = Accuracy
OracleResult = OracleCheck
RankSummary = RankInfo
