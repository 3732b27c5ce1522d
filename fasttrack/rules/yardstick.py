"""FT335-FT349: the engine's yardstick (docs/baseline-contract.md).

The contributor controls only the candidate: stock, the fp32 oracle, the inputs, the byte count, the
tolerances and the eval bounds come from the engine side and are bound into the statement. These rules hold a
statement to that: measured against the policy's baseline as it is in the judged tree, stock running a
backend the engine itself would pick on that GPU, claims only against engine-side variants, no tolerance
above the policy's cap, every variant checked against the oracle, every point covered by the named tests,
no point left untimed for a reason other than the machine, a plausible byte count and a yardstick that is
not itself slow. Numbers are recomputed from the recorded samples and kernel names, never taken as typed.
"""

from __future__ import annotations

import fnmatch
import statistics
from collections.abc import Iterator
from typing import TYPE_CHECKING

from fasttrack.evidence import analysis as an
from fasttrack.evidence import yardstick_facts as yf
from fasttrack.evidence.backends import identify
from fasttrack.evidence.bundle import STOCK_VARIANT
from fasttrack.findings import Finding
from fasttrack.policy import EvalBound
from fasttrack.rules.base import Catalogue

if TYPE_CHECKING:
    from fasttrack.facts.model import Facts

catalogue = Catalogue("yardstick")
rule = catalogue.rule
LIMIT = 25


def _capped(found: Iterator[Finding], code: str) -> Iterator[Finding]:
    rest = 0
    for i, f in enumerate(found):
        if i < LIMIT:
            yield f
        else:
            rest += 1
    if rest:
        yield Finding.error(code, f"and {rest} more like the above")


@rule("FT335", "The evidence must be measured against the policy's baseline, as it is in the judged tree.")
def baseline_bound(ctx: Facts) -> Iterator[Finding]:
    """Every statement must record the engine-side baseline its benchmarks and oracle checks ran against
    (`predicate.baseline`: the policy's `[baselines.<model>]` entry and the content digest of its
    directory). The digest must equal the digest of that directory in the judged tree: evidence measured
    against another (an older, a slower, an edited) baseline is stale, with the baseline files that
    changed named. A policy without a baseline for the model fails closed."""
    if ctx.manifest is None or ctx.evidence is None:
        return
    spec = yf.baseline_spec(ctx)
    model = ctx.manifest.contribution.model
    if spec is None:
        yield Finding.error("FT335", f"the policy has no engine baseline for model {model!r}: no speedup can "
                                     "be judged against the engine's own path",
                            fix=f"the engine side adds [baselines.{model}] to the policy and its package "
                                "under baselines/; a contribution never supplies its own stock")
        return
    head = ctx.judged_baseline.get()
    for part, st in an.parsed_parts(ctx):
        label = an.part_file(ctx, part)
        rec = st.predicate.baseline
        if rec is None:
            yield Finding.error("FT335", f"{part.name} records no engine baseline: its stock is not known to "
                                         "be the engine's", evidence_file=label,
                                fix=an.recollect_fix(ctx, "collect with this fasttrack (it builds stock from "
                                                          "the policy's baseline)"))
            continue
        if rec.model != model or rec.root != spec.root or rec.case != spec.case:
            yield Finding.error("FT335", f"{part.name} was measured against baseline {rec.case} at "
                                         f"{rec.root} for {rec.model!r}; the policy names {spec.case} at "
                                         f"{spec.root}",
                                evidence_file=label, fix=an.recollect_fix(ctx))
            continue
        if head is None:
            yield Finding.error("FT335", f"the baseline directory {spec.root} is not in the judged tree, so "
                                         f"{part.name}'s baseline digest cannot be checked",
                                evidence_file=label, fix="verify from a checkout that holds baselines/")
        elif head.sha256 != rec.digest:
            changed = yf.changed_files(rec.files, head.files)
            shown = ", ".join(changed[:8]) + (" ..." if len(changed) > 8 else "")
            yield Finding.error("FT335", f"{part.name} is stale: the engine baseline changed since it was "
                                         f"collected ({shown or 'digest differs'})",
                                evidence_file=label,
                                fix=an.recollect_fix(ctx, "collect again against the current baseline"))


