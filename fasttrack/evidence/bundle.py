"""The evidence bundle's schema: an in-toto Statement v1 whose predicate is fasttrack's own.

A bundle is a directory `evidence/<contribution>/` holding

* `statement.json`: the Statement below (`Statement.to_json_bytes()` writes it),
* `statement.json.sig`: an SSH signature over statement.json's bytes (namespace `fasttrack-evidence`),
* raw logs (`pytest.log`, `bench.log`, ...), each bound by its sha256 in `predicate.logs`.

Every envelope point is written with plain keys (`gpu`, `tp`, `batch`, `context`, `dtype`) and raw timing
samples are lists under keys named `samples_*` (`samples_us` is required), so any tool can read them.

Strictness: unknown keys are rejected everywhere (except `extra` maps and further `samples_*` lists), numbers
must be finite. The predicate's sections carry defaults only so the loader can salvage a damaged bundle
section by section; the collector writes every section, and a section the file leaves out is reported by the
loader as a schema problem (see `REQUIRED_PREDICATE_FIELDS`).
"""

from __future__ import annotations

import json
import math
import re
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator, model_validator

# The measurement schema, one from the timing worker to the bundle (`fasttrack.evidence.measurement`).
from fasttrack.evidence.measurement import (
    MAX_SAMPLES,
    Accuracy,
    OracleCheck,
    Protocol,
    RankInfo,
    Variant,
)

__all__ = ["MAX_SAMPLES", "Accuracy", "OracleCheck", "Protocol", "RankInfo", "Variant"]

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE = "https://fasttrack.dev/evidence/v1"
SIGNATURE_NAMESPACE = "fasttrack-evidence"
STATEMENT_FILE = "statement.json"
SIGNATURE_FILE = "statement.json.sig"
# The variant every candidate is compared against, and reference variants that are not candidates.
STOCK_VARIANT = "stock"
COMPILE_VARIANT = "compile"  # torch.compile(mode="max-autotune") of stock: what a user would pick instead
REFERENCE_VARIANTS = frozenset({"stock", "compile"})
SANITIZER_TOOLS = ("memcheck", "racecheck", "synccheck", "initcheck")

SHA256_HEX = r"^[0-9a-f]{64}$"



def _relative_path(name: str) -> str:
    if not name or name.startswith("/") or "\\" in name or "\0" in name or ".." in name.split("/"):
        raise ValueError(f"{name!r} must be a relative path with / separators")
    return name


def _finite_json(value: Any) -> Any:
    """Reject NaN and infinities anywhere inside free-form JSON (lm_eval results, eval details)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            raise ValueError("NaN and infinities are not allowed")
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return value


RelPath = Annotated[str, AfterValidator(_relative_path)]
FiniteJson = Annotated[Any, AfterValidator(_finite_json)]
Sha256Hex = Annotated[str, Field(pattern=SHA256_HEX)]

# Scalars allowed in free-form `extra` maps (kept flat so every tool can read them).
Scalar = str | int | float | bool | None


class Strict(BaseModel):
    """Unknown keys are errors; NaN and infinities are errors; models are immutable."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False, defer_build=True)


class Point(Strict):
    """One envelope point, with the same plain keys as `fasttrack.manifest.EnvelopePoint`."""

    gpu: str = Field(min_length=1, max_length=128, description="GPU name as torch reports it")
    tp: int = Field(ge=1, le=1024)
    batch: int = Field(ge=1, le=1 << 30)
    context: int = Field(ge=1, le=1 << 40)
    dtype: str = Field(min_length=1, max_length=64)

    def key(self) -> str:
        """Same format as `EnvelopePoint.key()`, so the two can be matched by key."""
        return f"{self.gpu}|tp{self.tp}|b{self.batch}|c{self.context}|{self.dtype}"

    def as_dict(self) -> dict[str, str | int]:
        return {"gpu": self.gpu, "tp": self.tp, "batch": self.batch, "context": self.context,
                "dtype": self.dtype}


class Subject(Strict):
    """in-toto subject: the contribution, named, with its content digest (see `fasttrack.evidence.digest`)."""

    name: str = Field(min_length=1, max_length=256)
    digest: dict[str, str]

    @field_validator("digest")
    @classmethod
    def _has_sha256(cls, v: dict[str, str]) -> dict[str, str]:
        if "sha256" not in v:
            raise ValueError("digest must contain a 'sha256' entry")
        for alg, hexdigest in v.items():
            if not re.fullmatch(r"[0-9a-f]+", hexdigest):
                raise ValueError(f"digest {alg!r} must be lowercase hex")
        if not re.fullmatch(SHA256_HEX, v["sha256"]):
            raise ValueError("digest 'sha256' must be 64 lowercase hex characters")
        return v


