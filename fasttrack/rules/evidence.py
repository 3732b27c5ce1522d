"""FT3xx evidence bundles: schema, freshness, signature, coverage, claims.

Every rule here runs only when the Context has a manifest (without one, FT200 says so and these stay
silent), and every rule but FT300/FT301 also needs a parsed statement (FT300/FT301 already fail without
one). Numbers are recomputed from the raw samples in the bundle, never taken as typed.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from fasttrack.evidence import analysis as an
from fasttrack.evidence.bundle import STATEMENT_FILE, STOCK_VARIANT, Statement
from fasttrack.evidence.loaded import LoadedPart
from fasttrack.evidence.yardstick_facts import roofline
from fasttrack.findings import Finding, Severity
from fasttrack.rules.base import Catalogue

if TYPE_CHECKING:
    from fasttrack.facts.model import Facts

catalogue = Catalogue("evidence")
rule = catalogue.rule

MAX_FINDINGS_PER_RULE = 25
REQUIRED_SANITIZERS = ("memcheck", "racecheck", "synccheck")
FUTURE_SKEW = timedelta(days=1)


def _capped(code: str, findings: Iterable[Finding], limit: int = MAX_FINDINGS_PER_RULE) -> Iterator[Finding]:
    """At most `limit` findings, then one more saying how many were left out (same worst severity)."""
    rest: list[Finding] = []
    for i, f in enumerate(findings):
        if i < limit:
            yield f
        else:
            rest.append(f)
    if rest:
        worst = Severity.ERROR if any(f.severity is Severity.ERROR for f in rest) else rest[0].severity
        yield Finding(code=code, severity=worst, message=f"and {len(rest)} more like the above",
                      fix=rest[0].fix, evidence_file=rest[0].evidence_file)


def _elsewhere(ctx: Facts, reasons: list[tuple[str, str]]) -> str:
    """What the parts recorded about a point they did not collect (e.g. `statement.tp1.json: tp=2 is
    collected in another bundle (--tp filter)`), so a missing part is named as such."""
    if not reasons:
        return ""
    seen: dict[str, None] = {}
    for name, why in reasons:
        seen[f"{name}: {why[:200]}"] = None
    return " (" + "; ".join(list(seen)[:3]) + ")"


def _x(value: float) -> str:
    return f"{value:.3g}x"


def _tbps(value: float) -> str:
    return f"{value / 1e12:.2f} TB/s"


# --------------------------------------------------------------------------------------- bundle, schema

@rule("FT300", "A contribution must come with an evidence bundle.")
def no_bundle(ctx: Facts) -> Iterator[Finding]:
    """A fast-track contribution is judged on evidence its author collected on real GPUs: the bundle
    `evidence/<contribution>/statement.json` (plus its signature and raw logs) must be in the PR. Without
    it nothing else about performance or correctness can be checked, so the verdict fails."""
    if ctx.manifest is None:
        return
    ev = ctx.evidence
    if ev is not None and (ev.statement_bytes is not None or ev.problems or an.parts(ctx)):
        return
    where = an.bundle_label(ctx)
    what = "no evidence directory" if ev is None else "no statement.json in the evidence directory"
    yield Finding.error("FT300", f"{what} {where}/ for contribution {ctx.manifest.contribution.name!r}",
                        evidence_file=f"{where}/statement.json", fix=an.recollect_fix(ctx))


@rule("FT301", "The evidence bundle must parse against its schema; its parts may not overlap.")
def schema(ctx: Facts) -> Iterator[Finding]:
    """statement.json must be an in-toto Statement v1 with fasttrack's predicate
    (`https://fasttrack.dev/evidence/v1`): UTF-8 JSON, within the size and nesting limits, no unknown or
    missing fields, finite numbers. Each problem is one finding naming the field; the valid parts of a
    damaged bundle are still checked by the other rules. A bundle collected in parts (several statement
    files, e.g. statement.json and statement.tp2.json) is checked file by file, and no envelope point may
    be evidenced by two parts (kernel tests or a timed benchmark at the same point in both): which
    machine's result counts would be a choice, so neither is taken. Within one part, a point has exactly one
    benchmark record."""
    if ctx.manifest is None or ctx.evidence is None:
        return
    fix = an.recollect_fix(ctx)

    def found() -> Iterator[Finding]:
        for part in an.parts(ctx):
            label = an.part_file(ctx, part)
            for p in part.problems:
                yield p.model_copy(update={"evidence_file": label, "fix": fix})

    yield from _capped("FT301", found(), limit=60)
    label = an.bundle_label(ctx)
    yield from _capped("FT301", (
        Finding.error("FT301", f"{an.point_text(o.point)}: {o.what} in {len(o.parts)} parts "
                               f"({', '.join(o.parts)}); each point must be evidenced by exactly one part",
                      point=an.point_dict(o.point), evidence_file=f"{label}/{o.parts[-1]}",
                      fix="collect each TP size in one part only (`fasttrack collect --tp N`), and delete "
                          "or re-collect the part that should not hold this point")
        for o in an.overlaps(ctx)))
    yield from _capped("FT301", (
        Finding.error("FT301", f"{an.point_text(o.point)}: {o.what} in {o.parts[0]}; a bundle holds one "
                               "benchmark record per point",
                      point=an.point_dict(o.point), evidence_file=f"{label}/{o.parts[0]}",
                      fix="re-collect: fasttrack collect writes exactly one record per point")
        for o in an.duplicate_benchmarks(ctx)))


@rule("FT321", "The bundle must be for this contribution, model and manifest.")
def identity(ctx: Facts) -> Iterator[Finding]:
    """The predicate's `contribution` and `model`, and the subject's name, must match the manifest, and
    `manifest_sha256` must be the digest of the manifest in the PR head: a bundle copied from another
    contribution, or collected under another manifest, is not evidence for this one."""
    if an.statement(ctx) is None or ctx.manifest is None:
        return
    info = ctx.manifest.contribution
    actual = ctx.manifest_sha256
    for part, st in an.parsed_parts(ctx):  # every part must be for this contribution and manifest
        p, label = st.predicate, an.part_file(ctx, part)
        fix = an.recollect_fix(ctx)
        for what, got, want in (("predicate.contribution", p.contribution, info.name),
                                ("predicate.model", p.model, info.model),
                                ("subject[0].name", st.subject[0].name if st.subject else None, info.name)):
            if got is not None and got != want:
                yield Finding.error("FT321", f"{what} is {got!r} but the manifest says {want!r}",
                                    evidence_file=label, fix=fix)
        if p.manifest_sha256 is not None and actual is not None and actual != p.manifest_sha256:
            yield Finding.error("FT321", f"{part.name} was collected under a different fasttrack.toml "
                                         "(predicate.manifest_sha256 does not match the head's manifest)",
                                path=ctx.manifest_path, evidence_file=label, fix=fix)


# --------------------------------------------------------------------------------------- binding

@rule("FT302", "The evidence must be for the code in the PR head (content digest).")
def stale(ctx: Facts) -> Iterator[Finding]:
    """The bundle's subject digest is a sha256 over the sorted paths and file hashes of the contribution
    directory (not a commit id, so rebases and unrelated commits keep it valid). It must equal the digest
    of the contribution in the PR head; when it does not, the evidence is stale and the finding lists the
    files changed, added and removed since collection. The bundle's own file list must also hash to its
    subject digest (otherwise the bundle was edited or is broken)."""
    if an.statement(ctx) is None:
        return
    for part, st in an.parsed_parts(ctx):  # every part must be for the head's code
        yield from _stale_part(ctx, part, st)


def _stale_part(ctx: Facts, part: LoadedPart, st: Statement) -> Iterator[Finding]:
    label = an.part_file(ctx, part)
    fr = ctx.freshness(part)
    if fr.subject is None:
        yield Finding.error("FT302", f"{part.name} has no subject digest, so it is bound to no code",
                            evidence_file=label, fix=an.recollect_fix(ctx))
        return
    if fr.listing_digest is not None and fr.listing_digest != fr.subject:
        yield Finding.error("FT302", f"{part.name}'s file list (predicate.files) does not hash to its "
                                     "subject digest: the bundle was altered after collection",
                            evidence_file=label, fix=an.recollect_fix(ctx))
    if fr.head is None:
        yield Finding.error("FT302", f"cannot compute the contribution's digest: {fr.error}",
                            evidence_file=label, fix="check that the contribution directory is in the head")
        return
    if fr.fresh:
        return
    if not st.predicate.files:
        changed = "the bundle lists no files, so what changed cannot be said"
    else:
        changed = fr.delta.describe()
    first = fr.delta.all_paths()[:1]
    which = "the bundle" if not an.multipart(ctx) else f"part {part.name}"
    yield Finding.error(
        "FT302",
        f"the evidence is stale: the contribution's digest is {fr.head.sha256[:12]}… but {which} was "
        f"collected over {fr.subject[:12]}… ({changed})",
        path=f"{ctx.contribution_dir}/{first[0]}" if first and ctx.contribution_dir else ctx.contribution_dir,
        evidence_file=label,
        fix=an.recollect_fix(ctx),
    )


@rule("FT303", "The bundle must be signed by a principal in the policy's allowed signers.")
def signature(ctx: Facts) -> Iterator[Finding]:
    """statement.json.sig must be an SSH signature (`ssh-keygen -Y sign`) over statement.json's exact bytes,
    made in the policy's namespace (`fasttrack-evidence`: a git commit signature cannot be replayed here)
    with a key that the policy's allowed-signers file lists for that namespace. The allowed-signers file
    is read from the trusted policy location; a PR that edits it cannot pass fast-track (FT4xx)."""
    if an.statement(ctx) is None or ctx.evidence is None:
        return
    signers = ctx.allowed_signers.get()
    for part in an.parts(ctx):  # each part is signed on its own
        if part.statement is None or part.statement_bytes is None:
            continue
        result = ctx.signature(part)
        if result.valid:
            continue
        target = an.bundle_label(ctx) if part.name == STATEMENT_FILE else an.part_file(ctx, part)
        fix = (f"sign with `fasttrack sign {target} --key YOUR_SSH_KEY --principal YOU` using a key that "
               f"{an.rel(ctx, signers)} lists (a maintainer adds your public key there in a separate PR)")
        if "not in" in result.reason and result.fingerprint:
            fix = (f"ask a maintainer to add your key ({result.fingerprint}) to {an.rel(ctx, signers)}, or "
                   "sign with a key that is already listed")
        prefix = f"{part.name}: " if an.multipart(ctx) else ""
        yield Finding.error("FT303", f"{prefix}evidence signature not accepted: {result.reason}",
                            evidence_file=f"{an.part_file(ctx, part)}.sig", fix=fix)


@rule("FT320", "Raw logs beside the statement must match the hashes it lists.")
def logs(ctx: Facts) -> Iterator[Finding]:
    """The statement binds each raw log (pytest.log, bench.log, ...) by its sha256 in `predicate.logs`, so
    the signature covers them too. A listed log that is missing or differs was removed or edited after
    signing; a file in the bundle directory that the statement does not list is not covered by the
    signature (warning)."""
    if an.statement(ctx) is None or ctx.evidence is None:
        return
    label = an.bundle_label(ctx)
    for part, st in an.parsed_parts(ctx):  # each part binds its own logs
        which = "the statement" if not an.multipart(ctx) else part.name
        for name, want in sorted(st.predicate.logs.items()):
            got = part.log_digests.get(name)
            if got is None:
                yield Finding.error("FT320", f"log {name} is listed in {which} but missing from the bundle",
                                    evidence_file=f"{label}/{name}", fix=an.recollect_fix(ctx))
            elif got != want:
                yield Finding.error("FT320", f"log {name} does not match its sha256 in {which} "
                                             "(edited after signing)",
                                    evidence_file=f"{label}/{name}", fix=an.recollect_fix(ctx))
        if not st.predicate.logs:
            yield Finding.warning("FT320", f"{which} binds no raw logs",
                                  evidence_file=an.part_file(ctx, part), fix=an.recollect_fix(ctx))
    for name in ctx.evidence.unlisted_files:
        yield Finding.warning("FT320", f"{name} is in the bundle but not bound by the statement",
                              evidence_file=f"{label}/{name}",
                              fix="remove it from the bundle directory, or re-collect so it is listed")


# --------------------------------------------------------------------------------------- coverage

@rule("FT304", "Every envelope point must have passing kernel tests.")
def point_coverage(ctx: Facts) -> Iterator[Finding]:
    """The manifest's envelope expands into a grid (hardware x TP x batch x context x dtype, with batch 1,
    2 and the maximum always included). At every grid point, every kernel test function that runs per
    point must have passed. A point with no result, only skips, or a test function missing is uncovered:
    the contribution claims a deployment it has no evidence for."""
    st = an.statement(ctx)
    if st is None:
        return
    label = an.statement_file(ctx)
    fix = an.recollect_fix(ctx, "run the kernel tests at this point (or shrink the envelope to drop it)")

    elsewhere = an.not_collected(ctx)

    def found() -> Iterator[Finding]:
        covs = an.coverage(ctx)
        # A GPU with no covered point at all gets one finding, not one per point (FT306 says why).
        bare = {c.point.gpu for c in covs} - {c.point.gpu for c in covs if c.passed}
        for gpu in sorted(bare):
            n = sum(c.point.gpu == gpu for c in covs)
            yield Finding.error("FT304", f"none of the {n} envelope points on {gpu} has a passing kernel "
                                         "test", point={"gpu": gpu}, evidence_file=label, fix=fix)
        for cov in covs:
            if cov.covered or cov.point.gpu in bare:
                continue
            if cov.passed == 0 and cov.failed == 0 and cov.skipped == 0:
                why = "no kernel test ran"
            elif cov.passed == 0 and cov.failed == 0:
                why = f"kernel tests were only skipped ({cov.skipped})"
            elif cov.passed == 0:
                why = "no kernel test passed"
            else:
                why = "not every test function passed: " + ", ".join(cov.missing_functions[:5])
            if cov.passed == 0 and cov.failed == 0:
                why += _elsewhere(ctx, elsewhere.get(an.point_key(cov.point), []))
            yield Finding.error("FT304", f"{an.point_text(cov.point)}: {why}", point=an.point_dict(cov.point),
                                evidence_file=label, fix=fix)

    yield from _capped("FT304", found())


@rule("FT305", "Batch 1 and batch 2 must be benchmarked explicitly.")
def small_batches(ctx: Facts) -> Iterator[Finding]:
    """Decode at batch 1 and 2 is where latency kernels matter most and where they most often lose. For
    every required batch (policy `required_batches`) inside the envelope, there must be a timed benchmark
    at that batch on every declared hardware, TP size and dtype (the kernel tests there are FT304's)."""
    st = an.statement(ctx)
    if st is None or ctx.manifest is None:
        return
    env, label = ctx.manifest.envelope, an.statement_file(ctx)
    if ctx.manifest.evidence.benchmark is None:
        yield Finding.error("FT305", "the manifest declares no benchmark, so batch 1 and 2 are never timed",
                            path=ctx.manifest_path, fix="name a benchmark case under [evidence].benchmark")
        return
    timed = {(b.point.gpu, b.point.tp, b.point.batch, b.point.dtype) for b in an.usable_benchmarks(st)}
    # Why each missing (gpu, tp, batch, dtype) was not timed, as the parts recorded it.
    reasons: dict[tuple[str, int, int, str], list[tuple[str, str]]] = {}
    for part, pst in an.parsed_parts(ctx):
        for b in pst.predicate.benchmarks:
            if b.not_run is not None:
                reasons.setdefault((b.point.gpu, b.point.tp, b.point.batch, b.point.dtype), []).append(
                    (part.name, b.not_run))
    for batch in ctx.policy.evidence.required_batches:
        if not env.batch.contains(batch):
            continue
        for hw in env.hardware:
            for tp in env.tp:
                for dtype in env.dtypes:
                    if (hw.name, tp, batch, dtype) not in timed:
                        why = _elsewhere(ctx, reasons.get((hw.name, tp, batch, dtype), []))
                        yield Finding.error(
                            "FT305", f"no accepted timed benchmark at batch {batch} on {hw.name} tp={tp} "
                                     f"{dtype}{why}",
                            point={"gpu": hw.name, "tp": tp, "batch": batch, "dtype": dtype},
                            evidence_file=label, fix=an.recollect_fix(ctx, f"benchmark batch {batch}"))


@rule("FT306", "Every declared hardware kind must have evidence from that hardware.")
def hardware(ctx: Facts) -> Iterator[Finding]:
    """Each GPU the envelope declares needs evidence collected on that GPU: the bundle's environment must
    name it (with the declared compute capability) and kernel tests must have passed at its points. A
    Blackwell claim backed only by H200 runs fails: remove the hardware from the envelope or collect
    there."""
    st = an.statement(ctx)
    if st is None or ctx.manifest is None:
        return
    envs = [pst.predicate.environment for _, pst in an.parsed_parts(ctx)] or [st.predicate.environment]
    # A GPU counts as evidenced by a passing test only in a part collected on that GPU.
    passed_gpus = {t.point.gpu for t in st.predicate.kernel_tests if t.point and t.outcome == "passed"
                   and (e := an.environment_of(ctx, t)) is not None and e.gpu_name == t.point.gpu}
    for hw in ctx.manifest.envelope.hardware:
        env = next((e for e in envs if e is not None and e.gpu_name == hw.name
                    and e.compute_capability == hw.compute_capability),
                   next((e for e in envs if e is not None and e.gpu_name == hw.name),
                        next((e for e in envs if e is not None), None)))
        fix = (f"collect evidence on a {hw.name} machine, or remove {hw.name} from [envelope].hardware "
               "in fasttrack.toml")
        if env is None:
            why = "the bundle records no environment"
        elif env.gpu_name != hw.name:
            on = sorted({f"{e.gpu_name} (sm {e.compute_capability})" for e in envs if e is not None})
            why = f"the bundle was collected on {', '.join(on)}"
        elif env.compute_capability != hw.compute_capability:
            why = (f"the bundle's {env.gpu_name} reports compute capability {env.compute_capability}, "
                   f"not {hw.compute_capability}")
        elif hw.name not in passed_gpus:
            why = "no kernel test passed on it"
        else:
            continue
        yield Finding.error("FT306", f"the envelope declares {hw.name} (sm {hw.compute_capability}) but "
                                     f"{why}: no evidence from that hardware",
                            path=ctx.manifest_path, evidence_file=an.statement_file(ctx), fix=fix)


@rule("FT307", "Kernel tests must not fail.")
def test_failures(ctx: Facts) -> Iterator[Finding]:
    """Any kernel test that failed or errored, at any point, fails the evidence; so does a test recorded
    as passed whose max error exceeds its own tolerance (the record contradicts itself)."""
    st = an.statement(ctx)
    if st is None:
        return

    def found() -> Iterator[Finding]:
        for t in st.predicate.kernel_tests:
            where = f" at {an.point_text(t.point)}" if t.point else ""
            pt = an.point_dict(t.point) if t.point else None
            err = "" if t.max_error is None else f" (max error {t.max_error:.3g}, tolerance {t.tolerance})"
            if t.outcome in ("failed", "error"):
                msg = f": {t.message.splitlines()[0][:200]}" if t.message and t.message.strip() else ""
                yield Finding.error("FT307", f"{t.nodeid} {t.outcome}{where}{err}{msg}", point=pt,
                                    evidence_file=an.item_file(ctx, t),
                                    fix="fix the kernel (or shrink the envelope to exclude this point) and "
                                        "re-collect the evidence")
            elif (t.outcome == "passed" and t.max_error is not None and t.tolerance is not None
                  and t.max_error > t.tolerance):
                yield Finding.error("FT307", f"{t.nodeid} is recorded as passed{where} but its max error "
                                             f"{t.max_error:.3g} exceeds its tolerance {t.tolerance:.3g}",
                                    point=pt, evidence_file=an.item_file(ctx, t), fix=an.recollect_fix(ctx))

    yield from _capped("FT307", found())


# --------------------------------------------------------------------------------------- performance

@rule("FT308", "Every claimed speedup must hold at the lower bound of its bootstrap CI.")
def claims(ctx: Facts) -> Iterator[Finding]:
    """Each `[[claims]]` entry of the manifest is recomputed from the raw samples of the benchmark at the
    claim's point: the ratio of medians baseline/candidate with a seeded percentile-bootstrap confidence
    interval (policy `bootstrap_resamples`, `confidence`). The claim holds only if the interval's lower
    bound reaches `min_speedup`; the number a contributor typed is never trusted."""
    st = an.statement(ctx)
    if st is None:
        return
    label = an.statement_file(ctx)
    conf = ctx.policy.evidence.confidence
    for check in an.claim_checks(ctx):
        c = check.claim
        at = an.benchmark_at(st, an.point_key(c))
        label = an.item_file(ctx, at) if at is not None else an.statement_file(ctx)
        if check.estimate is None:
            yield Finding.error("FT308", f"claim {c.name!r} cannot be recomputed: {check.problem}",
                                point=an.point_dict(c), evidence_file=label, path=ctx.manifest_path,
                                fix=an.recollect_fix(ctx, f"benchmark {c.baseline} and {c.candidate} at the "
                                                          "claim's point"))
        elif not check.holds:
            e = check.estimate
            yield Finding.error(
                "FT308",
                f"claim {c.name!r} ({c.candidate} vs {c.baseline} >= {_x(c.min_speedup)}) does not hold: "
                f"median ratio {_x(e.ratio)}, {conf:.0%} CI [{e.low:.3g}, {e.high:.3g}] "
                f"from {e.n_baseline}+{e.n_candidate} samples",
                point=an.point_dict(c), evidence_file=label, path=ctx.manifest_path,
                fix=f"lower min_speedup to at most {e.low:.2f} in fasttrack.toml, or make the kernel faster "
                    "and re-collect")


@rule("FT309", "A comparison must be like with like (same GPU kind and count, or per GPU).")
def like_with_like(ctx: Facts) -> Iterator[Finding]:
    """Stock and candidate must run on the same GPU kind and the same number of GPUs, or both be
    normalised per GPU (`per_gpu`). A claim's `gpus` must equal the GPU count both sides ran on. (The Kimi
    K3 write-up's interactivity figure compared 16 GPUs against 8; a harness should refuse that.)"""
    st = an.statement(ctx)
    if st is None or ctx.manifest is None:
        return
    fix = "time both sides on the same GPU kind and count (or record both per GPU) and re-collect"
    for bench in an.timed_benchmarks(st):
        stock = bench.variants.get(STOCK_VARIANT)
        if stock is None:
            continue
        for name in sorted(bench.variants):
            if name == STOCK_VARIANT:
                continue
            v = bench.variants[name]
            if v.per_gpu and stock.per_gpu:
                continue
            sides = (an.variant_gpu(bench, STOCK_VARIANT), stock.gpus), (an.variant_gpu(bench, name), v.gpus)
            if sides[0] != sides[1]:
                yield Finding.error(
                    "FT309", f"{name} ran on {sides[1][1]} x {sides[1][0]} but stock on "
                             f"{sides[0][1]} x {sides[0][0]} at {an.point_text(bench.point)}",
                    point=an.point_dict(bench.point), evidence_file=an.item_file(ctx, bench), fix=fix)
    for claim in ctx.manifest.claims:
        at = an.benchmark_at(st, an.point_key(claim))
        if at is None:
            continue
        for side in (claim.baseline, claim.candidate):
            sv = at.variants.get(side)
            if sv is not None and sv.gpus != claim.gpus:
                yield Finding.error(
                    "FT309", f"claim {claim.name!r} says gpus={claim.gpus}; {side} ran on {sv.gpus} GPUs",
                    point=an.point_dict(claim), path=ctx.manifest_path, evidence_file=an.item_file(ctx, at),
                    fix="state the claim with the GPU count both sides ran on")


@rule("FT310", "The candidate may not be slower than stock at any benchmarked point.")
def slower(ctx: Facts) -> Iterator[Finding]:
    """At every benchmarked point, each candidate variant is compared with stock from the raw samples. A
    median ratio stock/candidate below 1 is an error, even when the confidence interval is wide enough to
    reach 1: "not significantly slower" is not "faster", and a noisy run must not let a slower kernel in.
    Where the candidate loses, shrink the envelope so the guard falls back to stock there."""
    if an.statement(ctx) is None:
        return
    conf = ctx.policy.evidence.confidence

    def found() -> Iterator[Finding]:
        for bench, name, e in an.iter_candidate_ratios(ctx):
            if e.ratio >= 1.0:
                continue
            text = (f"{name} is slower than stock at {an.point_text(bench.point)}: median ratio "
                    f"{_x(e.ratio)}, {conf:.0%} CI [{e.low:.3g}, {e.high:.3g}]")
            fix = ("shrink the envelope to exclude this point (the guard then falls back to stock), or make "
                   "the kernel faster there and re-collect")
            label = an.item_file(ctx, bench)
            note = "" if e.high < 1.0 else " (the interval reaches 1, but the median is below it)"
            yield Finding.error("FT310", text + note, point=an.point_dict(bench.point), evidence_file=label,
                                fix=fix)

    yield from _capped("FT310", found())


@rule("FT311", "Results must be physically plausible (bandwidth, speedup).")
def implausible(ctx: Facts) -> Iterator[Finding]:
    """A variant that moves its bytes faster than the bandwidth measured on the same machine in the same
    run (the read bandwidth where measured, else the copy bandwidth, times the policy's
    `bandwidth_margin`), or a speedup over stock beyond `max_plausible_speedup`, is a measurement bug or a
    cheat (skipped work, reused outputs, a timer that did not wait): Sakana's 150x kernel was 3x slower
    when measured correctly. Only where the run measured no bandwidth is the vendor peak
    (`peak_bandwidth`) used, with a warning that the check is weaker."""
    st = an.statement(ctx)
    if st is None:
        return
    label = an.statement_file(ctx)
    ev = ctx.policy.evidence
    cap = ev.max_plausible_speedup
    fix = "check the kernel does all its work and the timing covers it, then re-collect"

    def found() -> Iterator[Finding]:
        unknown: set[str] = set()
        unmeasured: set[str] = set()
        for bench in an.usable_benchmarks(st):
            for name in sorted(bench.variants):
                bw = an.bandwidth(bench.variants[name])
                if bw is None:
                    continue
                gpu = an.variant_gpu(bench, name)
                measured = roofline(an.environment_of(ctx, bench))
                if measured is not None:
                    limit = measured * ev.bandwidth_margin
                    what = (f"the {_tbps(measured)} measured on that machine (x{ev.bandwidth_margin:g} "
                            "margin)")
                else:
                    peak = ev.peak_bandwidth.get(gpu)
                    if peak is None:
                        unknown.add(gpu)
                        continue
                    unmeasured.add(gpu)
                    limit, what = peak, f"the {gpu} peak of {_tbps(peak)}"
                if bw > limit:
                    yield Finding.error(
                        "FT311", f"{name} moves {_tbps(bw)} at {an.point_text(bench.point)}, above {what}",
                        point=an.point_dict(bench.point), evidence_file=an.item_file(ctx, bench), fix=fix)
        for bench, name, e in an.iter_candidate_ratios(ctx):
            if e.ratio > cap:
                yield Finding.error(
                    "FT311", f"{name} is {_x(e.ratio)} faster than stock at {an.point_text(bench.point)}, "
                             f"beyond the plausible {_x(cap)}",
                    point=an.point_dict(bench.point), evidence_file=an.item_file(ctx, bench), fix=fix)
        for gpu in sorted(unmeasured):
            yield Finding.warning("FT311", f"no bandwidth was measured on the {gpu} machine: plausibility "
                                           "was checked against the vendor peak only",
                                  evidence_file=label, fix=an.recollect_fix(ctx, "measure bandwidth"))
        for gpu in sorted(unknown):
            yield Finding.warning("FT311", f"the policy gives no peak bandwidth for {gpu}, so bandwidth "
                                           "plausibility was not checked",
                                  evidence_file=label, fix=f"add {gpu!r} to [evidence.peak_bandwidth]")

    yield from _capped("FT311", found())


@rule("FT312", "Every timed variant needs at least the policy's minimum number of samples.")
def samples(ctx: Facts) -> Iterator[Finding]:
    """Medians and bootstrap intervals from a handful of samples are noise: every variant at every timed
    point must keep at least `min_samples` raw samples (`samples_us`)."""
    st = an.statement(ctx)
    if st is None:
        return
    need = ctx.policy.evidence.min_samples

    def found() -> Iterator[Finding]:
        for bench in an.timed_benchmarks(st):
            for name in sorted(bench.variants):
                n = len(bench.variants[name].samples_us)
                if n < need:
                    yield Finding.error(
                        "FT312", f"{name} has {n} samples at {an.point_text(bench.point)}; at least {need} "
                                 "are required",
                        point=an.point_dict(bench.point), evidence_file=an.item_file(ctx, bench),
                        fix=an.recollect_fix(ctx, "raise --iterations"))

    yield from _capped("FT312", found())


@rule("FT313", "The timed outputs must match stock's (accuracy in the timed mode).")
def timed_accuracy(ctx: Facts) -> Iterator[Finding]:
    """The outputs of the timed runs themselves (same graph, same mode) must be compared with stock's and
    be within tolerance. A variant with no accuracy record was timed without being checked: a kernel can
    be fast because it skips work only when timed."""
    st = an.statement(ctx)
    if st is None:
        return

    def found() -> Iterator[Finding]:
        for bench in an.timed_benchmarks(st):
            pt = an.point_dict(bench.point)
            label = an.item_file(ctx, bench)
            for name in sorted(v for v in bench.variants if v != STOCK_VARIANT):
                acc = bench.accuracy.get(name)
                if acc is None or acc.checked == 0:
                    yield Finding.error("FT313", f"{name}'s timed outputs at {an.point_text(bench.point)} "
                                                 "were not checked against stock",
                                        point=pt, evidence_file=label, fix=an.recollect_fix(ctx))
                elif not acc.ok:
                    yield Finding.error(
                        "FT313", f"{name}'s timed outputs at {an.point_text(bench.point)} differ from "
                                 f"stock's: max abs error {acc.max_abs_error:.3g} "
                                 f"(atol {acc.atol:.3g}, rtol {acc.rtol:.3g})"
                                 + (f": {acc.reason[:200]}" if acc.reason else ""),
                        point=pt, evidence_file=label,
                        fix="fix the kernel so its outputs match stock in the timed (CUDA-graph) mode")

    yield from _capped("FT313", found())


@rule("FT319", "Benchmarks must follow fasttrack's timing protocol.")
def protocol(ctx: Facts) -> Iterator[Finding]:
    """fasttrack, not the contribution, owns timing: CUDA-graph replay (when the envelope uses graphs), the
    L2 cache flushed by at least its size outside the timed region, the persisting-L2 window reset, fresh
    inputs every iteration, all streams synchronised, and stock and each candidate interleaved in both
    orders. A point timed any other way is not evidence (each departure is a known way to game a timer), and
    neither is a measurement the collector itself rejected (`rejected`: a failed input or output check, a
    replaced timer, a raised persisting-L2 carve-out...)."""
    st = an.statement(ctx)
    if st is None or ctx.manifest is None:
        return
    graphs = ctx.manifest.envelope.cuda_graph != "none"

    def found() -> Iterator[Finding]:
        for bench in an.timed_benchmarks(st):
            p = bench.protocol
            if p is None:
                continue
            env = an.environment_of(ctx, bench)  # the L2 of the machine this point was timed on
            l2 = env.l2_bytes if env else None
            bad = []
            if graphs and not p.graph_replay:
                bad.append("not timed as CUDA-graph replay")
            if p.l2_flush_bytes == 0 or (l2 is not None and p.l2_flush_bytes < l2):
                bad.append(f"L2 flush of {p.l2_flush_bytes} bytes is smaller than the L2 ({l2} bytes)")
            if not p.persisting_l2_reset:
                bad.append("persisting-L2 window not reset")
            if not p.fresh_inputs:
                bad.append("inputs reused across iterations")
            if not p.streams_synchronized:
                bad.append("streams not synchronised")
            if p.iterations < 1:
                bad.append("no timed iterations")
            bad.extend(f"rejected by the collector: {why[:200]}" for why in bench.rejected[:5])
            for name in an.candidates(bench):
                before = any(_precedes(o, name, STOCK_VARIANT) for o in p.orders)
                after = any(_precedes(o, STOCK_VARIANT, name) for o in p.orders)
                if not (before and after):
                    bad.append(f"{name} and stock not interleaved in both orders")
            if bad:
                yield Finding.error("FT319", f"benchmark at {an.point_text(bench.point)}: " + "; ".join(bad),
                                    point=an.point_dict(bench.point), evidence_file=an.item_file(ctx, bench),
                                    fix=an.recollect_fix(ctx, "use an unmodified fasttrack"))

    yield from _capped("FT319", found())


def _precedes(order: list[str], first: str, second: str) -> bool:
    return first in order and second in order and order.index(first) < order.index(second)


# --------------------------------------------------------------------------------------- evals, sanitizer

@rule("FT314", "Model-level evals must be within their thresholds.")
def evals(ctx: Facts) -> Iterator[Finding]:
    """Each recorded eval is re-judged from its value, threshold and direction ("max": value <= threshold,
    "min": value >= threshold). A manifest that declares evals (or lm-eval results) with none in the
    bundle fails too."""
    st = an.statement(ctx)
    if st is None or ctx.manifest is None:
        return
    label = an.statement_file(ctx)
    declared = ctx.manifest.evidence
    if declared.evals and not st.predicate.evals:
        yield Finding.error("FT314", f"the manifest declares evals ({declared.evals}) but the bundle has "
                                     "none" + (" (in no part)" if an.multipart(ctx) else ""),
                            evidence_file=label, fix=an.recollect_fix(ctx, "run the evals"))
    if declared.lm_eval_results and not st.predicate.lm_eval:
        yield Finding.error("FT314", "the manifest declares lm-eval results but the bundle has none",
                            evidence_file=label, fix=an.recollect_fix(ctx))
    for e in st.predicate.evals:
        if not e.passed():
            op = "<=" if e.direction == "max" else ">="
            yield Finding.error("FT314", f"eval {e.name!r} = {e.value:.6g}, must be {op} {e.threshold:.6g}",
                                evidence_file=an.item_file(ctx, e),
                                point=an.point_dict(e.point) if e.point else None,
                                fix="fix the accuracy regression and re-collect the evidence")


@rule("FT315", "compute-sanitizer runs must be clean.")
def sanitizer_errors(ctx: Facts) -> Iterator[Finding]:
    """Every compute-sanitizer tool that ran (memcheck, racecheck, synccheck, initcheck) must report zero
    errors; a run with an unknown error count is not clean."""
    st = an.statement(ctx)
    if st is None:
        return
    for s in st.predicate.sanitizer:
        if s.ran and s.errors != 0:
            count = "an unknown number of" if s.errors is None else str(s.errors)
            detail = f": {s.summary.strip().splitlines()[0][:200]}" if s.summary.strip() else ""
            yield Finding.error("FT315", f"compute-sanitizer {s.tool} reported {count} errors{detail}",
                                evidence_file=an.item_file(ctx, s),
                                fix=f"run `compute-sanitizer --tool {s.tool}` on the sanitizer tests, fix "
                                    "the kernel, and re-collect")


@rule("FT316", "compute-sanitizer must have run (memcheck, racecheck, synccheck).")
def sanitizer_not_run(ctx: Facts) -> Iterator[Finding]:
    """Kernel races and out-of-bounds accesses pass numerical tests by luck. memcheck, racecheck and
    synccheck must each have run over the manifest's `sanitizer_tests`; one that did not is a warning, or
    an error when the policy says `sanitizer_not_run = "error"`."""
    st = an.statement(ctx)
    if st is None or ctx.manifest is None:
        return
    make = Finding.error if ctx.policy.evidence.sanitizer_not_run == "error" else Finding.warning
    label = an.statement_file(ctx)
    if not ctx.manifest.evidence.sanitizer_tests:
        yield make("FT316", "the manifest declares no sanitizer_tests, so compute-sanitizer never runs",
                   path=ctx.manifest_path, fix="list kernel tests under [evidence].sanitizer_tests")
        return
    for tool in REQUIRED_SANITIZERS:
        runs = [s for s in st.predicate.sanitizer if s.tool == tool]
        if any(s.ran for s in runs):
            continue
        reason = next((s.reason for s in runs if s.reason), None)
        yield make("FT316", f"compute-sanitizer {tool} did not run" + (f" ({reason})" if reason else ""),
                   evidence_file=label,
                   fix=an.recollect_fix(ctx, "install compute-sanitizer (CUDA toolkit) on the GPU machine"))


# --------------------------------------------------------------------------------------- environment, age

@rule("FT317", "The recorded environment must be complete and agree with the points.")
def environment(ctx: Facts) -> Iterator[Finding]:
    """The bundle must record the GPU (name, count, compute capability), driver, CUDA and torch versions,
    and for several GPUs how they are linked. Every point's GPU must be the recorded GPU, the machine must
    have enough GPUs for the largest TP evidenced, the compute capability must be the policy's for that
    GPU name, and a benchmark at tp = n must have been timed as n ranks (`world_size`). A bundle collected in
    parts is checked part by part: each part's points against its own machine."""
    if an.statement(ctx) is None:
        return
    for part, st in an.parsed_parts(ctx):
        yield from _environment_part(ctx, an.part_file(ctx, part), st)


def _environment_part(ctx: Facts, label: str, st: Statement) -> Iterator[Finding]:
    env = st.predicate.environment
    fix = an.recollect_fix(ctx)
    if env is None:
        yield Finding.error("FT317", "the bundle records no environment", evidence_file=label, fix=fix)
        return
    for name in ("driver", "cuda", "torch"):
        if not getattr(env, name):
            yield Finding.error("FT317", f"environment.{name} is missing", evidence_file=label, fix=fix)
    known = ctx.policy.envelope.known_hardware.get(env.gpu_name)
    if known is not None and known != env.compute_capability:
        yield Finding.error("FT317", f"environment says {env.gpu_name} has compute capability "
                                     f"{env.compute_capability}; the policy knows it as {known}",
                            evidence_file=label, fix=fix)
    # Points that actually ran here (a point recorded as not run, e.g. for other hardware, is FT304/FT306's).
    points = [t.point for t in st.predicate.kernel_tests if t.point and t.outcome != "skipped"]
    points += [b.point for b in an.timed_benchmarks(st)]
    others = sorted({p.gpu for p in points if p.gpu != env.gpu_name})
    if others:
        yield Finding.error("FT317", f"points name {', '.join(others)} but the bundle was collected on "
                                     f"{env.gpu_name}", evidence_file=label, fix=fix)
    max_tp = max((p.tp for p in points), default=1)
    if max_tp > env.gpu_count:
        yield Finding.error("FT317", f"points at tp={max_tp} but the machine has {env.gpu_count} GPUs",
                            evidence_file=label, fix=fix)
    if max_tp > 1 and not env.interconnect:
        yield Finding.error("FT317", f"points at tp={max_tp} but the bundle does not record how the GPUs are "
                                     "linked (environment.interconnect)", evidence_file=label, fix=fix)
    # A point at tp = n is timed as n ranks (one per GPU, in lockstep): a timing from fewer processes is not
    # a measurement of that deployment.
    for b in an.timed_benchmarks(st):
        if b.point.tp > 1 and b.world_size != b.point.tp:
            ran = f"{b.world_size} rank(s)" if b.world_size else "one process (no world_size recorded)"
            yield Finding.error("FT317", f"the benchmark at {an.point_text(b.point)} ran as {ran}, not as "
                                         f"{b.point.tp} ranks", point=an.point_dict(b.point),
                                evidence_file=label, fix=fix)


@rule("FT318", "Evidence should be recent (policy max_age_days).")
def age(ctx: Facts) -> Iterator[Finding]:
    """Drivers, CUDA, torch and the engine move on; evidence older than the policy's `max_age_days` is a
    warning (re-collect), and a collection date in the future is a warning (a wrong clock)."""
    if an.statement(ctx) is None:
        return
    now = datetime.now(UTC)
    limit = ctx.policy.evidence.max_age_days
    for part, st in an.parsed_parts(ctx):
        when = st.predicate.collected_at
        if when is None:
            continue
        label = an.part_file(ctx, part)
        if now - when > timedelta(days=limit):
            yield Finding.warning("FT318", f"the evidence was collected {(now - when).days} days ago "
                                           f"({when.date().isoformat()}), more than {limit}",
                                  evidence_file=label, fix=an.recollect_fix(ctx))
        elif when - now > FUTURE_SKEW:
            yield Finding.warning("FT318", f"collected_at {when.isoformat()} is in the future",
                                  evidence_file=label,
                                  fix=an.recollect_fix(ctx, "fix the GPU machine's clock"))


# The fields of `environment` that make two parts' numbers comparable: the GPU and the software stack.
STACK_FIELDS = ("gpu_name", "compute_capability", "driver", "cuda", "torch", "triton")
_HARDWARE_FIELDS = frozenset({"gpu_name", "compute_capability"})


@rule("FT322", "The parts of a bundle should be collected on the same GPU and software stack.")
def same_stack(ctx: Facts) -> Iterator[Finding]:
    """A bundle collected in parts (e.g. statement.tp1.json on one GPU, statement.tp2.json on two) is
    judged as one, and a maintainer compares its parts' numbers (TP 1 against TP 2). Parts from different
    machines are legitimate, but numbers from a different GPU, driver, CUDA, torch or triton are not like
    with like: each of those that differs between parts is a warning naming the field and every part's
    value. A field a part does not record is left out of the comparison; a bundle of one part never
    triggers this rule."""
    if an.statement(ctx) is None:
        return
    envs = [(part.name, st.predicate.environment) for part, st in an.parsed_parts(ctx)
            if st.predicate.environment is not None]
    if len(envs) < 2:
        return
    fix = an.recollect_fix(ctx, "collect every part with the same GPU kind, driver, CUDA, torch and triton "
                                "(re-collect the part that differs on the other part's stack)")
    for name in STACK_FIELDS:
        groups: dict[str, list[str]] = {}  # value -> the parts that recorded it, in part order
        for part_name, env in envs:
            value = getattr(env, name)
            if value is not None:
                groups.setdefault(str(value), []).append(part_name)
        if len(groups) < 2:
            continue
        where = [f"{value} in {', '.join(names)}" for value, names in groups.items()]
        kind = "hardware" if name in _HARDWARE_FIELDS else "software"
        yield Finding.warning("FT322", f"parts were collected on different {kind}: {name} is {where[0]} but "
                                       + " and ".join(where[1:]),
                              evidence_file=an.statement_file(ctx), fix=fix)
