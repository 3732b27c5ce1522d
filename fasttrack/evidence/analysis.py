"""What the evidence rules and the summary both need, computed once from the Context.

Nothing here produces findings; `fasttrack.rules.evidence` judges and `fasttrack.evidence.summary` reports.
Everything is a pure function of the Context (plus small caches keyed by content, never by identity).
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

from fasttrack.errors import InputError
from fasttrack.evidence.bundle import (
    REFERENCE_VARIANTS,
    SIGNATURE_FILE,
    STATEMENT_FILE,
    STOCK_VARIANT,
    Benchmark,
    Environment,
    KernelTest,
    Point,
    Statement,
    Variant,
)
from fasttrack.evidence.digest import (
    ContentDigest,
    FileDelta,
    compare_listings,
    contribution_digest,
    digest_of_listing,
    listing_format,
)
from fasttrack.evidence.loaded import LoadedEvidence, LoadedPart
from fasttrack.evidence.signing import SignatureResult, verify_bytes
from fasttrack.evidence.stats import RatioEstimate, median, median_ratio_ci
from fasttrack.manifest import Claim, EnvelopePoint

if TYPE_CHECKING:
    from fasttrack.context import Context

MIN_BOOTSTRAP_SAMPLES = 2
BOOTSTRAP_BUDGET = 20_000_000
MIN_RESAMPLES = 200


def statement(ctx: Context) -> Statement | None:
    """The statement the rules judge, only when the Context has a manifest (evidence rules need one): with
    several parts (statement files) in the bundle, their records merged (`LoadedEvidence.merged`)."""
    if ctx.manifest is None or ctx.evidence is None:
        return None
    if ctx.evidence.merged is not None:
        return ctx.evidence.merged
    return ctx.evidence.statement


def parts(ctx: Context) -> list[LoadedPart]:
    """Every statement file of the bundle (one for a bundle collected in one go)."""
    ev = ctx.evidence
    if ev is None:
        return []
    if ev.parts:
        return list(ev.parts)
    if ev.statement_bytes is None and not ev.problems:
        return []
    # A LoadedEvidence built by hand (no parts): its top-level fields are the one part.
    path = ev.statement_path or ev.bundle_dir / STATEMENT_FILE
    return [LoadedPart(name=path.name, statement_path=path, statement=ev.statement,
                       statement_bytes=ev.statement_bytes, signature=ev.signature,
                       signature_path=ev.signature_path, problems=ev.problems, salvaged=ev.salvaged,
                       log_digests=ev.log_digests)]


def parsed_parts(ctx: Context) -> list[tuple[LoadedPart, Statement]]:
    """(part, its statement) for every part that parsed (possibly salvaged); empty without a manifest."""
    if ctx.manifest is None:
        return []
    return [(p, p.statement) for p in parts(ctx) if p.statement is not None]


def multipart(ctx: Context) -> bool:
    return len(parts(ctx)) > 1


def part_of(ctx: Context, item: object) -> LoadedPart | None:
    """The part a kernel test, benchmark, eval or sanitizer record of `statement(ctx)` comes from."""
    ev = ctx.evidence
    if ev is None:
        return None
    found = ev.part_of(item)
    if found is not None:
        return found
    ps = parts(ctx)
    return ps[0] if len(ps) == 1 else None


def environment_of(ctx: Context, item: object) -> Environment | None:
    """The environment of the machine a record was collected on (its own part's)."""
    part = part_of(ctx, item)
    if part is not None and part.statement is not None:
        return part.statement.predicate.environment
    st = statement(ctx)
    return st.predicate.environment if st else None


# ---------------------------------------------------------------------------------------------- locations

def rel(ctx: Context, path: Path) -> str:
    """`path` relative to the head tree when it is inside it (what findings and the Verdict show)."""
    try:
        return path.resolve().relative_to(ctx.head_dir.resolve()).as_posix()
    except (ValueError, OSError):
        return str(path)


def bundle_dir(ctx: Context) -> Path | None:
    if ctx.evidence is not None:
        return ctx.evidence.bundle_dir
    return ctx.evidence_dir


def bundle_label(ctx: Context) -> str:
    """Head-relative evidence directory, e.g. `evidence/kimi_k3`."""
    d = bundle_dir(ctx)
    if d is not None:
        return rel(ctx, d)
    name = ctx.manifest.contribution.name if ctx.manifest else "<contribution>"
    return f"evidence/{name}"


def statement_file(ctx: Context) -> str:
    """The evidence file a finding about the whole (merged) evidence names: statement.json, or with
    several parts the evidence directory itself (a path renderers and SARIF can use)."""
    ps = parts(ctx)
    if len(ps) > 1:
        return f"{bundle_label(ctx)}/"
    return f"{bundle_label(ctx)}/{ps[0].name if ps else STATEMENT_FILE}"


def signature_file(ctx: Context) -> str:
    return f"{bundle_label(ctx)}/{SIGNATURE_FILE}"


def part_file(ctx: Context, part: LoadedPart) -> str:
    """Head-relative path of one part's statement file, e.g. `evidence/kimi_k3/statement.tp2.json`."""
    return f"{bundle_label(ctx)}/{part.name}"


def item_file(ctx: Context, item: object) -> str:
    """The statement file a record comes from (the merged label when it cannot be told)."""
    part = part_of(ctx, item)
    return part_file(ctx, part) if part is not None else statement_file(ctx)


def recollect_fix(ctx: Context, what: str = "") -> str:
    """The standard fix: collect again on a GPU machine and commit the bundle."""
    contrib = ctx.contribution_dir or "<contribution dir>"
    lead = f"{what}, then " if what else ""
    return (f"{lead}re-run `fasttrack collect {contrib}` on a GPU machine, sign it, and commit "
            f"{bundle_label(ctx)}/")


# ---------------------------------------------------------------------------------------------- freshness

@dataclass(frozen=True)
class Freshness:
    head: ContentDigest | None  # the contribution as it is in the PR head
    subject: str | None  # the digest the bundle was collected over
    listing_digest: str | None  # digest of the bundle's own file list (must equal `subject`)
    delta: FileDelta = field(default_factory=FileDelta)
    error: str | None = None  # why the head digest could not be computed

    @property
    def fresh(self) -> bool | None:
        if self.head is None or self.subject is None:
            return None
        return self.head.sha256 == self.subject


def contribution_path(ctx: Context) -> Path | None:
    if ctx.contribution_dir is None:
        return None
    return ctx.head_dir / ctx.contribution_dir


def freshness(ctx: Context, part: LoadedPart | None = None) -> Freshness:
    """Is the statement (the primary one, or `part`'s) bound to the contribution in the head?"""
    st = part.statement if part is not None else ctx.evidence.statement if ctx.evidence else None
    if ctx.manifest is None:
        st = None
    subject = st.subject_digest if st else None
    listed = dict(st.predicate.files) if st else {}
    listing_digest = digest_of_listing(listed) if st and st.predicate.files else None
    fmt = listing_format(listed, subject) if st and subject and st.predicate.files else None
    if fmt is not None:
        listing_digest = subject  # a consistent listing of an older format is old (stale), not altered
    path = contribution_path(ctx)
    if path is None:
        return Freshness(None, subject, listing_digest, error="the contribution directory is not known")
    try:
        # Several rules and the summary ask per part: the contribution's files are read once per run.
        head = ctx.memo(f"contribution_digest:{path}", lambda: contribution_digest(path))
    except InputError as exc:
        return Freshness(None, subject, listing_digest, error=exc.render())
    delta = (compare_listings(listed, head.files, collected_format=fmt) if subject != head.sha256
             else FileDelta())
    return Freshness(head, subject, listing_digest, delta)


# ---------------------------------------------------------------------------------------------- signature

def allowed_signers_path(ctx: Context) -> Path:
    """The policy's allowed-signers file: absolute, or relative to the policy file's directory or the
    nearest ancestor of it where the path exists (policies/allowed_signers beside policies/vllm.toml)."""
    configured = Path(ctx.policy.evidence.allowed_signers)
    if configured.is_absolute():
        return configured
    base = ctx.policy_path.resolve().parent
    for d in (base, *base.parents):
        if (d / configured).is_file():
            return d / configured
    return base.parent / configured


def signature(ctx: Context, part: LoadedPart | None = None) -> SignatureResult:
    """The primary statement's signature check, or `part`'s (each part is signed on its own)."""
    ev: LoadedEvidence | LoadedPart | None = part if part is not None else ctx.evidence
    name = part.name if part is not None else STATEMENT_FILE
    if ev is None or ev.statement_bytes is None:
        return SignatureResult(False, reason=f"no {name} to verify")
    if ev.signature is None:
        return SignatureResult(False, reason=f"{name}.sig is missing")
    signers = allowed_signers_path(ctx)
    try:
        signers_bytes = signers.read_bytes()
    except OSError:
        return SignatureResult(False, reason=f"the policy's allowed signers file {signers} cannot be read")
    return _verify_cached(hashlib.sha256(ev.statement_bytes).hexdigest(), ev.statement_bytes, ev.signature,
                          str(signers), hashlib.sha256(signers_bytes).hexdigest(),
                          ctx.policy.evidence.namespace)


@lru_cache(maxsize=64)
def _verify_cached(data_sha: str, data: bytes, sig: bytes, signers: str, signers_sha: str,
                   namespace: str) -> SignatureResult:
    del data_sha, signers_sha  # part of the cache key only
    return verify_bytes(data, sig, Path(signers), namespace)


# ---------------------------------------------------------------------------------------------- points

def point_key(p: Point | EnvelopePoint | Claim) -> str:
    return f"{p.gpu}|tp{p.tp}|b{p.batch}|c{p.context}|{p.dtype}"


def point_dict(p: Point | EnvelopePoint | Claim) -> dict[str, str | int]:
    return {"gpu": p.gpu, "tp": p.tp, "batch": p.batch, "context": p.context, "dtype": p.dtype}


def point_text(p: Point | EnvelopePoint | Claim) -> str:
    return f"{p.gpu} tp={p.tp} batch={p.batch} context={p.context} {p.dtype}"


def test_function(nodeid: str) -> str:
    """A parametrized test's function id: the nodeid without its `[...]` parameters."""
    return nodeid.split("[", 1)[0]


def tests_by_point(st: Statement) -> dict[str, list[KernelTest]]:
    out: dict[str, list[KernelTest]] = defaultdict(list)
    for t in st.predicate.kernel_tests:
        if t.point is not None:
            out[point_key(t.point)].append(t)
    return out


def envelope_points(ctx: Context) -> list[EnvelopePoint]:
    return ctx.manifest.envelope.points() if ctx.manifest else []


@dataclass(frozen=True)
class PointCoverage:
    point: EnvelopePoint
    passed: int
    failed: int
    skipped: int
    missing_functions: tuple[str, ...]  # parametrized test functions with no pass at this point
    max_error: float | None

    @property
    def covered(self) -> bool:
        return self.passed > 0 and not self.missing_functions


def coverage(ctx: Context) -> list[PointCoverage]:
    st = statement(ctx)
    if st is None:
        return []
    by_point = tests_by_point(st)
    functions = sorted({test_function(t.nodeid) for t in st.predicate.kernel_tests if t.point is not None})
    out = []
    for ep in envelope_points(ctx):
        tests = by_point.get(point_key(ep), [])
        passed_fns = {test_function(t.nodeid) for t in tests if t.outcome == "passed"}
        errors = [t.max_error for t in tests if t.max_error is not None]
        out.append(PointCoverage(
            point=ep,
            passed=sum(t.outcome == "passed" for t in tests),
            failed=sum(t.outcome in ("failed", "error") for t in tests),
            skipped=sum(t.outcome == "skipped" for t in tests),
            missing_functions=tuple(f for f in functions if f not in passed_fns),
            max_error=max(errors) if errors else None,
        ))
    return out


def not_collected(ctx: Context) -> dict[str, list[tuple[str, str]]]:
    """point key -> [(part name, why)] for every benchmark record a part wrote as not run (another
    machine's hardware, the --tp filter, too few GPUs...): what a missing point's finding can point to."""
    out: dict[str, list[tuple[str, str]]] = defaultdict(list)
    for part, st in parsed_parts(ctx):
        for b in st.predicate.benchmarks:
            if b.not_run is not None:
                out[point_key(b.point)].append((part.name, b.not_run))
    return out


@dataclass(frozen=True)
class Overlap:
    point: Point
    what: str  # "kernel tests" or "a timed benchmark"
    parts: tuple[str, ...]


def overlaps(ctx: Context) -> list[Overlap]:
    """Points evidenced by more than one part (kernel tests at the point, or a timed benchmark there). Each
    point must come from exactly one part: two machines' results for one point are not merged or chosen
    between."""
    found: dict[tuple[str, str], dict[str, None]] = defaultdict(dict)
    points: dict[str, Point] = {}
    pp = parsed_parts(ctx)
    if len(pp) < 2:
        return []
    for part, st in pp:
        for t in st.predicate.kernel_tests:
            if t.point is not None:
                found[(point_key(t.point), "kernel tests")][part.name] = None
                points.setdefault(point_key(t.point), t.point)
        for b in timed_benchmarks(st):
            found[(point_key(b.point), "a timed benchmark")][part.name] = None
            points.setdefault(point_key(b.point), b.point)
    return [Overlap(points[key], what, tuple(names)) for (key, what), names in sorted(found.items())
            if len(names) > 1]


def duplicate_benchmarks(ctx: Context) -> list[Overlap]:
    """Points with more than one benchmark record inside ONE part (timed or not run): a collector writes one
    record per point, so a second one is an edited or hand-assembled bundle, and which one counts would be a
    choice."""
    out: list[Overlap] = []
    for part, st in parsed_parts(ctx):
        seen: dict[str, int] = defaultdict(int)
        points: dict[str, Point] = {}
        for b in st.predicate.benchmarks:
            seen[point_key(b.point)] += 1
            points.setdefault(point_key(b.point), b.point)
        out.extend(Overlap(points[k], f"{n} benchmark records", (part.name,)) for k, n in sorted(seen.items())
                   if n > 1)
    return out


# ---------------------------------------------------------------------------------------------- benchmarks

def timed_benchmarks(st: Statement) -> list[Benchmark]:
    """Points that were timed (including measurements the collector's protocol rejected)."""
    return [b for b in st.predicate.benchmarks if b.not_run is None]


def usable_benchmarks(st: Statement) -> list[Benchmark]:
    """Timed points whose measurement the protocol accepted: only these support claims and comparisons."""
    return [b for b in timed_benchmarks(st) if not b.rejected]


def candidates(bench: Benchmark) -> list[str]:
    """Variants that are the contribution's: recorded as such (`origin`), or, in a statement without
    origins, everything but stock and torch.compile of stock."""
    return sorted(n for n, v in bench.variants.items()
                  if v.origin == "contribution" or (v.origin is None and n not in REFERENCE_VARIANTS))


def benchmark_at(st: Statement, key: str) -> Benchmark | None:
    for b in timed_benchmarks(st):
        if point_key(b.point) == key:
            return b
    return None


def ratio(ctx: Context, baseline: Variant, candidate: Variant) -> RatioEstimate | None:
    """Median ratio baseline/candidate with the policy's bootstrap CI; None with too few samples."""
    if len(baseline.samples_us) < MIN_BOOTSTRAP_SAMPLES or len(candidate.samples_us) < MIN_BOOTSTRAP_SAMPLES:
        return None
    ev = ctx.policy.evidence
    # Bound the work a huge bundle can cause: at most BOOTSTRAP_BUDGET resampled values per side.
    n = max(len(baseline.samples_us), len(candidate.samples_us))
    resamples = min(ev.bootstrap_resamples, max(MIN_RESAMPLES, BOOTSTRAP_BUDGET // n))
    return _ratio_cached(tuple(baseline.samples_us), tuple(candidate.samples_us), resamples, ev.confidence)


@lru_cache(maxsize=512)
def _ratio_cached(baseline: tuple[float, ...], candidate: tuple[float, ...], resamples: int,
                  confidence: float) -> RatioEstimate:
    return median_ratio_ci(baseline, candidate, resamples=resamples, confidence=confidence)


def variant_gpu(bench: Benchmark, name: str) -> str:
    v = bench.variants[name]
    return v.gpu or bench.point.gpu


def bandwidth(variant: Variant) -> float | None:
    """Bytes per second one GPU moved (bytes_moved over the median call time)."""
    if variant.bytes_moved is None or not variant.samples_us:
        return None
    return variant.bytes_moved / (median(variant.samples_us) * 1e-6)


@dataclass(frozen=True)
class ClaimCheck:
    claim: Claim
    estimate: RatioEstimate | None
    problem: str | None  # why it could not be recomputed

    @property
    def holds(self) -> bool:
        return self.estimate is not None and self.estimate.low >= self.claim.min_speedup


def claim_checks(ctx: Context) -> list[ClaimCheck]:
    st = statement(ctx)
    if st is None or ctx.manifest is None:
        return []
    out = []
    for claim in ctx.manifest.claims:
        bench = benchmark_at(st, point_key(claim))
        if bench is None:
            out.append(ClaimCheck(claim, None, f"no timed benchmark at {point_text(claim)}"))
            continue
        if bench.rejected:
            out.append(ClaimCheck(claim, None, "the timing protocol rejected the measurement at "
                                               f"{point_text(claim)}: {'; '.join(bench.rejected[:3])}"))
            continue
        missing = [v for v in (claim.baseline, claim.candidate) if v not in bench.variants]
        if missing:
            out.append(ClaimCheck(claim, None, f"the benchmark at {point_text(claim)} has no "
                                               f"{' or '.join(repr(m) for m in missing)} variant"))
            continue
        est = ratio(ctx, bench.variants[claim.baseline], bench.variants[claim.candidate])
        if est is None:
            out.append(ClaimCheck(claim, None, f"fewer than {MIN_BOOTSTRAP_SAMPLES} samples on a side"))
            continue
        out.append(ClaimCheck(claim, est, None))
    return out


def iter_candidate_ratios(ctx: Context) -> Iterator[tuple[Benchmark, str, RatioEstimate]]:
    """(benchmark, candidate variant, stock/candidate estimate) for every timed point."""
    st = statement(ctx)
    if st is None:
        return
    for bench in usable_benchmarks(st):
        stock = bench.variants.get(STOCK_VARIANT)
        if stock is None:
            continue
        for name in candidates(bench):
            est = ratio(ctx, stock, bench.variants[name])
            if est is not None:
                yield bench, name, est