@rule("FT336", "Stock must run a backend the engine accepts on that GPU for every policy stage.")
def stock_backend(ctx: Facts) -> Iterator[Finding]:
    """For each stage the policy lists for the point's compute capability (for sm90 MLA decode:
    FLASH_ATTN_MLA, FLASHMLA, FLASHINFER_MLA in vLLM's order; TRITON_MLA rejected), stock's profiled kernel
    names must show an accepted backend and no rejected one. A stock whose kernels are unknown (not
    profiled) cannot be shown to be the engine's choice and fails closed: a box that can run none of the
    accepted backends cannot produce evidence for that GPU."""
    st = an.statement(ctx)
    spec = yf.baseline_spec(ctx)
    if st is None or spec is None:
        return

    def found() -> Iterator[Finding]:
        for bench in an.usable_benchmarks(st):
            cc = yf.compute_capability(ctx, bench)
            stages = spec.stages_for(cc) if cc else []
            if not stages:
                continue
            stock = bench.variants.get(STOCK_VARIANT)
            names = list((stock.kernel_times_us or {}) if stock else {})
            pt = an.point_dict(bench.point)
            label = an.item_file(ctx, bench)
            if not names:
                yield Finding.error("FT336", f"stock's kernels at {an.point_text(bench.point)} were not "
                                             "profiled: its backend cannot be checked", point=pt,
                                    evidence_file=label, fix=an.recollect_fix(ctx))
                continue
            for stage in stages:
                m = identify(stage, names)
                if m.rejected:
                    yield Finding.error(
                        "FT336", f"stock at {an.point_text(bench.point)} runs {', '.join(m.rejected)} for "
                                 f"{stage.stage}, which the engine does not pick on sm {cc}", point=pt,
                        evidence_file=label,
                        fix="collect on a box where one of "
                            + ", ".join(b.name for b in stage.accepted) + " runs")
                elif m.accepted is None:
                    yield Finding.error(
                        "FT336", f"stock at {an.point_text(bench.point)} shows no kernel of an accepted "
                                 f"{stage.stage} backend ({', '.join(b.name for b in stage.accepted)})",
                        point=pt, evidence_file=label, fix=an.recollect_fix(ctx))
                recorded = bench.backends.get(stage.stage)
                if m.accepted is not None and recorded not in (None, m.accepted):
                    yield Finding.error(
                        "FT336", f"{an.point_text(bench.point)} records {stage.stage} backend {recorded!r} "
                                 f"but stock's kernels show {m.accepted!r}", point=pt, evidence_file=label,
                        fix=an.recollect_fix(ctx))

    yield from _capped(found(), "FT336")


@rule("FT337", "Claims and candidates are measured against engine-side variants only.")
def engine_side_only(ctx: Facts) -> Iterator[Finding]:
    """A claim's `baseline` must be a variant the engine supplied (stock, or an engine-side variant such as
    torch.compile of stock), and its `candidate` a variant the contribution supplied; at every timed point,
    `stock` must be recorded as the engine's. A manifest whose claims compare against a stock of its own
    is measuring itself."""
    st = an.statement(ctx)
    if st is None or ctx.manifest is None:
        return
    for claim in ctx.manifest.claims:
        for bench in an.usable_benchmarks(st):
            if an.point_key(bench.point) != an.point_key(claim):
                continue
            base = bench.variants.get(claim.baseline)
            cand = bench.variants.get(claim.candidate)
            if base is not None and base.origin != "engine":
                yield Finding.error("FT337", f"claim {claim.name!r} compares against {claim.baseline!r}, "
                                             f"which the engine did not supply (origin {base.origin})",
                                    point=an.point_dict(bench.point), evidence_file=an.item_file(ctx, bench),
                                    fix="claim against stock (or another engine-side variant)")
            stock = bench.variants.get(STOCK_VARIANT)
            slower = (base is not None and base.origin == "engine" and claim.baseline != STOCK_VARIANT
                      and stock is not None and bool(base.samples_us) and bool(stock.samples_us))
            if slower and base is not None and stock is not None:
                mb, ms = statistics.median(base.samples_us), statistics.median(stock.samples_us)
                if mb > ms:
                    yield Finding.error(
                        "FT337", f"claim {claim.name!r} compares against {claim.baseline!r}, which is slower "
                                 f"than stock at {an.point_text(bench.point)} (median {mb:.4g} us vs stock's "
                                 f"{ms:.4g} us): the speedup is over a yardstick the engine would not run",
                        point=an.point_dict(bench.point), evidence_file=an.item_file(ctx, bench),
                        fix="claim against stock (the engine's fastest path at that point)")
            if cand is not None and cand.origin != "contribution":
                yield Finding.error("FT337", f"claim {claim.name!r}: candidate {claim.candidate!r} is not "
                                             "the contribution's variant", point=an.point_dict(bench.point),
                                    evidence_file=an.item_file(ctx, bench),
                                    fix="name one of the contribution's candidates")

    def found() -> Iterator[Finding]:
        for bench in an.timed_benchmarks(st):
            stock = bench.variants.get(STOCK_VARIANT)
            if stock is not None and stock.origin != "engine":
                yield Finding.error("FT337", f"stock at {an.point_text(bench.point)} is not recorded as the "
                                             "engine's baseline", point=an.point_dict(bench.point),
                                    evidence_file=an.item_file(ctx, bench),
                                    fix=an.recollect_fix(ctx, "collect with this fasttrack"))

    yield from _capped(found(), "FT337")


