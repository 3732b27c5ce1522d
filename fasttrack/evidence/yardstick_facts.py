"""Facts the yardstick rules (fasttrack/rules/yardstick.py) read: the policy's baseline for the model, its
digest in the judged tree, the machine's measured roofline, stock's fraction of it."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from fasttrack.errors import InputError
from fasttrack.evidence import analysis as an
from fasttrack.evidence.audit import AuditRecord
from fasttrack.evidence.bundle import STOCK_VARIANT, Benchmark, Environment
from fasttrack.evidence.digest import ContentDigest, contribution_digest
from fasttrack.evidence.signing import verify_bytes
from fasttrack.policy import BaselineSpec

if TYPE_CHECKING:
    from fasttrack.context import Context

# Why a point was not collected that is the machine's, not the contribution's (fasttrack.evidence.collect).
MACHINE_REASONS = ("not collected here", "collected in another bundle", "left out by --points-limit",
                   "left out by the point selection")


def baseline_spec(ctx: Context) -> BaselineSpec | None:
    if ctx.manifest is None:
        return None
    return ctx.policy.baselines.get(ctx.manifest.contribution.model)


def baseline_dir(ctx: Context, spec: BaselineSpec) -> Path | None:
    """The baseline package in the judged tree: beside the policy's checkout, else in the repository."""
    roots = [ctx.policy_path.resolve().parent.parent]
    if ctx.repo is not None:
        roots.append(ctx.repo)
    roots.append(ctx.head_dir)
    for root in roots:
        d = root / spec.root
        if d.is_dir():
            return d
    return None


def judged_baseline_digest(ctx: Context) -> ContentDigest | None:
    spec = baseline_spec(ctx)
    if spec is None:
        return None
    d = baseline_dir(ctx, spec)
    if d is None:
        return None
    try:
        return contribution_digest(d)
    except InputError:
        return None


def changed_files(recorded: dict[str, str], now: dict[str, str]) -> list[str]:
    return sorted(k for k in set(recorded) | set(now) if recorded.get(k) != now.get(k))


def compute_capability(ctx: Context, bench: Benchmark) -> str | None:
    env = an.environment_of(ctx, bench)
    return env.compute_capability if env is not None else None


def roofline(env: Environment | None) -> float | None:
    """The bandwidth a read-dominated layer can reach on that machine, measured in the same run: the read
    bandwidth where it was measured, else the copy bandwidth (bytes read plus written)."""
    if env is None:
        return None
    return env.read_bandwidth_bytes_per_s or env.copy_bandwidth_bytes_per_s


def stock_fraction(ctx: Context, bench: Benchmark) -> float | None:
    stock = bench.variants.get(STOCK_VARIANT)
    roof = roofline(an.environment_of(ctx, bench))
    bw = an.bandwidth(stock) if stock is not None else None
    if bw is None or not roof:
        return None
    return bw / roof


def machine_only(reasons: list[tuple[str, str]]) -> bool:
    return bool(reasons) and all(any(m in why for m in MACHINE_REASONS) for _, why in reasons)


@dataclass(frozen=True)
class AuditFacts:
    name: str
    record: AuditRecord | None
    problem: str | None
    signer: str | None
    signature_valid: bool | None  # None: unsigned
    statement_file: str | None  # the part it audits, when its sha256 matches one in the bundle
    signature_reason: str | None = None
    self_audit: bool = False  # signed by the principal who signed the statement it audits: not an audit


def audits(ctx: Context) -> list[AuditFacts]:
    """Every audit record beside the bundle, parsed, its signature checked against the allowed signers,
    and matched to the statement part (by sha256) it re-ran."""
    ev = ctx.evidence
    if ev is None or ctx.manifest is None:
        return []
    by_sha = {hashlib.sha256(p.statement_bytes).hexdigest(): p.name for p in ev.parts
              if p.statement_bytes is not None}
    signers = an.allowed_signers_path(ctx)
    out = []
    for a in ev.audits:
        if a.data is None:
            out.append(AuditFacts(a.name, None, a.problem, None, None, None))
            continue
        try:
            rec = AuditRecord.model_validate_json(a.data)
        except ValueError as exc:
            out.append(AuditFacts(a.name, None, f"not an audit record: {str(exc).splitlines()[0][:200]}",
                                  None, None, None))
            continue
        valid: bool | None = None
        signer = reason = None
        if a.signature is not None:
            res = verify_bytes(a.data, a.signature, signers, ctx.policy.evidence.namespace)
            valid, signer, reason = res.valid, res.principal if res.valid else None, res.reason
        audited = by_sha.get(rec.statement.sha256)
        part = next((p for p in ev.parts if p.name == audited), None) if valid and audited else None
        own = an.signature(ctx, part) if part is not None else None
        self_audit = own is not None and own.valid and own.principal == signer
        out.append(AuditFacts(a.name, rec, None, signer, valid, audited, reason, self_audit))
    return out
