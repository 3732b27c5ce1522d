"""The Verdict: the versioned JSON contract every renderer, the dashboard and the GitHub publisher read.

Bump VERDICT_SCHEMA_VERSION on any incompatible change. `fasttrack schema verdict` prints the JSON schema.
"""

from __future__ import annotations

from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from fasttrack.domain import ChangeStatus as ChangeStatus
from fasttrack.domain import PointStatus as PointStatus
from fasttrack.findings import Finding, Severity
from fasttrack.ruleinfo import RuleCode, RulesInfo

# 1.1: `catalogue` (the metadata of the rules that ran). A 1.0 verdict has none; renderers say so.
VERDICT_SCHEMA_VERSION: Final = "1.1"


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ChangedFile(Strict):
    path: str
    status: ChangeStatus
    old_path: str | None = None  # renames and copies: the source side (it counts too)
    zone: str | None = None
    zone_kind: str | None = None
    binary: bool = False
    symlink_target: str | None = None
    submodule: bool = False
    old_mode: str | None = None
    new_mode: str | None = None
    added_lines: int | None = None
    removed_lines: int | None = None
    engine_path: str | None = None  # contribution mode: where the file lands in the engine tree


# How an affected module reaches changed code (docs/blast-radius.md): it imports it; it imports a module
# below a changed package, so Python runs the package's __init__ first; it names it in a string
# (import_module, sys.modules.get, a table of module names); it reads a registry the changed code fills
# (a class whose engine base registers subclasses in __init_subclass__ or a metaclass).
LinkKind = Literal["imports", "parent-package", "names-in-string", "registry"]


class Witness(Strict):
    """A chain from an affected module to a changed module: chain[0] reaches chain[1] ...

    lines[i] is the line of chain[i] that imports (or names) chain[i+1]; function_level[i] says that line sits
    inside a function body (a lazy import: it runs when the function is called, not when the module is
    imported). links[i] is how chain[i] reaches chain[i+1] (empty: every step imports); `link` is the
    chain's kind: parent-package when any step is one, else the first step that is not an import.
    """

    chain: list[str] = Field(min_length=2)
    lines: list[int | None] = Field(default_factory=list)
    function_level: list[bool] = Field(default_factory=list)
    changed_path: str | None = None  # head path (base path if deleted) of chain[-1], the changed module
    links: list[LinkKind] = Field(default_factory=list)
    link: LinkKind = "imports"


class AffectedModel(Strict):
    name: str  # model unit name (package or legacy file) or registered architecture
    kind: Literal["package", "legacy", "architecture"]
    module: str
    witness: Witness | None = None
    architectures: list[str] = Field(default_factory=list)
    path: str | None = None  # head path of `module`
    link: LinkKind = "imports"  # how `module` reaches the changed code (its witness's kind)


class AffectedShared(Strict):
    module: str
    zone: str | None = None
    zone_kind: str | None = None
    witness: Witness
    path: str | None = None
    # A policy hub module (registry-like call-in point): reported, its importers not followed.
    hub: bool = False
    link: LinkKind = "imports"


class BlastRadius(Strict):
    changed_modules: list[str] = Field(default_factory=list)
    models: list[AffectedModel] = Field(default_factory=list)
    shared: list[AffectedShared] = Field(default_factory=list)
    architectures: list[str] = Field(default_factory=list)  # registered architectures served by changed code
    computed: bool = False
    note: str | None = None  # why not computed, or how the graph was cut (hubs, lazy imports)
    graph_modules: int | None = None
    seconds: float | None = None
    # Totals before capping at the policy's max_witnesses (models/shared list at most that many).
    models_total: int = 0
    shared_total: int = 0
    changed_paths: dict[str, str] = Field(default_factory=dict)  # changed module -> its path
    removed_modules: list[str] = Field(default_factory=list)  # changed modules the head no longer has
    hubs_changed: dict[str, int] = Field(default_factory=dict)  # changed hub module -> importers not followed
    naive_closure: int | None = None  # modules the naive transitive closure of the changed modules reaches
    graph_cached: bool | None = None
    # Changed module -> does it do something when imported (module-level statements other than imports,
    # defs, classes, constant assignments and docstrings; fasttrack.confinement.import_effects). A unit that
    # runs a changed module only through a parent package is an error only when this is true. The static
    # facts set it; a runtime effect trace may set it from what the import did.
    acts_at_import: dict[str, bool] = Field(default_factory=dict)
    # Of models_total/shared_total: those reached only through a parent package's __init__ (FT114's).
    models_through_parent: int = 0
    shared_through_parent: int = 0


