"""`fasttrack audit`: a maintainer re-runs points of a contributor's bundle on their own GPU.

The re-run uses the same harness and the policy's baseline (`fasttrack collect`'s bench phase, restricted to
the chosen points); each point's medians and candidate/stock ratios are compared with the contributor's
within the policy's `[evidence.audit]` tolerances, and the harness's own oracle check must pass again. The
result is an audit record (`audits/<name>.json` in the bundle directory, SSH-signed like a statement) that
`verify` and the dashboard show: who re-ran what, where, and whether it agreed (FT346). MLPerf's TEST01
(re-run a sample of the results) and TEST04 (the same work must cost the same) are the model.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
import tempfile
from datetime import datetime
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from fasttrack.errors import InputError
from fasttrack.evidence.bundle import STOCK_VARIANT, Benchmark, Environment, Point, Statement, utc_now_iso
from fasttrack.evidence.stats import median

AUDIT_TYPE = "https://fasttrack.dev/audit/v1"
AUDIT_DIR = "audits"
NAME_RE = re.compile(r"^[A-Za-z0-9._-]{1,100}$")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False, populate_by_name=True)


class Comparison(_Strict):
    contributor: float | None
    auditor: float | None
    relative_difference: float | None
    within: bool


class AuditPoint(_Strict):
    point: Point
    medians_us: dict[str, Comparison] = Field(default_factory=dict)
    ratios: dict[str, Comparison] = Field(default_factory=dict)  # candidate -> stock/candidate
    oracle_ok: dict[str, bool] = Field(default_factory=dict)  # the auditor's own oracle check
    agreed: bool
    reasons: list[str] = Field(default_factory=list)


class AuditedStatement(_Strict):
    file: str = Field(min_length=1, max_length=256)
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    subject_digest: str | None = None


class AuditRecord(_Strict):
    type: Literal["https://fasttrack.dev/audit/v1"] = Field(
        default="https://fasttrack.dev/audit/v1", alias="_type"
    )
    statement: AuditedStatement
    audited_at: datetime
    command: str = Field(default="", max_length=4096)
    environment: Environment | None = None
    harness_digest: str | None = None
    baseline_digest: str | None = None
    median_tolerance: float
    ratio_tolerance: float
    seed: int | None = None
    points: list[AuditPoint] = Field(default_factory=list, max_length=4096)
    agreed: bool

    def to_json_bytes(self) -> bytes:
        data = self.model_dump(mode="json", by_alias=True)
        text = json.dumps(data, sort_keys=True, indent=2, ensure_ascii=False, allow_nan=False)
        return (text + "\n").encode()


def _rel(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or b == 0:
        return None
    return abs(a - b) / abs(b)


def _cmp(contributor: float | None, auditor: float | None, tol: float) -> Comparison:
    rel = _rel(contributor, auditor)
    return Comparison(
        contributor=contributor,
        auditor=auditor,
        relative_difference=rel,
        within=rel is not None and rel <= tol,
    )


def _medians(b: Benchmark) -> dict[str, float]:
    return {n: median(v.samples_us) for n, v in b.variants.items() if v.samples_us}


def compare_point(
    theirs: Benchmark, ours: Benchmark | None, median_tol: float, ratio_tol: float
) -> AuditPoint:
    """The auditor's re-run of one point against the contributor's record (pure)."""
    reasons: list[str] = []
    if ours is None or ours.not_run is not None:
        why = "the re-run produced no timed result"
        if ours is not None and ours.not_run:
            why += f": {ours.not_run[:300]}"
        return AuditPoint(point=theirs.point, agreed=False, reasons=[why])
    if ours.rejected:
        reasons += [f"the re-run was rejected: {r[:300]}" for r in ours.rejected[:5]]
    mt, mo = _medians(theirs), _medians(ours)
    medians = {n: _cmp(mt.get(n), mo.get(n), median_tol) for n in sorted(set(mt) | set(mo))}
    ratios: dict[str, Comparison] = {}
    for n in sorted(set(mt) & set(mo)):
        if n == STOCK_VARIANT or STOCK_VARIANT not in mt or STOCK_VARIANT not in mo:
            continue
        ratios[n] = _cmp(mt[STOCK_VARIANT] / mt[n], mo[STOCK_VARIANT] / mo[n], ratio_tol)
    for n, c in medians.items():
        if not c.within:
            reasons.append(f"{n}: median {c.contributor} us recorded, {c.auditor} us re-run")
    for n, c in ratios.items():
        if not c.within:
            reasons.append(
                f"{n}: stock/{n} {c.contributor:.3g}x recorded, {c.auditor:.3g}x re-run"
                if c.contributor is not None and c.auditor is not None
                else f"{n}: ratio unknown"
            )
    oracle_ok = {n: o.ok for n, o in ours.oracle.items()}
    reasons += [f"{n} fails the oracle check in the re-run" for n, ok in oracle_ok.items() if not ok]
    if not ours.oracle:
        reasons.append("the re-run recorded no oracle check")
    return AuditPoint(
        point=theirs.point,
        medians_us=medians,
        ratios=ratios,
        oracle_ok=oracle_ok,
        agreed=not reasons,
        reasons=reasons,
    )


def choose_points(st: Statement, wanted: list[str], sample: int, seed: int, claimed: list[str]) -> list[str]:
    """The point keys to re-run: those asked for, else the claimed points plus `sample` random timed ones."""
    timed = [b.point.key() for b in st.predicate.benchmarks if b.not_run is None and not b.rejected]
    if wanted:
        missing = [k for k in wanted if k not in timed]
        if missing:
            raise InputError(
                f"no timed point {missing[0]!r} in the statement",
                field="--point",
                fix="pass keys like 'NVIDIA H200|tp1|b1|c32768|bfloat16' (its timed points)",
            )
        return list(dict.fromkeys(wanted))
    chosen = [k for k in claimed if k in timed]
    rest = sorted(set(timed) - set(chosen))
    rng = random.Random(seed)
    chosen += rng.sample(rest, min(sample, len(rest)))
    return chosen


def audit_name(now: str) -> str:
    return "audit-" + re.sub(r"[^0-9A-Za-z]", "", now)


def write_record(bundle_dir: Path, record: AuditRecord, name: str) -> Path:
    if not NAME_RE.fullmatch(name):
        raise InputError(
            f"{name!r} is not an audit name", field="--name", fix="letters, digits, '.', '_', '-'"
        )
    out = bundle_dir / AUDIT_DIR
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{name}.json"
    path.write_bytes(record.to_json_bytes())
    return path


def run_audit(
    statement_path: Path,
    contribution: Path,
    *,
    points: list[str],
    sample: int,
    seed: int,
    policy: Path | None,
    engine_root: Path | None,
    iterations: int | None,
    command: str,
    flush_bytes: int | None = None,
    measure_bandwidth: bool = True,
) -> AuditRecord:
    """Re-run the chosen points with this machine's harness and the policy's baseline; compare."""
    from fasttrack.evidence.collect import CollectOptions, NullProgress, collect, resolve_yardstick
    from fasttrack.manifest import load_manifest
    from fasttrack.policy import load_policy

    raw = statement_path.read_bytes()
    try:
        st = Statement.model_validate_json(raw)
    except ValueError as exc:
        raise InputError(f"not a valid statement: {str(exc).splitlines()[0]}", path=statement_path) from None
    manifest = load_manifest(contribution)
    opts_probe = CollectOptions(contribution=contribution, policy=policy, engine_root=engine_root)
    yard = resolve_yardstick(opts_probe, manifest)
    pol = load_policy((policy or yard.engine_root / "policies" / "vllm.toml").resolve())
    tol = pol.evidence.audit
    claimed = [f"{c.gpu}|tp{c.tp}|b{c.batch}|c{c.context}|{c.dtype}" for c in manifest.claims]
    keys = choose_points(st, points, sample, seed, claimed)
    theirs = {b.point.key(): b for b in st.predicate.benchmarks if b.not_run is None}
    proto = next(iter(theirs.values())).protocol if theirs else None
    iters = iterations or (proto.iterations if proto else 30)
    with tempfile.TemporaryDirectory(prefix="fasttrack-audit-") as tmp:
        res = collect(
            CollectOptions(
                contribution=contribution,
                out=Path(tmp) / "out",
                work_dir=Path(tmp) / "work",
                phases=("bench",),
                iterations=iters,
                warmup=proto.warmup if proto else 3,
                policy=policy,
                engine_root=engine_root,
                only_points=tuple(keys),
                command=command,
                flush_bytes=flush_bytes,
                measure_bandwidth=measure_bandwidth,
                resume=False,
            ),
            NullProgress(),
        )
        ours_st = Statement.model_validate_json(res.statement_path.read_bytes())
    ours = {b.point.key(): b for b in ours_st.predicate.benchmarks}
    compared = [
        compare_point(theirs[k], ours.get(k), tol.median_tolerance, tol.ratio_tolerance) for k in keys
    ]
    reasons_global = []
    if st.predicate.baseline is not None and st.predicate.baseline.digest != yard.digest.sha256:
        reasons_global.append("the auditor's baseline differs from the statement's")
    agreed = bool(compared) and all(p.agreed for p in compared) and not reasons_global
    return AuditRecord(
        statement=AuditedStatement(
            file=statement_path.name, sha256=hashlib.sha256(raw).hexdigest(), subject_digest=st.subject_digest
        ),
        audited_at=utc_now_iso(),
        command=command[:4096],
        environment=ours_st.predicate.environment,
        harness_digest=yard.harness_digest,
        baseline_digest=yard.digest.sha256,
        median_tolerance=tol.median_tolerance,
        ratio_tolerance=tol.ratio_tolerance,
        seed=seed,
        points=compared,
        agreed=agreed,
    )
