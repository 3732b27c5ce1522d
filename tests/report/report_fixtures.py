"""Verdicts for the dashboard tests, built in code: passing, failing, stale, missing evidence, huge, hostile.

The numbers are shaped like the reference contribution's (a fused MLA decode layer on H200): stock and
torch.compile baselines, a fused candidate, speedups that shrink as the batch grows.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from html.parser import HTMLParser
from typing import Any

from fasttrack.findings import Finding
from fasttrack.verdict import (
    AffectedModel,
    AffectedShared,
    BenchmarkRow,
    BlastRadius,
    ChangedFile,
    ChangeStatus,
    ClaimResult,
    EvalResult,
    EvidenceSummary,
    PointEvidence,
    PointStatus,
    SanitizerResult,
    Verdict,
    Witness,
)

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
GPU = "NVIDIA H200"
RULES = [f"FT{n}" for n in (*range(100, 114), 201, 202, 203, *range(300, 323), 401)]


def envelope(
    hardware: tuple[str, ...] = (GPU,),
    tp: tuple[int, ...] = (1,),
    batches: tuple[int, ...] = (1, 2, 8, 32, 64),
    contexts: tuple[int, ...] = (1, 4096, 32768),
    dtypes: tuple[str, ...] = ("bfloat16",),
) -> dict[str, Any]:
    cc = {"NVIDIA H200": "9.0", "NVIDIA B200": "10.0"}
    return {
        "hardware": [{"name": h, "compute_capability": cc.get(h, "9.0")} for h in hardware],
        "tp": list(tp),
        "pp": [1],
        "expert_parallel": False,
        "batch": {"min": min(batches), "max": max(batches)},
        "context": {"min": min(contexts), "max": max(contexts)},
        "dtypes": list(dtypes),
        "cuda_graph": "full",
        "spec_decode_widths": [1],
        "mixed_prefill_decode": False,
        "grid_batches": list(batches),
        "grid_contexts": list(contexts),
    }


def fallback(metric: str = "fasttrack_kimi_k3_fallback_total") -> dict[str, object]:
    return {
        "metric": metric,
        "stock_path": "kimi_k3.stock:forward",
        "guard": "kimi_k3.guard:decide",
        "log_reasons": True,
    }


def point(
    batch: int, context: int, gpu: str = GPU, tp: int = 1, dtype: str = "bfloat16"
) -> dict[str, str | int]:
    return {"gpu": gpu, "tp": tp, "batch": batch, "context": context, "dtype": dtype}


def bench_row(batch: int, context: int, gpu: str = GPU, tp: int = 1, dtype: str = "bfloat16") -> BenchmarkRow:
    """Stock slows with batch and context; fused gains most at small batch; compile sits in between."""
    stock = 40.0 + 2.2 * batch + context / 1200
    fused = stock / (2.3 - 0.18 * math.log2(batch))
    compile_ = stock / (1.45 - 0.05 * math.log2(batch))
    s_f, s_c = stock / fused, stock / compile_
    return BenchmarkRow(
        point=point(batch, context, gpu, tp, dtype),
        median_us={"stock": round(stock, 2), "compile": round(compile_, 2), "fused": round(fused, 2)},
        speedup={"fused": s_f, "compile": s_c},
        speedup_ci={"fused": (s_f * 0.97, s_f * 1.03), "compile": (s_c * 0.98, s_c * 1.02)},
        kernels_per_layer={"stock": 14.0, "compile": 9.0, "fused": 2.0},
        bandwidth_fraction={"stock": 0.31 + 0.004 * batch, "compile": 0.42, "fused": 0.58 + 0.003 * batch},
        speedup_over={"compile": {"fused": compile_ / fused}},
        speedup_over_ci={"compile": {"fused": (compile_ / fused * 0.96, compile_ / fused * 1.04)}},
    )


def evidence(
    env: dict[str, Any],
    *,
    status: PointStatus = PointStatus.PASSED,
    age_days: float = 3,
    signer: str | None = "alice@gpu-lab.example",
    signature_valid: bool | None = True,
    fresh: bool | None = True,
) -> EvidenceSummary:
    batches, contexts = env["grid_batches"], env["grid_contexts"]
    points, rows = [], []
    for hw in env["hardware"]:
        for tp in env["tp"]:
            for dt in env["dtypes"]:
                for b in batches:
                    for c in contexts:
                        points.append(
                            PointEvidence(
                                point=point(b, c, hw["name"], tp, dt),
                                status=status,
                                tests=6,
                                failed=0,
                                max_error=3.1e-3,
                            )
                        )
                        rows.append(bench_row(b, c, hw["name"], tp, dt))
    b1 = bench_row(1, 4096)
    b64 = bench_row(64, 4096)
    claims = [
        ClaimResult(
            name="fused-vs-stock-tp1-b1-c4096",
            claimed=1.9,
            median_ratio=b1.speedup["fused"],
            ci_low=b1.speedup_ci["fused"][0],
            ci_high=b1.speedup_ci["fused"][1],
            holds=True,
            point=point(1, 4096),
        ),
        ClaimResult(
            name="fused-vs-compile-tp1-b1-c4096",
            claimed=1.3,
            median_ratio=b1.speedup_over["compile"]["fused"],
            ci_low=b1.speedup_over_ci["compile"]["fused"][0],
            ci_high=b1.speedup_over_ci["compile"]["fused"][1],
            holds=True,
            point=point(1, 4096),
        ),
        ClaimResult(
            name="fused-vs-stock-tp1-b64-c4096",
            claimed=1.1,
            median_ratio=b64.speedup["fused"],
            ci_low=b64.speedup_ci["fused"][0],
            ci_high=b64.speedup_ci["fused"][1],
            holds=True,
            point=point(64, 4096),
        ),
    ]
    return EvidenceSummary(
        bundle_path="evidence/kimi_k3",
        present=True,
        fresh=fresh,
        subject_digest="sha256:" + "ab" * 32,
        head_digest="sha256:" + ("ab" if fresh else "cd") * 32,
        signature_valid=signature_valid,
        signer=signer,
        collected_at=(NOW - timedelta(days=age_days)).isoformat(timespec="seconds"),
        environment={
            "gpu_name": GPU,
            "gpu_count": 1,
            "compute_capability": "9.0",
            "driver": "570.86.15",
            "cuda": "12.8",
            "torch": "2.13.0",
            "triton": "3.6.0",
            "python": "3.11.9",
            "copy_bandwidth_bytes_per_s": 4.1e12,
        },
        points=points,
        claims=claims,
        benchmarks=rows,
        evals=[
            EvalResult(name="logits_max_abs_diff", value=0.011, threshold=0.05, direction="max", passed=True),
            EvalResult(
                name="greedy_token_agreement", value=0.998, threshold=0.99, direction="min", passed=True
            ),
            EvalResult(
                name="gsm8k_exact_match_delta", value=-0.002, threshold=-0.01, direction="min", passed=True
            ),
        ],
        sanitizers=[
            SanitizerResult(tool=t, ran=True, errors=0, summary="========= ERROR SUMMARY: 0 errors")
            for t in ("memcheck", "racecheck", "synccheck")
        ],
    )


def changed_files(n: int = 9, prefix: str = "kernels/kimi_k3") -> list[ChangedFile]:
    names = [
        "__init__.py",
        "config.py",
        "guard.py",
        "layer.py",
        "reference.py",
        "fused/__init__.py",
        "fused/kernels.py",
        "fused/launch.py",
        "fasttrack.toml",
    ]
    out = []
    for i in range(n):
        name = names[i] if i < len(names) else f"fused/gen/kernel_{i:04d}.py"
        out.append(
            ChangedFile(
                path=f"{prefix}/{name}",
                status=ChangeStatus.ADDED,
                zone="model-local",
                zone_kind="model-local",
                added_lines=40 + 7 * i,
                removed_lines=0,
                engine_path=f"vllm/models/kimi_k3/nvidia/specialized_decode/hopper/{name}",
            )
        )
    return out


def blast(models: int = 0, shared: int = 0) -> BlastRadius:
    changed = "vllm.models.kimi_k3.nvidia.specialized_decode.hopper.layer"
    return BlastRadius(
        computed=True,
        changed_modules=[changed, changed.rsplit(".", 1)[0] + ".guard"],
        models=[
            AffectedModel(
                name=f"model_{i}",
                kind="package",
                module=f"vllm.models.model_{i}.model",
                architectures=[f"Model{i}ForCausalLM"],
                witness=Witness(
                    chain=[f"vllm.models.model_{i}.model", "vllm.models.kimi_k3.model", changed],
                    lines=[12, 88, None],
                    function_level=[False, True, False],
                ),
            )
            for i in range(models)
        ],
        shared=[
            AffectedShared(
                module=f"vllm.model_executor.layers.shared_{i}",
                zone="model-executor",
                witness=Witness(chain=[f"vllm.model_executor.layers.shared_{i}", changed], lines=[5, None]),
            )
            for i in range(shared)
        ],
        models_total=models,
        shared_total=shared,
        graph_modules=3176,
        naive_closure=3 * models + shared,
        note="hub modules not followed: vllm.model_executor.models.registry",
        seconds=0.8,
    )


def verdict(
    *,
    name: str = "kimi_k3",
    pr: int | None = None,
    findings: list[Finding] | None = None,
    ev: EvidenceSummary | None = None,
    env: dict[str, Any] | None = None,
    br: BlastRadius | None = None,
    files: list[ChangedFile] | None = None,
    generated: datetime = NOW,
    head: str | None = None,
) -> Verdict:
    found = findings or []
    env = env if env is not None else envelope()
    return Verdict(
        tool_version="0.1.0",
        verdict="fail" if any(f.severity.value == "error" for f in found) else "pass",
        mode="range" if pr is not None else "contribution",
        model="kimi_k3",
        contribution=name,
        pr=pr,
        repo="vllm-project/vllm" if pr is not None else None,
        head=head,
        base="1" * 40 if pr is not None else None,
        policy="policies/vllm.toml",
        policy_digest="sha256:" + "0f" * 32,
        changed_files=files if files is not None else changed_files(),
        findings=found,
        blast_radius=br or blast(),
        envelope=env,
        fallback=fallback(),
        evidence=ev,
        rules_run=RULES,
        generated_at=generated.isoformat(timespec="seconds"),
    )


def passing(**kw: Any) -> Verdict:
    env = envelope()
    return verdict(
        ev=evidence(env),
        env=env,
        findings=[Finding.info("FT112", "blast radius: 2 changed modules reach 0 other model units")],
        **kw,
    )


def failing(**kw: Any) -> Verdict:
    env = envelope()
    ev = evidence(env)
    ev.points[3] = ev.points[3].model_copy(update={"status": PointStatus.FAILED, "failed": 2})
    ev.claims[0] = ev.claims[0].model_copy(update={"holds": False, "claimed": 2.5})
    ev.evals[1] = ev.evals[1].model_copy(update={"value": 0.97, "passed": False})
    ev.sanitizers[1] = SanitizerResult(
        tool="racecheck",
        ran=True,
        errors=3,
        summary="========= RACECHECK SUMMARY: 3 hazards displayed (3 errors)",
    )
    findings = [
        Finding.error(
            "FT307",
            "2 kernel tests failed at gpu=NVIDIA H200, tp=1, batch=2, context=1",
            point=point(2, 1),
            fix="fix the kernel or shrink the envelope to exclude the point",
        ),
        Finding.error(
            "FT308",
            "claim fused-vs-stock-tp1-b1-c4096 does not hold: CI lower bound 2.23 < 2.5",
            fix="lower the claim to what the lower bound supports, or speed the kernel up",
        ),
        Finding.error(
            "FT311",
            "fused moves 6.2 TB/s at batch 64, above the H200's 4.8 TB/s peak",
            evidence_file="evidence/kimi_k3/statement.json",
            fix="check the timing (side streams, cached outputs) and re-collect",
        ),
        Finding.error(
            "FT314",
            "eval greedy_token_agreement 0.97 is below its threshold 0.99",
            fix="fix the numerics; evals are not negotiable",
        ),
        Finding.error("FT315", "racecheck found 3 errors", fix="fix the shared-memory race"),
        Finding.warning("FT318", "evidence is 3 days old"),
    ]
    return verdict(ev=ev, env=env, findings=findings, **kw)


def stale(**kw: Any) -> Verdict:
    env = envelope()
    ev = evidence(env, status=PointStatus.STALE, fresh=False, age_days=120)
    ev = ev.model_copy(
        update={
            "changed_since": ["kernels/kimi_k3/fused/kernels.py"],
            "claims": [c.model_copy(update={"holds": False}) for c in ev.claims],
        }
    )
    f = Finding.error(
        "FT302",
        "the evidence was collected for other code: 1 file changed since (kernels/kimi_k3/fused/kernels.py)",
        fix="re-run `fasttrack collect` on the PR head",
    )
    return verdict(ev=ev, env=env, findings=[f], **kw)


def missing(**kw: Any) -> Verdict:
    f = Finding.error(
        "FT300",
        "no evidence directory evidence/kimi_k3/ for contribution 'kimi_k3'",
        evidence_file="evidence/kimi_k3/statement.json",
        fix="re-run `fasttrack collect kernels/kimi_k3` on a GPU machine, sign it, and commit it",
    )
    return verdict(ev=EvidenceSummary(bundle_path="evidence/kimi_k3", present=False), findings=[f], **kw)


def huge(n_findings: int = 600, n_files: int = 420, **kw: Any) -> Verdict:
    findings = []
    for i in range(n_findings):
        sev = ("error", "warning", "info")[i % 3]
        findings.append(
            Finding(
                code=f"FT1{i % 14:02d}",
                severity=sev,
                message=f"finding number {i} about file {i}",
                path=f"vllm/shared/module_{i:04d}.py",
                line=1 + i % 300,
                fix=f"fix number {i}",
            )
        )
    return verdict(
        findings=findings,
        files=changed_files(n_files, "vllm/models/kimi_k3"),
        br=blast(40, 25),
        ev=EvidenceSummary(bundle_path="evidence/kimi_k3", present=False),
        **kw,
    )


HOSTILE = '<script>alert("x")</script><img src=x onerror=alert(1)>'


def hostile(**kw: Any) -> Verdict:
    """Every free-text field carries markup: it must render as text everywhere."""
    env = envelope()
    ev = evidence(env, signer=f"mallory{HOSTILE}@example.com")
    ev = ev.model_copy(
        update={
            "evals": [
                EvalResult(name=f"eval{HOSTILE}", value=1.0, threshold=2.0, direction="max", passed=True)
            ],
            "sanitizers": [SanitizerResult(tool="memcheck", ran=True, errors=0, summary=f"ok {HOSTILE}")],
            "changed_since": [f"kernels/{HOSTILE}.py"],
            "bundle_path": f"evidence/{HOSTILE}",
        }
    )
    findings = [
        Finding.error("FT101", f"message {HOSTILE}", path=f"vllm/{HOSTILE}.py", line=3, fix=f"fix {HOSTILE}"),
        Finding.warning("FT318", f"point {HOSTILE}", point={"gpu": HOSTILE, "batch": 1}),
    ]
    br = blast(1, 0)
    br.models[0] = br.models[0].model_copy(
        update={
            "name": f"model{HOSTILE}",
            "witness": Witness(
                chain=[f"vllm.models.{HOSTILE}", "vllm.models.kimi_k3.layer"], lines=[1, None]
            ),
        }
    )
    files = [
        ChangedFile(
            path=f"kernels/kimi_k3/{HOSTILE}.py",
            status=ChangeStatus.ADDED,
            zone=HOSTILE,
            added_lines=1,
            removed_lines=0,
        )
    ]
    return verdict(
        name=f"evil{HOSTILE}", ev=ev, env=env, findings=findings, br=br, files=files, **kw
    ).model_copy(update={"fallback": fallback(metric=f"m{HOSTILE}"), "policy": f"policies/{HOSTILE}.toml"})


def wide(**kw: Any) -> Verdict:
    """Two hardware kinds, two TP sizes, two dtypes: B200 has no evidence (H200-only evidence), one H200 point
    failed in fp8, and the TP2 points are stale."""
    env = envelope(
        hardware=(GPU, "NVIDIA B200"),
        tp=(1, 2),
        batches=(1, 2, 16, 128),
        contexts=(1, 8192, 131072),
        dtypes=("bfloat16", "fp8"),
    )
    full = evidence(env)
    points = []
    for p in full.points:
        if p.point["gpu"] == "NVIDIA B200":
            continue  # no evidence from that hardware: missing
        if p.point["tp"] == 2:
            p = p.model_copy(update={"status": PointStatus.STALE})
        elif p.point["dtype"] == "fp8" and p.point["batch"] == 128 and p.point["context"] == 131072:
            p = p.model_copy(update={"status": PointStatus.FAILED, "failed": 1, "max_error": 0.21})
        points.append(p)
    benches = [
        b
        for b in full.benchmarks
        if b.point["gpu"] == GPU
        and b.point["tp"] == 1
        and b.point["dtype"] == "bfloat16"
        and b.point["context"] == 8192
    ]
    ev = full.model_copy(update={"points": points, "benchmarks": benches, "claims": []})
    findings = [
        Finding.error(
            "FT306",
            "no evidence from NVIDIA B200, which the envelope declares",
            fix="collect on a B200 or drop it from envelope.hardware",
        ),
        Finding.error(
            "FT307",
            "1 kernel test failed at NVIDIA H200 tp=1 batch=128 context=131072 fp8",
            fix="fix the fp8 path or shrink the envelope",
        ),
    ]
    return verdict(name="kimi_k3_wide", ev=ev, env=env, findings=findings, br=blast(2, 3), **kw)


def grid_points(env: dict[str, Any]) -> int:
    """How many points a declared envelope has (batch 1, 2 and the ends always included)."""
    from fasttrack.manifest import Envelope

    e = Envelope.model_validate(env)
    return len(e.points())


class Doc(HTMLParser):
    """Every start tag with its attributes, and the text, of one HTML page."""

    def __init__(self, text: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []
        self.feed(text)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data: str) -> None:
        self.text.append(data)

    def find(self, tag: str, **attrs: str) -> list[dict[str, str | None]]:
        return [
            a
            for t, a in self.tags
            if t == tag and all(a.get(k.replace("_", "-")) == v for k, v in attrs.items())
        ]

    @property
    def plain(self) -> str:
        return " ".join(" ".join(self.text).split())