class Collector(Strict):
    fasttrack_version: str = Field(min_length=1, max_length=64)
    command: str = Field(max_length=4096, description="the command line that collected the bundle")
    hostname: str = Field(default="", max_length=256)
    # The digest of the harness modules that ran (`fasttrack.evidence.harness`; FT402 checks it against the
    # policy) and the engine commit the collection was based on. None only in statements written before.
    harness_digest: str | None = Field(default=None, pattern=SHA256_HEX)
    engine_base_commit: str | None = Field(default=None, pattern=r"^[0-9a-f]{40}([0-9a-f]{24})?$")
    # Where each part of the predicate came from (`environment` and each phase that ran): "this-run" when the
    # collecting process read it right after the phase that produced it, before any other contribution code
    # ran; "resumed" when it was read back from the work dir of an earlier run, where contribution code of
    # later phases could have rewritten it (FT349). None only in statements written before custody existed.
    custody: dict[Literal["environment", "tests", "bench", "evals", "sanitizer"],
                  Literal["this-run", "resumed"]] | None = None


class BaselineRecord(Strict):
    """The engine-side baseline the benchmarks and oracle checks were measured against."""

    model: str = Field(min_length=1, max_length=64)
    root: RelPath
    case: str = Field(min_length=1, max_length=512)
    digest: Sha256Hex
    files: dict[RelPath, Sha256Hex] = Field(default_factory=dict)


class Environment(Strict):
    """The machine the evidence came from. One bundle = one machine kind (one GPU name)."""

    gpu_name: str = Field(min_length=1, max_length=128)
    gpu_count: int = Field(ge=0, le=4096)
    compute_capability: str = Field(pattern=r"^\d{1,2}\.\d$")
    driver: str | None = Field(default=None, max_length=64)
    cuda: str | None = Field(default=None, max_length=64)
    torch: str | None = Field(default=None, max_length=64)
    triton: str | None = Field(default=None, max_length=64)
    python: str = Field(min_length=1, max_length=64)
    # Read-only clock readings, e.g. {"sm_mhz": 1980, "mem_mhz": 3201, "sm_max_mhz": 1980}.
    clocks: dict[str, Scalar] = Field(default_factory=dict)
    # How several GPUs are linked (e.g. `nvidia-smi topo -m` output); None for one GPU.
    interconnect: str | None = Field(default=None, max_length=65536)
    l2_bytes: int | None = Field(default=None, ge=0, le=1 << 40)
    # Device-to-device copy bandwidth the collector measured: the practical roofline.
    copy_bandwidth_bytes_per_s: float | None = Field(default=None, gt=0)
    # Read-only streaming bandwidth measured in the same run (a read-dominated layer's roofline).
    read_bandwidth_bytes_per_s: float | None = Field(default=None, gt=0)
    extra: dict[str, Scalar] = Field(default_factory=dict)


Outcome = Literal["passed", "failed", "skipped", "error"]


class KernelTest(Strict):
    """One kernel-test result at one envelope point (None for a test not parametrized by point)."""

    nodeid: str = Field(min_length=1, max_length=4096)
    point: Point | None = None
    outcome: Outcome
    max_error: float | None = Field(default=None, ge=0)
    tolerance: float | None = Field(default=None, ge=0)
    duration_s: float | None = Field(default=None, ge=0)
    message: str | None = Field(default=None, max_length=65536, description="failure/skip reason, short")
    extra: dict[str, Scalar] = Field(default_factory=dict)


class Benchmark(Strict):
    """One point's timings. At tp = n > 1 the point ran as n ranks in lockstep (`world_size`): each
    variant's `samples_us` is the element-wise max over the ranks (every rank's own list is kept as
    `samples_us_rank<r>`), a failed check on any rank rejects the point, `kernels_per_step` is rank 0's,
    `bytes_moved` the largest per-GPU shard, and `ranks` keeps each rank's own figures."""

    point: Point
    protocol: Protocol | None = None
    variants: dict[str, Variant] = Field(default_factory=dict)
    accuracy: dict[str, Accuracy] = Field(default_factory=dict)
    layers: int = Field(default=1, ge=1)
    not_run: str | None = Field(default=None, max_length=4096, description="why the point was not timed")
    # Why the collector's timing protocol rejected this point's measurement (a failed accuracy or input
    # check, a timer replaced, the persisting-L2 carve-out raised, ...). A rejected point supports no claim.
    rejected: list[str] = Field(default_factory=list, max_length=256)
    world_size: int | None = Field(default=None, ge=1, le=4096, description="ranks that ran the point")
    ranks: list[RankInfo] = Field(default_factory=list, max_length=4096)
    oracle: dict[str, OracleCheck] = Field(default_factory=dict)
    # Who a not-run or rejected point is down to (see timing.CaseResult.not_run_by). "machine" is the only
    # reason a point inside the envelope may go untimed without failing coverage.
    not_run_by: Literal["machine", "engine", "contribution", "harness"] | None = None
    # Stage -> backend the collector read off stock's kernel names (verify recomputes it).
    backends: dict[str, str | None] = Field(default_factory=dict)
    # "engine-process": stock (and the engine's extra variants) in `variants` were timed by the engine's own
    # pass, a process that never imported the contribution; `stock_beside` is stock as the contribution's
    # process timed it, interleaved with the candidates. FT347 requires both and compares their medians.
    separation: Literal["engine-process"] | None = None
    stock_beside: Variant | None = None

    @model_validator(mode="after")
    def _run_or_reason(self) -> Benchmark:
        if self.not_run is None:
            if self.protocol is None:
                raise ValueError("a timed benchmark needs its protocol")
            if STOCK_VARIANT not in self.variants:
                raise ValueError(f"a timed benchmark needs a {STOCK_VARIANT!r} variant")
        return self