@rule("FT338", "No check may use a tolerance looser than the policy's cap for its dtype.")
def tolerance_caps(ctx: Facts) -> Iterator[Finding]:
    """The policy caps tolerances per dtype (`[evidence.tolerance_caps]`: atol and rtol of element-wise
    checks, and `record`, the largest relative tolerance a kernel test may pass to `fasttrack_record`). A
    larger tolerance anywhere (a kernel test's record, the timed accuracy check, the oracle check) is an
    error, and so is a check on a dtype the policy has no cap for: a test that records `tolerance=1e9`
    checks nothing."""
    st = an.statement(ctx)
    if st is None:
        return
    caps = ctx.policy.evidence.tolerance_caps

    def found() -> Iterator[Finding]:
        for t in st.predicate.kernel_tests:
            if t.tolerance is None or t.point is None:
                continue
            cap = caps.get(t.point.dtype)
            if cap is None or t.tolerance > cap.record:
                limit = "no cap" if cap is None else f"the cap {cap.record:g}"
                yield Finding.error("FT338", f"{t.nodeid} records tolerance {t.tolerance:g} for "
                                             f"{t.point.dtype}, above {limit}", point=an.point_dict(t.point),
                                    evidence_file=an.item_file(ctx, t),
                                    fix="tighten the test's tolerance to the policy's cap")
        for bench in an.timed_benchmarks(st):
            cap = caps.get(bench.point.dtype)
            checks = [("timed accuracy", n, a.atol, a.rtol) for n, a in bench.accuracy.items()]
            checks += [("oracle check", n, o.atol, o.rtol) for n, o in bench.oracle.items()]
            for what, name, atol, rtol in checks:
                if cap is None or atol > cap.atol or rtol > cap.rtol:
                    limit = "no cap" if cap is None else f"the cap (atol {cap.atol:g}, rtol {cap.rtol:g})"
                    yield Finding.error("FT338", f"{name}'s {what} at {an.point_text(bench.point)} used atol "
                                                 f"{atol:g}, rtol {rtol:g}: above {limit}",
                                        point=an.point_dict(bench.point),
                                        evidence_file=an.item_file(ctx, bench),
                                        fix=an.recollect_fix(ctx, "collect with this fasttrack (it uses the "
                                                                  "policy's caps)"))

    yield from _capped(found(), "FT338")


@rule("FT339", "Every benchmarked variant must match the engine's fp32 oracle at every point.")
def oracle_checked(ctx: Facts) -> Iterator[Finding]:
    """At every point it times, the collector itself runs every variant (stock included) on a fresh input
    and compares it with the baseline's fp32 oracle under the policy's tolerance. A timed point without
    that record, or a variant that fails it, is an error: agreeing with stock is not enough when stock is
    wrong too."""
    st = an.statement(ctx)
    if st is None:
        return

    def found() -> Iterator[Finding]:
        for bench in an.timed_benchmarks(st):
            pt = an.point_dict(bench.point)
            label = an.item_file(ctx, bench)
            for name in sorted(bench.variants):
                o = bench.oracle.get(name)
                if o is None:
                    yield Finding.error("FT339", f"{name} at {an.point_text(bench.point)} was not checked "
                                                 "against the engine's oracle", point=pt, evidence_file=label,
                                        fix=an.recollect_fix(ctx))
                elif not o.ok:
                    err = "unknown" if o.max_abs_error is None else f"{o.max_abs_error:.3g}"
                    yield Finding.error("FT339", f"{name} at {an.point_text(bench.point)} differs from the "
                                                 f"fp32 oracle: max abs error {err} (atol {o.atol:g}, rtol "
                                                 f"{o.rtol:g})" + (f": {o.reason[:200]}" if o.reason else ""),
                                        point=pt, evidence_file=label,
                                        fix="fix the kernel so it matches the oracle, then re-collect")

    yield from _capped(found(), "FT339")