class PointEvidence(Strict):
    point: dict[str, str | int]  # gpu, tp, batch, context, dtype (fasttrack.domain.Point.as_dict)
    status: PointStatus
    tests: int = 0
    failed: int = 0
    max_error: float | None = None


class ClaimResult(Strict):
    name: str
    claimed: float
    median_ratio: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    holds: bool = False
    point: dict[str, str | int] = Field(default_factory=dict)


class KernelTime(Strict):
    """One kernel of a profiled replay: its name and device time (us) over one call of the layer."""

    name: str
    us: float


class KernelGain(Strict):
    """Where a candidate's gain over stock comes from, kernel by kernel (by name; a kernel one side does not
    run counts as 0 there): `saved_us` = stock's time in it minus the candidate's."""

    name: str
    stock_us: float
    candidate_us: float
    saved_us: float


class BenchmarkRow(Strict):
    """One benchmarked point: per-variant medians (us) and ratios against stock with CIs."""

    point: dict[str, str | int]
    median_us: dict[str, float] = Field(default_factory=dict)
    speedup: dict[str, float] = Field(default_factory=dict)  # variant -> stock/variant median ratio
    speedup_ci: dict[str, tuple[float, float]] = Field(default_factory=dict)
    kernels_per_layer: dict[str, float] = Field(default_factory=dict)
    bandwidth_fraction: dict[str, float] = Field(default_factory=dict)  # of the measured copy roofline
    # Ratios against baselines other than stock (e.g. "compile"): baseline -> variant -> baseline/variant
    # median ratio, and its CI. Optional: the dashboard falls back to a ratio of medians (no CI) without it.
    speedup_over: dict[str, dict[str, float]] = Field(default_factory=dict)
    speedup_over_ci: dict[str, dict[str, tuple[float, float]]] = Field(default_factory=dict)
    # The engine's yardstick (optional: older verdicts have none). Fraction of the roofline measured in the
    # same run (read bandwidth where measured, else copy); the heaviest kernels of each variant's profiled
    # replay; per candidate, the kernels that account for most of its difference from stock; the backend
    # each policy stage of stock ran.
    roofline_fraction: dict[str, float] = Field(default_factory=dict)
    top_kernels: dict[str, list[KernelTime]] = Field(default_factory=dict)
    gain_from: dict[str, list[KernelGain]] = Field(default_factory=dict)
    backends: dict[str, str | None] = Field(default_factory=dict)
    claimed: bool = False


class EvalResult(Strict):
    name: str
    value: float
    threshold: float
    direction: Literal["max", "min"]  # "max": value must be <= threshold; "min": >= threshold
    passed: bool


class SanitizerResult(Strict):
    tool: str
    ran: bool
    errors: int | None = None
    summary: str = ""


class PartMachine(Strict):
    """The machine one part of the evidence was collected on (from that part's own environment)."""

    gpu_name: str | None = None
    gpu_count: int | None = None
    interconnect: str | None = None  # the first non-blank line of the recorded interconnect (None: one GPU)
    driver: str | None = None
    torch: str | None = None


class EvidencePart(Strict):
    """One signed statement file of the bundle (`statement.json`, `statement.tp2.json`, ...) and what it
    evidences. A bundle collected in one go has one part."""

    file: str  # file name inside the bundle directory
    signer: str | None = None  # the principal, only when the part's signature verified
    signature_valid: bool | None = None  # None: the part carries no signature
    fresh: bool | None = None
    collected_at: str | None = None
    machine: PartMachine | None = None  # None when the part did not parse or records no environment
    # Distinct envelope points this part holds kernel tests or a timed benchmark for: TP (as a string, since
    # JSON keys are) -> count, and the points' keys (`fasttrack.domain.Point.key`), sorted.
    points_by_tp: dict[str, int] = Field(default_factory=dict)
    points: list[str] = Field(default_factory=list)
    kernel_tests: int = 0  # kernel-test records in this part
    benchmarks: int = 0  # timed benchmark records in this part (not counting points left to other parts)


class AuditSummary(Strict):
    """One maintainer re-run of the bundle (`fasttrack audit`): who re-ran what, where, and whether it
    agreed."""

    file: str
    auditor: str | None = None  # the principal, only when the record's signature verified
    signature_valid: bool | None = None
    statement: str | None = None  # the part it audits (None: a statement no longer in the bundle)
    gpu: str | None = None
    audited_at: str | None = None
    points: int = 0
    agreed: bool | None = None


