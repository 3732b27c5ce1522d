"""The evidence part of the Verdict (`EvidenceSummary`): what the bundle shows, for renderers and the
dashboard. No raw samples; the numbers are the ones the FT3xx rules judged (same functions)."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from fasttrack.evidence import analysis as an
from fasttrack.evidence import yardstick_facts as yf
from fasttrack.evidence.bundle import COMPILE_VARIANT, STOCK_VARIANT, Benchmark, Environment, Statement
from fasttrack.evidence.loaded import LoadedPart
from fasttrack.evidence.signing import SignatureResult
from fasttrack.evidence.stats import median
from fasttrack.verdict import (
    AuditSummary,
    BenchmarkRow,
    ClaimResult,
    EvalResult,
    EvidencePart,
    EvidenceSummary,
    KernelGain,
    KernelTime,
    PartMachine,
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
    checked = {part.name: (f, s) for part, f, s in zip(pp, freshes, sigs, strict=True) if part is not None}
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
    claimed = {an.point_key(c) for c in ctx.manifest.claims} if ctx.manifest else set()
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
        _yardstick_facts(row, bench, yf.roofline(env), claimed)
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
        parts=[_part(ctx, part, *checked.get(part.name, (None, None))) for part in an.parts(ctx)],
        audits=[_audit(a) for a in yf.audits(ctx)],
    )


def _machine(env: Environment | None) -> PartMachine | None:
    if env is None:
        return None
    return PartMachine(gpu_name=env.gpu_name, gpu_count=env.gpu_count,
                       interconnect=link_summary(env.interconnect), driver=env.driver, torch=env.torch)


_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def link_summary(text: str | None) -> str | None:
    """One line saying how the GPUs are linked, from the recorded interconnect text: for `nvidia-smi topo -m`
    output, every GPU pair and its link ("GPU0-GPU1 NV18"); otherwise (the peer-access fallback, an unknown
    format) its first non-blank line. Terminal escapes are dropped. None when nothing was recorded."""
    lines = [_ANSI.sub("", line).strip() for line in (text or "").splitlines()]
    lines = [line for line in lines if line]
    if not lines:
        return None
    head = lines[0].split()
    gpus = [tok for tok in head if re.fullmatch(r"GPU\d+", tok)]
    pairs = []
    for line in lines[1:]:
        cells = line.split()
        if not cells or cells[0] not in gpus:
            continue
        i = gpus.index(cells[0])
        for j in range(i + 1, min(len(gpus), len(cells) - 1)):
            pairs.append(f"{gpus[i]}-{gpus[j]} {cells[1 + j]}")
    summary = ", ".join(pairs) if len(gpus) > 1 and pairs else " ".join(lines[0].split())
    return summary[:200]


def _points(st: Statement) -> list[tuple[int, str]]:
    """(tp, key) of every point the statement holds kernel tests or a timed benchmark for, sorted."""
    found = {(t.point.tp, an.point_key(t.point)) for t in st.predicate.kernel_tests if t.point is not None}
    found |= {(b.point.tp, an.point_key(b.point)) for b in an.timed_benchmarks(st)}
    return sorted(found)


def _part(ctx: Context, part: LoadedPart, fr: an.Freshness | None,
          sig: SignatureResult | None) -> EvidencePart:
    """One statement file as the summary shows it: its own signature, freshness, machine and points
    (`fr` and `sig`: the part's checks when the caller already made them)."""
    sig = sig if sig is not None else an.signature(ctx, part)
    fr = fr if fr is not None else an.freshness(ctx, part)
    st = part.statement
    points = _points(st) if st is not None else []
    by_tp: dict[str, int] = {}
    for tp, _ in points:
        by_tp[str(tp)] = by_tp.get(str(tp), 0) + 1
    return EvidencePart(
        file=part.name,
        signer=sig.principal if sig.valid else None,
        signature_valid=sig.valid if part.signature is not None else None,
        fresh=fr.fresh,
        collected_at=(st.predicate.collected_at.isoformat()
                      if st is not None and st.predicate.collected_at else None),
        machine=_machine(st.predicate.environment) if st is not None else None,
        points_by_tp=by_tp,
        points=[key for _, key in points],
        kernel_tests=len(st.predicate.kernel_tests) if st is not None else 0,
        benchmarks=len(an.timed_benchmarks(st)) if st is not None else 0,
    )


TOP_KERNELS = 8


def kernel_gains(stock: dict[str, float], candidate: dict[str, float], limit: int = TOP_KERNELS
                 ) -> list[KernelGain]:
    """The kernels that account for most of the difference between stock's and a candidate's profiled
    replays: per kernel name, stock's time minus the candidate's, largest saving first, then the largest
    losses (a kernel the candidate spends more in) so both directions are shown."""
    rows = [KernelGain(name=n[:200], stock_us=round(stock.get(n, 0.0), 3),
                       candidate_us=round(candidate.get(n, 0.0), 3),
                       saved_us=round(stock.get(n, 0.0) - candidate.get(n, 0.0), 3))
            for n in set(stock) | set(candidate)]
    rows.sort(key=lambda g: (-abs(g.saved_us), g.name))
    return rows[:limit]


def _yardstick_facts(row: BenchmarkRow, bench: Benchmark, roof: float | None, claimed: set[str]) -> None:
    row.claimed = an.point_key(bench.point) in claimed
    row.backends = dict(bench.backends)
    stock = bench.variants.get(STOCK_VARIANT)
    for name, v in bench.variants.items():
        bw = an.bandwidth(v)
        if bw is not None and roof:
            row.roofline_fraction[name] = bw / roof
        if v.kernel_times_us:
            top = sorted(v.kernel_times_us.items(), key=lambda kv: (-kv[1], kv[0]))[:TOP_KERNELS]
            row.top_kernels[name] = [KernelTime(name=k[:200], us=round(t, 3)) for k, t in top]
    if stock is None or not stock.kernel_times_us:
        return
    for name in an.candidates(bench):
        cand = bench.variants[name].kernel_times_us
        if cand:
            row.gain_from[name] = kernel_gains(stock.kernel_times_us, cand)


def _audit(a: yf.AuditFacts) -> AuditSummary:
    rec = a.record
    env = rec.environment if rec is not None else None
    return AuditSummary(file=a.name, auditor=a.signer, signature_valid=a.signature_valid,
                        statement=a.statement_file, gpu=env.gpu_name if env else None,
                        audited_at=rec.audited_at.isoformat() if rec else None,
                        points=len(rec.points) if rec else 0,
                        # a self-audit (signed by the statement's own signer) proves nothing
                        agreed=rec.agreed if rec and not a.self_audit else None)