def _is_test(function: str, named: str) -> bool:
    """`function` (a nodeid without parameters) is the test `named` in the manifest: the same
    `path::function`, or, for a bare function name, a function of that exact name (a decoy whose nodeid
    merely ends with the name, `decoy/tests/test_k.py::test_x` or `::xtest_x`, is not it)."""
    if "::" in named:
        return function == named
    return function.rsplit("::", 1)[-1] == named


@rule("FT340", "The manifest's point tests must run and record their error at every envelope point.")
def point_tests(ctx: Facts) -> Iterator[Finding]:
    """The manifest names (`[evidence] point_tests`) the test functions that compare the kernels with the
    oracle at each envelope point. Each must have a passed result at every point on the collected
    hardware, with the error it measured (`fasttrack_record(max_error=...)`): a test that only records a
    tolerance, or never runs at a point, is not coverage. A manifest that names none fails closed."""
    st = an.statement(ctx)
    if st is None or ctx.manifest is None:
        return
    named = ctx.manifest.evidence.point_tests
    if not named:
        yield Finding.error("FT340", "the manifest names no point_tests: nothing says which tests must run "
                                     "at every envelope point", evidence_file=an.statement_file(ctx),
                            fix="list the per-point test functions in [evidence] point_tests "
                                "(e.g. \"tests/test_gpu.py::test_fused_vs_oracle\")")
        return
    by_point = an.tests_by_point(st)
    collected = {an.point_key(t.point) for t in st.predicate.kernel_tests if t.point is not None}
    elsewhere = an.not_collected(ctx)
    label = an.statement_file(ctx)

    def found() -> Iterator[Finding]:
        for ep in an.envelope_points(ctx):
            key = an.point_key(ep)
            if key not in collected and key in elsewhere and yf.machine_only(elsewhere[key]):
                continue  # another machine's or part's point: FT304/FT306 judge whether it is anywhere
            tests = by_point.get(key, [])
            for fn in named:
                hits = [t for t in tests if _is_test(an.test_function(t.nodeid), fn)]
                good = [t for t in hits if t.outcome == "passed" and t.max_error is not None]
                if good:
                    continue
                if not hits:
                    why = "did not run"
                elif any(t.outcome == "passed" for t in hits):
                    why = "passed without recording the error it measured"
                else:
                    why = "did not pass"
                yield Finding.error("FT340", f"{fn} {why} at {an.point_text(ep)}", point=an.point_dict(ep),
                                    evidence_file=label,
                                    fix="run it at every point and record max_error with fasttrack_record")

    yield from _capped(found(), "FT340")


@rule("FT341", "A benchmark point may go untimed only because the machine cannot run it.")
def untimed(ctx: Facts) -> Iterator[Finding]:
    """A point inside the envelope whose benchmark returned nothing must say why, and the only acceptable
    why is the machine (another GPU kind, too few GPUs, another part of the bundle). A candidates entry
    that returned nothing, raised, or broke the contract at a point fails coverage there."""
    st = an.statement(ctx)
    if st is None:
        return

    def found() -> Iterator[Finding]:
        for bench in st.predicate.benchmarks:
            env = an.environment_of(ctx, bench)
            if (bench.not_run is not None and bench.not_run_by == "machine" and env is not None
                    and env.gpu_name == bench.point.gpu and bench.point.tp <= (env.gpu_count or 0)):
                yield Finding.error("FT341", f"{an.point_text(bench.point)} was not timed, blamed on the "
                                             f"machine, but the machine that collected it is a "
                                             f"{env.gpu_name} with {env.gpu_count} GPU(s): "
                                             f"{bench.not_run[:300]}", point=an.point_dict(bench.point),
                                    evidence_file=an.item_file(ctx, bench),
                                    fix="time the point (the engine's baseline has a case for every point "
                                        "of its model on a GPU it supports), or shrink the envelope")
                continue
            if bench.not_run is None or bench.not_run_by in (None, "machine"):
                continue
            yield Finding.error("FT341", f"{an.point_text(bench.point)} was not timed ({bench.not_run_by}): "
                                         f"{bench.not_run[:300]}", point=an.point_dict(bench.point),
                                evidence_file=an.item_file(ctx, bench),
                                fix="make the candidates entry return variants at every envelope point, or "
                                    "shrink the envelope")

    yield from _capped(found(), "FT341")