class Eval(Strict):
    """A model-level eval: direction "max" means value <= threshold passes, "min" means value >= it."""

    name: str = Field(min_length=1, max_length=256)
    value: float
    threshold: float
    direction: Literal["max", "min"]
    detail: str | dict[str, FiniteJson] | None = None
    point: Point | None = None
    tp: int | None = Field(default=None, ge=1, description="the tensor-parallel size the eval ran at")

    def passed(self) -> bool:
        return self.value <= self.threshold if self.direction == "max" else self.value >= self.threshold


class Sanitizer(Strict):
    tool: Literal["memcheck", "racecheck", "synccheck", "initcheck"]
    ran: bool
    errors: int | None = Field(default=None, ge=0)
    summary: str = Field(default="", max_length=65536)
    tests: list[str] = Field(default_factory=list)
    reason: str | None = Field(default=None, max_length=4096, description="why it did not run")
    tp: int | None = Field(default=None, ge=1, description="the tensor-parallel size it ran at")


class Predicate(Strict):
    """fasttrack's evidence predicate (`https://fasttrack.dev/evidence/v1`)."""

    contribution: str | None = Field(default=None, max_length=64)
    model: str | None = Field(default=None, max_length=64)
    manifest_sha256: str | None = Field(default=None, pattern=SHA256_HEX)
    # The subject's file list {relpath: sha256}, so a stale bundle can say which files changed.
    files: dict[RelPath, Sha256Hex] = Field(default_factory=dict)
    collected_at: datetime | None = None
    collector: Collector | None = None
    environment: Environment | None = None
    kernel_tests: list[KernelTest] = Field(default_factory=list)
    benchmarks: list[Benchmark] = Field(default_factory=list)
    evals: list[Eval] = Field(default_factory=list)
    lm_eval: list[dict[str, FiniteJson]] = Field(default_factory=list)
    sanitizer: list[Sanitizer] = Field(default_factory=list)
    # Raw log files stored beside statement.json: {filename: sha256}.
    logs: dict[RelPath, Sha256Hex] = Field(default_factory=dict)
    # The engine's baseline the benchmarks ran against (None: a statement from before baselines existed).
    baseline: BaselineRecord | None = None

    @field_validator("collected_at")
    @classmethod
    def _aware(cls, v: datetime | None) -> datetime | None:
        if v is not None and (v.tzinfo is None or v.utcoffset() is None):
            raise ValueError("collected_at must carry a timezone (ISO 8601, e.g. 2026-11-30T12:00:00Z)")
        return v


# Predicate fields a complete bundle must carry (the loader reports each one that is absent).
REQUIRED_PREDICATE_FIELDS: tuple[str, ...] = (
    "contribution", "model", "manifest_sha256", "files", "collected_at", "collector", "environment",
    "kernel_tests", "benchmarks", "evals", "sanitizer", "logs",
)
REQUIRED_STATEMENT_FIELDS: tuple[str, ...] = ("type", "subject", "predicate_type", "predicate")


class Statement(Strict):
    """An in-toto Statement v1 (`_type`, `subject`, `predicateType`, `predicate`)."""

    type: Literal["https://in-toto.io/Statement/v1"] | None = Field(default=None, alias="_type")
    subject: list[Subject] = Field(default_factory=list, max_length=16)
    predicate_type: Literal["https://fasttrack.dev/evidence/v1"] | None = Field(
        default=None, alias="predicateType")
    predicate: Predicate = Field(default_factory=Predicate)

    @property
    def subject_digest(self) -> str | None:
        """The first subject's sha256 (the contribution's content digest)."""
        return self.subject[0].digest["sha256"] if self.subject else None

    def to_json_bytes(self) -> bytes:
        """The bytes to write as statement.json (and sign): sorted keys, UTF-8, trailing newline."""
        data = self.model_dump(mode="json", by_alias=True, exclude_none=False)
        text = json.dumps(data, sort_keys=True, indent=2, ensure_ascii=False, allow_nan=False)
        return (text + "\n").encode()


def new_statement(*, contribution: str, subject_sha256: str, predicate: Predicate) -> Statement:
    """A complete Statement for `predicate` (what the collector writes)."""
    return Statement.model_validate({
        "_type": STATEMENT_TYPE,
        "subject": [{"name": contribution, "digest": {"sha256": subject_sha256}}],
        "predicateType": PREDICATE_TYPE,
        "predicate": predicate,
    })


def utc_now_iso() -> str:
    """`collected_at` format: ISO 8601 UTC with a Z, second precision."""
    return datetime.now(UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")