class EvidenceSummary(Strict):
    """What the evidence rules learned, for renderers and the dashboard (no raw samples here)."""

    bundle_path: str | None = None
    present: bool = False
    fresh: bool | None = None
    subject_digest: str | None = None
    head_digest: str | None = None
    changed_since: list[str] = Field(default_factory=list)
    signature_valid: bool | None = None
    signer: str | None = None
    collected_at: str | None = None
    environment: dict[str, str | int | float | None] = Field(default_factory=dict)
    points: list[PointEvidence] = Field(default_factory=list)
    claims: list[ClaimResult] = Field(default_factory=list)
    benchmarks: list[BenchmarkRow] = Field(default_factory=list)
    evals: list[EvalResult] = Field(default_factory=list)
    sanitizers: list[SanitizerResult] = Field(default_factory=list)
    # Every statement file of the bundle with its own signature, freshness, machine and points (optional:
    # verdicts written before parts existed have none).
    parts: list[EvidencePart] = Field(default_factory=list)
    audits: list[AuditSummary] = Field(default_factory=list)


class Verdict(Strict):
    schema_version: Literal["1.0", "1.1"] = VERDICT_SCHEMA_VERSION
    tool_version: str
    verdict: Literal["pass", "fail"]
    mode: Literal["range", "contribution"]
    model: str | None = None
    contribution: str | None = None
    repo: str | None = None
    base: str | None = None
    head: str | None = None
    # Range mode: the commit the diff was taken from (the merge base of base and head); it differs from
    # `base` when the base is not an ancestor of the head (the PR is judged on its own commits only).
    merge_base: str | None = None
    pr: int | None = None
    policy: str | None = None
    policy_digest: str | None = None
    changed_files: list[ChangedFile] = Field(default_factory=list)
    findings: list[Finding] = Field(default_factory=list)
    blast_radius: BlastRadius = Field(default_factory=BlastRadius)
    envelope: dict[str, object] | None = None  # the manifest's envelope as declared
    fallback: dict[str, object] | None = None
    evidence: EvidenceSummary | None = None
    rules_run: list[str] = Field(default_factory=list)
    # The metadata (checklist group, tags, severity, docs) of the rules that ran, as the judging fasttrack
    # declared it: renderers read groups and docs from here, so an old verdict renders with its own. None in
    # verdicts written before schema 1.1.
    catalogue: RulesInfo | None = None
    generated_at: str

    @model_validator(mode="before")
    @classmethod
    def _catalogue_of_rules_run(cls, data: Any) -> Any:
        """In the process that ran the rules, `rules_run` holds `RuleCode`s that carry their metadata: record
        it when `catalogue` is not given. A verdict read from JSON holds plain codes and keeps what it has."""
        if not isinstance(data, dict) or data.get("catalogue") is not None:
            return data
        codes = data.get("rules_run")
        if not isinstance(codes, list) or not codes or not all(isinstance(c, RuleCode) for c in codes):
            return data
        return {**data, "catalogue": RulesInfo(groups=codes[0].groups, rules=tuple(c.info for c in codes))}

    def counts(self) -> dict[str, int]:
        out = {s.value: 0 for s in Severity}
        for f in self.findings:
            out[f.severity.value] += 1
        return out


def decide(findings: list[Finding]) -> Literal["pass", "fail"]:
    """A verdict fails if and only if some finding is an error (fail closed: a crashed rule is an error)."""
    return "fail" if any(f.severity is Severity.ERROR for f in findings) else "pass"


def inconsistency(v: Verdict) -> str | None:
    """Why a verdict's `verdict` field disagrees with its findings, or None when it agrees.

    Every consumer of a verdict written elsewhere (the dashboard, the GitHub publisher) recomputes pass/fail
    from the findings and refuses a verdict for which this is not None: a "pass" that holds an error is an
    edited or broken verdict, never a ready one."""
    expected = decide(v.findings)
    if v.verdict == expected:
        return None
    errors = [f.code for f in v.findings if f.severity is Severity.ERROR]
    if expected == "fail":
        shown = ", ".join(errors[:5]) + (" ..." if len(errors) > 5 else "")
        return f"its verdict field says 'pass' but it holds {len(errors)} error finding(s) ({shown})"
    return "its verdict field says 'fail' but it holds no error finding"