@rule("FT343", "Stock at a claimed point should reach the policy's fraction of the measured roofline.")
def slow_stock(ctx: Facts) -> Iterator[Finding]:
    """A speedup over a slow yardstick says little. At every claimed point stock's achieved bandwidth
    (the engine's byte count over stock's median) is compared with the roofline measured on the same machine
    in the same run (the read bandwidth where measured, else the copy bandwidth); below the policy's
    `min_stock_bandwidth_fraction` it is a warning, or an error when the policy says `slow_stock =
    "error"`."""
    st = an.statement(ctx)
    if st is None or ctx.manifest is None:
        return
    ev = ctx.policy.evidence
    make = Finding.error if ev.slow_stock == "error" else Finding.warning
    claimed = {an.point_key(c) for c in ctx.manifest.claims}
    for bench in an.usable_benchmarks(st):
        if an.point_key(bench.point) not in claimed:
            continue
        frac = yf.stock_fraction(ctx, bench)
        if frac is not None and frac < ev.min_stock_bandwidth_fraction:
            yield make("FT343", f"stock reaches {frac:.0%} of the measured roofline at "
                                f"{an.point_text(bench.point)}, below the policy's "
                                f"{ev.min_stock_bandwidth_fraction:.0%}: the yardstick itself is slow",
                       point=an.point_dict(bench.point), evidence_file=an.item_file(ctx, bench),
                       fix="check that the baseline is what the engine runs on this GPU")


@rule("FT344", "Every timed variant needs a plausible byte count from the engine.")
def byte_count(ctx: Facts) -> Iterator[Finding]:
    """The bandwidth figures and the plausibility check divide the engine baseline's `bytes_moved` by
    the median time. A variant without one, or a count so small that stock would reach less than the
    policy's `min_plausible_bandwidth_fraction` of the measured roofline, is an error: `bytes_moved = 1`
    makes every kernel look plausible."""
    st = an.statement(ctx)
    if st is None:
        return
    floor = ctx.policy.evidence.min_plausible_bandwidth_fraction

    def found() -> Iterator[Finding]:
        for bench in an.usable_benchmarks(st):
            pt = an.point_dict(bench.point)
            missing = sorted(n for n, v in bench.variants.items() if v.bytes_moved is None)
            if missing:
                yield Finding.error("FT344", f"{', '.join(missing)} at {an.point_text(bench.point)} "
                                             "record no bytes_moved", point=pt,
                                    evidence_file=an.item_file(ctx, bench),
                                    fix="the engine baseline must report bytes_moved(); re-collect")
                continue
            frac = yf.stock_fraction(ctx, bench)
            if frac is not None and frac < floor:
                yield Finding.error("FT344", f"bytes_moved at {an.point_text(bench.point)} is implausibly "
                                             f"small: stock would reach {frac:.2%} of the measured roofline",
                                    point=pt, evidence_file=an.item_file(ctx, bench),
                                    fix="the engine baseline must count the bytes the layer moves")

    yield from _capped(found(), "FT344")


def _strictest(bounds: list[EvalBound]) -> EvalBound | None:
    """The tightest of every bound whose pattern matches (a name built to match a looser pattern first, e.g.
    `equiv.a.hidden_rel_err_median.b.hidden_rel_err_max`, is held to all of them)."""
    if not bounds:
        return None
    maxes = [b.max for b in bounds if b.max is not None]
    mins = [b.min for b in bounds if b.min is not None]
    return EvalBound(max=min(maxes) if maxes else None, min=max(mins) if mins else None)


