"""The evidence part of the Verdict (`EvidenceSummary`): what the bundle shows, for renderers and the
dashboard. No raw samples; the numbers are the ones the FT3xx rules judged (same functions)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from fasttrack.evidence import analysis as an
from fasttrack.evidence.bundle import COMPILE_VARIANT, STOCK_VARIANT
from fasttrack.evidence.loaded import LoadedPart
from fasttrack.evidence.stats import median
from fasttrack.verdict import (
    BenchmarkRow,
    ClaimResult,
    EvalResult,
    EvidenceSummary,
    PointEvidence,
    PointStatus,
    SanitizerResult,
)

if TYPE_CHECKING:
    from fasttrack.context import Context


def summarize(ctx: Context) -> EvidenceSummary | None:
    """None without a manifest (no contribution, so no evidence to speak of); otherwise the summary,
    with `present=False` when there is no readable statement."""
    if ctx.manifest is None:
        return None
    label = an.bundle_label(ctx)
    st = an.statement(ctx)
    if st is None:
        return EvidenceSummary(bundle_path=label, present=False)
    # A bundle collected in parts is fresh and signed only if every part is.
    pp: list[LoadedPart | None] = [part for part, _ in an.parsed_parts(ctx)] or [None]
    freshes = [an.freshness(ctx, part) for part in pp]
    sigs = [an.signature(ctx, part) for part in pp]
    fr = next((f for f in freshes if f.fresh is False), next((f for f in freshes if f.fresh is None),
                                                             freshes[0]))
    p = st.predicate
    stale = any(f.fresh is False for f in freshes)
    changed = (freshes[0].delta.all_paths() if len(freshes) == 1
               else sorted({path for f in freshes for path in f.delta.all_paths()}))
    signers = sorted({s.principal for s in sigs if s.principal})

    points = []
    for cov in an.coverage(ctx):
        if stale:
            status = PointStatus.STALE
        elif cov.failed:
            status = PointStatus.FAILED
        elif cov.covered:
            status = PointStatus.PASSED
        else:
            status = PointStatus.MISSING
        points.append(PointEvidence(point=an.point_dict(cov.point), status=status,
                                    tests=cov.passed + cov.failed, failed=cov.failed,
                                    max_error=cov.max_error))

    claims = []
    for check in an.claim_checks(ctx):
        e = check.estimate
        claims.append(ClaimResult(name=check.claim.name, claimed=check.claim.min_speedup,
                                  median_ratio=e.ratio if e else None, ci_low=e.low if e else None,
                                  ci_high=e.high if e else None, holds=check.holds and not stale,
                                  point=an.point_dict(check.claim)))

    rows = []
    for bench in an.timed_benchmarks(st):
        env = an.environment_of(ctx, bench)  # the copy bandwidth of the machine this point was timed on
        copy_bw = env.copy_bandwidth_bytes_per_s if env else None
        row = BenchmarkRow(point=an.point_dict(bench.point))
        stock = bench.variants.get(STOCK_VARIANT)
        for name, v in sorted(bench.variants.items()):
            if v.samples_us:
                row.median_us[name] = median(v.samples_us)
            if v.kernels_per_step is not None:
                row.kernels_per_layer[name] = v.kernels_per_step  # the collector already divided by layers
            bw = an.bandwidth(v)
            if bw is not None and copy_bw:
                row.bandwidth_fraction[name] = bw / copy_bw
            if stock is not None and name != STOCK_VARIANT:
                est = an.ratio(ctx, stock, v)
                if est is not None:
                    row.speedup[name] = est.ratio
                    row.speedup_ci[name] = (est.low, est.high)
            compiled = bench.variants.get(COMPILE_VARIANT)
            if compiled is not None and name not in (STOCK_VARIANT, COMPILE_VARIANT):
                est = an.ratio(ctx, compiled, v)
                if est is not None:
                    row.speedup_over.setdefault(COMPILE_VARIANT, {})[name] = est.ratio
                    row.speedup_over_ci.setdefault(COMPILE_VARIANT, {})[name] = (est.low, est.high)
        rows.append(row)

    environment: dict[str, str | int | float | None] = {}
    if p.environment is not None:
        env = p.environment
        environment = {
            "gpu_name": env.gpu_name, "gpu_count": env.gpu_count,
            "compute_capability": env.compute_capability,
            "driver": env.driver, "cuda": env.cuda, "torch": env.torch, "triton": env.triton,
            "python": env.python, "l2_bytes": env.l2_bytes,
            "copy_bandwidth_bytes_per_s": env.copy_bandwidth_bytes_per_s,
        }
        for key, value in sorted(env.clocks.items()):
            environment[f"clock_{key}"] = value if not isinstance(value, bool) else int(value)

    return EvidenceSummary(
        bundle_path=label,
        present=True,
        fresh=fr.fresh,
        subject_digest=fr.subject,
        head_digest=fr.head.sha256 if fr.head else None,
        changed_since=changed,
        signature_valid=all(s.valid for s in sigs),
        signer=", ".join(signers) if signers else None,
        collected_at=p.collected_at.isoformat() if p.collected_at else None,
        environment=environment,
        points=points,
        claims=claims,
        benchmarks=rows,
        evals=[EvalResult(name=e.name, value=e.value, threshold=e.threshold, direction=e.direction,
                          passed=e.passed()) for e in p.evals],
        sanitizers=[SanitizerResult(tool=s.tool, ran=s.ran, errors=s.errors, summary=s.summary[:2000])
                    for s in p.sanitizer],
    )