@rule("FT345", "Eval thresholds must lie within the policy's bounds.")
def eval_bounds(ctx: Facts) -> Iterator[Finding]:
    """Model-level evals are recomputed against their own thresholds by FT314; here the thresholds
    themselves are held to the policy (`[evidence.eval_bounds]`, fnmatch on the eval name): a "max" eval's
    threshold may not exceed the bound's `max`, a "min" eval's may not fall below its `min`. An eval no
    bound covers is an error: the contributor does not choose how close is close enough."""
    st = an.statement(ctx)
    if st is None:
        return
    bounds = ctx.policy.evidence.eval_bounds
    for e in st.predicate.evals:
        bound = _strictest([b for pat, b in bounds.items() if fnmatch.fnmatchcase(e.name, pat)])
        label = an.item_file(ctx, e)
        if bound is None:
            yield Finding.error("FT345", f"eval {e.name!r} has no bound in the policy", evidence_file=label,
                                fix="the engine side bounds it in [evidence.eval_bounds], or drop the eval")
        elif e.direction == "max" and (bound.max is None or e.threshold > bound.max):
            yield Finding.error("FT345", f"eval {e.name!r}: threshold {e.threshold:.6g} is above the "
                                         f"policy's max {bound.max}", evidence_file=label,
                                fix="tighten the eval's threshold to the policy's bound")
        elif e.direction == "min" and (bound.min is None or e.threshold < bound.min):
            yield Finding.error("FT345", f"eval {e.name!r}: threshold {e.threshold:.6g} is below the "
                                         f"policy's min {bound.min}", evidence_file=label,
                                fix="tighten the eval's threshold to the policy's bound")


@rule("FT346", "Signed audits of the evidence must agree with it.")
def audits(ctx: Facts) -> Iterator[Finding]:
    """A maintainer re-runs points of the bundle with `fasttrack audit` on their own GPU and commits the
    signed record under `audits/`. A signed audit of a statement in the bundle that did not reproduce its
    medians, ratios or oracle checks within the policy's `[evidence.audit]` tolerances is an error. An
    unreadable, unsigned or untrusted record, or one of a statement no longer in the bundle, is a warning
    (it proves nothing either way); an agreeing one is reported as info."""
    for a in ctx.audits.get():
        label = f"{an.bundle_label(ctx)}/{a.name}"
        if a.record is None:
            yield Finding.warning("FT346", f"{a.name}: {a.problem}", evidence_file=label,
                                  fix="re-run fasttrack audit, or remove the file")
            continue
        if a.signature_valid is not True:
            why = ("unsigned" if a.signature_valid is None
                   else f"signed, but the signature does not verify ({a.signature_reason})")
            yield Finding.warning("FT346", f"{a.name} is {why}: it is not counted", evidence_file=label,
                                  fix="sign it with a key in the policy's allowed signers (fasttrack audit "
                                      "--sign-key)")
            continue
        if a.statement_file is None:
            yield Finding.warning("FT346", f"{a.name} (by {a.signer}) audits a statement no longer in the "
                                           "bundle", evidence_file=label,
                                  fix="audit the current statement again")
            continue
        rec = a.record
        n = len(rec.points)
        if a.self_audit:
            yield Finding.warning("FT346", f"{a.name}: {a.signer} signed the statement it audits: a "
                                           "contributor's re-run of their own evidence is not an audit and "
                                           "is not counted", evidence_file=label,
                                  fix="have a maintainer (another allowed signer) run fasttrack audit")
            continue
        if rec.agreed:
            yield Finding.info("FT346", f"{a.name}: {a.signer} re-ran {n} point(s) of {a.statement_file} and "
                                        "they agreed", evidence_file=label)
            continue
        bad = [p for p in rec.points if not p.agreed]
        detail = "; ".join(f"{p.point.key()}: {', '.join(p.reasons[:2])}" for p in bad[:3])
        yield Finding.error("FT346", f"{a.name}: {a.signer} re-ran {n} point(s) of {a.statement_file} and "
                                     f"{len(bad)} did not reproduce ({detail[:600]})", evidence_file=label,
                            fix="find out why the contributor's figures do not reproduce; re-collect the "
                                "evidence")


@rule("FT347", "Stock must be timed by the engine's own pass and agree with stock beside the candidates.")
def engine_pass(ctx: Facts) -> Iterator[Finding]:
    """Contribution code runs in the process that times the candidates, where it can reach whatever that
    process holds (stock's timer, its records, the GPU stock runs on). So stock is timed twice at every
    point: alone, by the engine's own pass, in a process that never imported the contribution (those figures
    are the ones in `variants` and the ratios' denominator), and beside the candidates in the contribution's
    process (`stock_beside`). A timed point with a contribution variant but no engine pass is an error
    (re-collect with this fasttrack); two stock medians further apart than the policy's
    `[evidence.separation] stock_agreement` are an error: something in the contribution's process changed
    how fast stock ran there."""
    tol = ctx.policy.evidence.separation.stock_agreement

    def found() -> Iterator[Finding]:
        for _part, st in an.parsed_parts(ctx):
            for bench in an.timed_benchmarks(st):
                if not an.candidates(bench):
                    continue
                where = an.point_text(bench.point)
                loc = {"point": an.point_dict(bench.point), "evidence_file": an.item_file(ctx, bench)}
                alone, beside = bench.variants.get(STOCK_VARIANT), bench.stock_beside
                if bench.separation != "engine-process" or beside is None or alone is None:
                    yield Finding.error("FT347", f"stock at {where} was not timed by the engine's own pass "
                                                 "(a process without the contribution's code): its figures "
                                                 "came from the process the contribution's code ran in",
                                        **loc,
                                        fix=an.recollect_fix(ctx, "collect with this fasttrack"))
                    continue
                if not alone.samples_us or not beside.samples_us:
                    yield Finding.error("FT347", f"stock at {where} has no samples in one of its two passes",
                                        **loc, fix=an.recollect_fix(ctx))
                    continue
                ma, mb = statistics.median(alone.samples_us), statistics.median(beside.samples_us)
                gap = abs(mb / ma - 1.0) if ma > 0 else float("inf")
                if gap > tol:
                    yield Finding.error(
                        "FT347", f"stock at {where} took {mb:.4g} us (median) beside the candidates but "
                                 f"{ma:.4g} us alone in the engine's own pass, {gap * 100:.1f}% apart (the "
                                 f"policy allows {tol * 100:.1f}%): something in the contribution's process "
                                 "changed how fast stock ran there", **loc,
                        fix="find what in the candidates' process slows or speeds stock (threads, GPU work "
                            "left running, patched libraries); " + an.recollect_fix(ctx))

    yield from _capped(found(), "FT347")


@rule("FT348", "The bundle needs the policy's number of agreeing maintainer audits.")
def audits_required(ctx: Facts) -> Iterator[Finding]:
    """A policy may require that a maintainer re-ran points of the evidence before it counts
    (`[evidence.audit] required`): agreeing, signed audits by an allowed signer other than the statement's
    own (`fasttrack audit`). Fewer than that is an error; a disagreeing audit is FT346."""
    need = ctx.policy.evidence.audit.required
    if need <= 0 or ctx.evidence is None or an.statement(ctx) is None:
        return
    agreeing = {a.signer for a in ctx.audits.get()
                if a.record is not None and a.signature_valid is True and a.statement_file is not None
                and not a.self_audit and a.record.agreed}
    if len(agreeing) < need:
        yield Finding.error("FT348", f"the policy requires {need} agreeing maintainer audit(s) of the "
                                     f"evidence; it has {len(agreeing)}", evidence_file=an.bundle_label(ctx),
                            fix="ask a maintainer to run `fasttrack audit` on the statement on their own GPU "
                                "and commit the signed record under audits/")


@rule("FT349", "Every part of the evidence must come from the one collect run that wrote the statement.")
def one_run_custody(ctx: Facts) -> Iterator[Finding]:
    """Each phase of `fasttrack collect` runs contribution code with write access to the work dir. Within one
    run the collector reads every phase's results right after the phase ended (and killed what it left
    running), before any other contribution code runs, and builds the statement from what it read. Results
    resumed from the work dir of an earlier run were on disk while that run's later phases ran: a benchmark
    rewritten by the contribution's evals, a test result by its sanitizer tests. So a statement whose
    `collector.custody` marks a part `resumed`, or that records no custody at all, is an error: collect again
    in one run (`--fresh`, with `--phase-limit` to bound each phase)."""
    for part, st in an.parsed_parts(ctx):
        coll = st.predicate.collector
        label = f"{an.bundle_label(ctx)}/{part.name}"
        custody = coll.custody if coll is not None else None
        if custody is None:
            yield Finding.error("FT349", f"{label} records no custody of its results: which of them the "
                                         "collecting run read itself cannot be told", evidence_file=label,
                                fix=an.recollect_fix(ctx, "collect with this fasttrack in one run"))
            continue
        resumed = [p for p, how in custody.items() if how == "resumed"]
        if resumed:
            yield Finding.error("FT349", f"{label}: {', '.join(resumed)} resumed from an earlier collect "
                                         "run's work dir, where contribution code of that run's later "
                                         "phases could rewrite them", evidence_file=label,
                                fix="collect in one run: `fasttrack collect --fresh` (bound the phases with "
                                    "--phase-limit PHASE=SECONDS instead of separate runs)")
